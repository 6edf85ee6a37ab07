//===- DeltaEmitter.cpp - the gated delta rule family ---------------------===//
//
// Prints the form selectDelta chose (DeltaForm.h): delta_prep's
// pre-launch and delta_seq, delta_mma, or delta_chunked. The device code
// is under codegen/device/delta/.
//
//===----------------------------------------------------------------------===//
#include "codegen/SequenceView.h"
#include "codegen/delta/DeltaForm.h"

#include <cmath>
#include <string>
#include <utility>

namespace strata::codegen::detail {

using format::BodyOp;
using format::Recipe;

void emitDeltaKernel(Emitter &e) {
  SequenceView s(e);
  const BodyOp &op = s.resolve(Recipe::GatedDeltaRule);
  Access q = s.access(op.inputs[0]), k = s.access(op.inputs[1]),
         v = s.access(op.inputs[2]), g = s.access(op.inputs[3]),
         b = s.access(op.inputs[4]);
  if (g.off || b.off || g.stride[0] != g.shape[1].constant ||
      b.stride[0] != b.shape[1].constant)
    throw Unsupported("strided decay or beta");
  Tensor y = e.tensor(op.outputs[0]);
  int64_t hk = q.shape[1].constant, dk = q.shape[2].constant;
  int64_t h = v.shape[1].constant, dv = v.shape[2].constant;
  if (dk > 128 || dk % 2)
    throw Unsupported("key dim above 128 or odd");
  float scale = e.hasAttr(op, "scale")
                    ? static_cast<float>(e.floatAttr(op, "scale"))
                    : 1.0f / std::sqrt(static_cast<float>(dk));
  std::string params = e.params();
  bool tiled = e.strAttr(op, "heads") == "tiled";
  // Select (codegen/delta/DeltaForm: pure, unit-tested), then print. bf16
  // q and k (the GPU policy) take the matrix units; f32 inputs (the f32
  // policy's bar is NMSE 1e-5) keep the FMA form.
  DeltaShape shape;
  shape.keyHeads = hk, shape.keyDim = dk, shape.heads = h, shape.valueDim = dv;
  bool mma = q.t.ctype == "bf16" && k.t.ctype == "bf16" && dk % 32 == 0;
  for (const Access *a : {&q, &k})
    mma = mma && a->off % 8 == 0 && a->stride[0] % 8 == 0 &&
          a->stride[1] % 8 == 0;
  shape.matrixUnits = mma;
  auto bytesOf = [](const Tensor &t) -> int64_t {
    return t.ctype == "float" ? 4 : 2;
  };
  shape.qBytes = bytesOf(q.t), shape.kBytes = bytesOf(k.t);
  shape.vBytes = bytesOf(v.t);
  const int64_t vAlign = 16 / shape.vBytes;
  shape.valueAligned = v.off % vAlign == 0 && v.stride[0] % vAlign == 0 &&
                       v.stride[1] % vAlign == 0;
  const DeltaForm f = selectDelta(shape, e.target);
  if (!f.unsupported.empty())
    throw Unsupported(f.unsupported);
  const int64_t chunk = f.chunk;
  switch (f.kind) {
  case DeltaForm::Kind::TwoPass: {
    e.workspace = true;
    std::string params = e.params();
    e.line("STRATA_KERNEL(128) void @SYMBOL@_prep({}) {{", params);
    e.prologue();
    e.line("  delta_prep<{}, {}, {}, {}, {}, {}L, {}L, {}L, {}L>(", h, hk, dk,
           tiled, chunk, q.stride[0], q.stride[1], k.stride[0], k.stride[1]);
    e.line("      {} + {}, {} + {}, {}, {}, (uint8_t *)ws, T);", q.t.ptr, q.off,
           k.t.ptr, k.off, g.t.ptr, b.t.ptr);
    e.line("}}");
    e.line("STRATA_KERNEL(128) void @SYMBOL@({}) {{", params);
    e.prologue();
    e.line("  delta_seq<{}, {}, {}, {}, {}, {}, {}, {}L, {}L, {}L, {}L, {}L, "
           "{}L>(",
           h, hk, dk, dv, tiled, chunk, f.buffers, q.stride[0], q.stride[1],
           k.stride[0], k.stride[1], v.stride[0], v.stride[1]);
    e.line("      {} + {}, {} + {}, {} + {}, (const uint8_t *)ws, {}, T, "
           "{});",
           q.t.ptr, q.off, k.t.ptr, k.off, v.t.ptr, v.off, y.ptr,
           floatLit(scale));
    e.line("}}");
    e.out.sharedBytes = f.sharedBytes;
    e.out.grid = {{0, h, 1}, {0, dv / 32, 1}, {0, 1, 1}};
    e.out.block = {128, 1, 1};
    format::PlanPreLaunch pre;
    pre.grid = {{1, 1, chunk}, {0, h, 1}, {0, 1, 1}};
    pre.block = {128, 1, 1};
    pre.sharedBytes = f.prepSharedBytes;
    e.out.pre = std::move(pre);
    // One record per chunk (T / C + 1 >= the chunks of T) and head.
    e.out.workspace = {h * f.recordBytes, h * f.recordBytes, chunk};
    return;
  }
  case DeltaForm::Kind::Mma:
    e.out.sharedBytes = f.sharedBytes;
    e.line("STRATA_KERNEL(128) void @SYMBOL@({}) {{", params);
    e.prologue();
    e.line("  delta_mma<{}, {}, {}, {}, {}, {}, {}L, {}L, {}L, {}L, {}L, "
           "{}L>(",
           h, hk, dk, dv, tiled, chunk, q.stride[0], q.stride[1], k.stride[0],
           k.stride[1], v.stride[0], v.stride[1]);
    e.line("      {} + {}, {} + {}, {} + {}, {}, {}, {}, T, {});", q.t.ptr,
           q.off, k.t.ptr, k.off, v.t.ptr, v.off, g.t.ptr, b.t.ptr, y.ptr,
           floatLit(scale));
    e.line("}}");
    e.out.grid = {{0, h, 1}, {0, (dv + 31) / 32, 1}, {0, 1, 1}};
    e.out.block = {128, 1, 1};
    return;
  case DeltaForm::Kind::Chunked:
    break;
  }
  e.line("STRATA_KERNEL({}) void @SYMBOL@({}) {{", f.threads, params);
  e.prologue();
  e.line("  delta_chunked<{}, {}, {}, {}, {}, {}, {}, {}, {}L, {}L, {}L, {}L, "
         "{}L, {}L>(",
         h, hk, dk, dv, tiled, chunk, f.columns, f.split, q.stride[0],
         q.stride[1], k.stride[0], k.stride[1], v.stride[0], v.stride[1]);
  e.line("      {} + {}, {} + {}, {} + {}, {}, {}, {}, T, {});", q.t.ptr, q.off,
         k.t.ptr, k.off, v.t.ptr, v.off, g.t.ptr, b.t.ptr, y.ptr,
         floatLit(scale));
  e.line("}}");
  e.out.grid = {{0, h, 1}, {0, (dv + f.columns - 1) / f.columns, 1}, {0, 1, 1}};
  e.out.block = {f.threads, 1, 1};
}

} // namespace strata::codegen::detail
