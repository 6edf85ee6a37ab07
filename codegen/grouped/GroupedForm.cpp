//===- GroupedForm.cpp - the grouped expert GEMMs' choice of form ---------===//
#include "codegen/grouped/GroupedForm.h"

#include "codegen/Limits.h"
#include "codegen/Options.h"
#include "codegen/gemm/GemmEmitter.h"
#include "codegen/gemm/GemmForm.h"

#include <algorithm>
#include <cstdint>

namespace strata::codegen {

GroupedForm selectGrouped(const GroupedProblem &p, const format::Plan &plan) {
  using namespace detail::gemm;
  GroupedForm f;
  // Plans with state decode: runs of a few rows take the decode form, the
  // tiles the rows after them.
  const int64_t own = option(plan, Opt::GroupedDecodeRows);
  const int64_t decodeRows = own >= 0 ? own : option(plan, Opt::GemmDecodeRows);
  if (p.state && decodeRows > 0 && p.k % 8 == 0 &&
      (!p.wQuant || p.blockSize % 8 == 0)) {
    f.decodeRows = decodeRows;
    f.tileFrom = decodeRows + 1;
  }
  // The TMA form's pre-launch dequantises every expert's weights whatever
  // T is: it pays off from kGroupedTmaRows rows per expert.
  const int64_t from = std::max<int64_t>(
      kTmaMinTokens,
      (p.experts * kGroupedTmaRows + p.slotsPerToken - 1) / p.slotsPerToken);
  // gfx1151 (sm_90 under portable-forms): the same conversion of every
  // expert's quantised weights, once, then the plain tile over them, from
  // the rows an expert where that pays on the target (dequantOnceFrom:
  // sm_90's 192, gfx1151's 792).
  const bool portable =
      p.target == "gfx1151" || option(plan, Opt::PortableForms) != 0;
  if (portable) {
    const int64_t perExpert = dequantOnceFrom(p.target, kGroupedTmaRows);
    const int64_t dqFrom = std::max<int64_t>(
        dequantOnceFrom(p.target, kTmaMinTokens),
        (p.experts * perExpert + p.slotsPerToken - 1) / p.slotsPerToken);
    if (p.maxTokens >= dqFrom && p.mma && p.aBf16 && p.wQuant && p.sameTypes &&
        p.k % 8 == 0 && p.blockSize % 8 == 0 &&
        option(plan, Opt::GemmDequantOnce) == 0)
      f.dequantFrom = dqFrom;
    return f;
  }
  if (p.maxTokens < from || p.target != "sm_90" || !p.mma || !p.aBf16 ||
      p.k % 8 != 0 || !(p.w16 || p.wQuant) || !p.sameTypes ||
      option(plan, Opt::GemmTma) == 0 ||
      option(plan, Opt::GemmTmaGrouped) == 0 ||
      (p.wQuant && option(plan, Opt::GemmTmaQuant) == 0))
    return f;
  // The tile's columns: gate and up side by side (bh of each, the pair's
  // rows interleaved so in the workspace), or the widest that covers N.
  f.blocks = pairOn(plan) ? 2 : 1;
  if (p.swiglu) {
    f.bh = f.blocks == 1 && (p.n % 128 == 0 || p.n > 256) ? 128 : 64;
    f.bn = 2 * f.bh;
    f.nw = (p.n + f.bh - 1) / f.bh * f.bn;
  } else {
    f.bn = f.blocks == 1 ? GemmEmitter::tmaColumns(p.n)
                         : std::min(128, GemmEmitter::tmaColumns(p.n));
    f.nw = p.n;
  }
  f.stageBytes = kTmaARows * 128 + f.bn * 128;
  const int64_t kt = (p.k + 63) / 64;
  f.stages = static_cast<int>(std::min<int64_t>(
      {8, kt < 2 ? 2 : kt, tmaRingBytes(f.blocks) / f.stageBytes}));
  if (f.stages < 2 || p.experts * f.nw > INT32_MAX)
    return f;
  f.tmaFrom = from;
  return f;
}

} // namespace strata::codegen
