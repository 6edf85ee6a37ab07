//===- DeltaForm.cpp - the gated delta rule's choice of form --------------===//
#include "codegen/delta/DeltaForm.h"

#include "codegen/Limits.h"
#include "ir/Target.h"

#include <algorithm>
#include <cassert>

namespace strata::codegen {

const char *deltaFormName(DeltaForm::Kind kind) {
  switch (kind) {
  case DeltaForm::Kind::TwoPass:
    return "two-pass";
  case DeltaForm::Kind::Mma:
    return "mma";
  case DeltaForm::Kind::Chunked:
    return "chunked";
  }
  return "?";
}

DeltaForm selectDelta(const DeltaShape &s, const std::string &target) {
  DeltaForm f;
  const int64_t dk = s.keyDim, dv = s.valueDim;
  const ir::Target *t = ir::lookupTarget(target);
  assert(t && t->gpu && "delta forms are for GPU targets");
  const int64_t limit = t->sharedPerBlock - 1024;
  // The split form (delta_prep + delta_seq): V's column blocks whole and
  // copyable by 16-byte pieces, records in the kernel's workspace (the
  // body's temporaries are slices this family reads as views, never
  // stored).
  if (s.matrixUnits && dv % 32 == 0 && s.valueAligned) {
    const int64_t chunk = 32, lk = dk + 8, lc = chunk + 8, ncol = 32;
    const int64_t buf = (2 * chunk * lk + 4 * chunk * lc) * 2 +
                        chunk * ncol * s.vBytes + 4 * chunk;
    const int64_t fixed = 2 * (2 * ncol * lk + 6 * chunk * (ncol + 8));
    const int nbuf = 2 * buf + fixed <= limit ? 2 : 1;
    const int64_t seqBytes = nbuf * buf + fixed;
    const int64_t rec = 4 * chunk * chunk * 2 + 4 * chunk;
    const int64_t prepBytes = 2 * chunk * lk * 2 + rec +
                              4 * (2 * chunk * (chunk + 1) + 16 * 17 + chunk);
    if (seqBytes <= limit && prepBytes <= limit) {
      f.kind = DeltaForm::Kind::TwoPass;
      f.chunk = chunk, f.threads = 128, f.buffers = nbuf;
      f.sharedBytes = static_cast<uint64_t>(seqBytes);
      f.prepSharedBytes = static_cast<uint64_t>(prepBytes);
      f.recordBytes = rec;
      return f;
    }
  }
  // bf16 q and k (the GPU policy): the matrix-unit form (delta_mma),
  // 32-token chunks where its tiles fit the target's shared memory, else
  // 16.
  if (s.matrixUnits) {
    auto need = [&](int64_t c) {
      int64_t lk = dk + 8, lc = c + 8, ncol = 32;
      return 2 * (2 * c * lk + dk * lc + 2 * ncol * lk + 4 * c * lc +
                  6 * ncol * lc) +
             4 * (2 * c * (c + 1) + 16 * 17 + 2 * c);
    };
    const int64_t chunk = need(32) <= limit ? 32 : 16;
    if (need(chunk) <= limit) {
      f.kind = DeltaForm::Kind::Mma;
      f.chunk = chunk, f.threads = 128;
      f.sharedBytes = static_cast<uint64_t>(need(chunk));
      return f;
    }
  }
  // Chunked form: blocks of NCOL state columns per head (columns evolve
  // independently), SPLIT threads per column holding R = DK / SPLIT rows
  // each, chunks of C tokens; 16 rows per thread where the key dim allows
  // (8 threads per column at 128: twice the threads of 32 rows, half the
  // serial work each).
  f.kind = DeltaForm::Kind::Chunked;
  f.rows = dk % 16 == 0 ? 16 : static_cast<int>(dk);
  f.split = static_cast<int>(dk) / f.rows;
  if (f.split > 32 || (f.split & (f.split - 1))) {
    f.unsupported = "key dim does not split into powers of two of 32 rows";
    return f;
  }
  f.columns = static_cast<int>(std::min<int64_t>(32, dv));
  // 32-token chunks where the chunk's tiles fit the static shared budget,
  // else 16 (f32 keys at 128 dims).
  int chunk = 32;
  for (; chunk > 8; chunk /= 2) {
    int64_t need = chunk * (dk * (s.kBytes + s.qBytes) + 8) +
                   2 * chunk * (chunk + 1) * 4 +
                   3 * chunk * std::min<int64_t>(32, dv) * 4 + 2 * chunk * 4;
    if (need <= staticSharedBudget())
      break;
  }
  f.chunk = chunk;
  f.threads = int64_t(f.columns) * f.split;
  if (f.threads > 1024 || f.threads % 32)
    f.unsupported = "state column blocks do not fill whole waves";
  return f;
}

} // namespace strata::codegen
