//===- AttentionEmitter.cpp - the attention family ------------------------===//
//
// Prints the form selectAttention chose (AttentionForm.h): the device
// function's template arguments, grid, block and shared memory; QSA's
// block index and union tables where the op has one. The device code is
// under codegen/device/attention/, qsa/ and arch/sm_90/.
//
//===----------------------------------------------------------------------===//
#include "codegen/SequenceView.h"
#include "codegen/attention/AttentionForm.h"

#include <string>

namespace strata::codegen::detail {

using format::BodyOp;
using format::Recipe;

void emitAttentionKernel(Emitter &e) {
  SequenceView s(e);
  const BodyOp &op = s.resolve(Recipe::Attention);
  Access q = s.access(op.inputs[0]), k = s.access(op.inputs[1]),
         v = s.access(op.inputs[2]);
  bool gated = e.boolAttr(op, "gated");
  int64_t block = e.intAttr(op, "block");
  size_t next = 3;
  Access g = q;
  if (gated)
    g = s.access(op.inputs[next++]);
  std::string index = "(const int32_t *)0";
  int64_t nb = 1;
  if (block > 0) {
    Access ix = s.access(op.inputs[next]);
    index = ix.t.ptr;
    nb = ix.shape[1].constant;
  }
  Tensor y = e.tensor(op.outputs[0]);
  if (op.outputs[0].kind != BodyRef::Kind::Out)
    throw Unsupported("attention into a temporary");
  int64_t h = q.shape[1].constant, d = q.shape[2].constant;
  int64_t hkv = k.shape[1].constant, dv = v.shape[2].constant;
  constexpr int kBQ = 16, kThreads = 128;
  if (dv % (kThreads / kBQ) != 0)
    throw Unsupported("value dim is not a multiple of 8");
  std::string params = e.params();
  // Select (codegen/attention/AttentionForm: pure, unit-tested), then
  // print. bf16 activations (the GPU policy) take the matrix units, staged
  // 16 bytes at a time; f32 activations keep f32 arithmetic (the f32
  // policy's bar is NMSE 1e-5): the FMA tile.
  AttentionShape shape;
  shape.heads = h, shape.headDim = d, shape.kvHeads = hkv, shape.valueDim = dv;
  shape.block = block, shape.selections = nb, shape.gated = gated;
  shape.causal = e.boolAttr(op, "causal");
  shape.maxTokens = e.plan.maxTokens;
  bool mma = q.t.ctype == "bf16" && k.t.ctype == "bf16" &&
             v.t.ctype == "bf16" && d % 16 == 0 && dv % 16 == 0;
  for (const Access *a : {&q, &k, &v})
    mma = mma && a->off % 8 == 0 && a->stride[0] % 8 == 0 &&
          a->stride[1] % 8 == 0;
  shape.matrixUnits = mma;
  shape.gatePairs = !gated || (g.off % 2 == 0 && g.stride[0] % 2 == 0 &&
                               g.stride[1] % 2 == 0);
  auto bytesOf = [](const Tensor &t) -> int64_t {
    return t.ctype == "float" ? 4 : 2;
  };
  shape.qBytes = bytesOf(q.t), shape.kBytes = bytesOf(k.t);
  shape.vBytes = bytesOf(v.t);
  const AttentionForm f = selectAttention(shape, e.target, e.plan);
  const int64_t hg = h / hkv, nbw = f.bitmapWords, ncw = f.chunkWords;
  e.out.sharedBytes = f.sharedBytes;
  switch (f.kind) {
  case AttentionForm::Kind::Ws:
    // One block an SM stated (launch_bounds' minimum): setmaxnreg needs
    // the register count at entry fixed, which the thread count alone
    // fixes only when the kernel needs all of it (ptxas ignored it for
    // the smaller heads: C7508).
    e.line("STRATA_KERNEL_MIN({}, 1) void @SYMBOL@({}) {{", f.threads, params);
    e.prologue();
    e.line("  attention_ws<{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, "
           "{}, {}L, {}L, {}L, {}L, {}L, {}L, {}L, {}L, {}, {}>(",
           h, d, dv, hg, gated, block, nb, nbw, ncw, f.compact, f.pingpong,
           f.expFirst, f.smx, q.stride[0], q.stride[1], k.stride[0],
           k.stride[1], v.stride[0], v.stride[1], g.stride[0], g.stride[1],
           f.trace, f.rolled);
    break;
  case AttentionForm::Kind::Wg:
    e.line("STRATA_KERNEL({}) void @SYMBOL@({}) {{", f.threads, params);
    e.prologue();
    e.line("  attention_wg<{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, "
           "{}, {}L, {}L, {}L, {}L, {}L, {}L, {}L, {}L>(",
           f.groupHeads, h, d, dv, hg, shape.causal, gated, block, nb, nbw, ncw,
           f.sparse, f.compact, q.stride[0], q.stride[1], k.stride[0],
           k.stride[1], v.stride[0], v.stride[1], g.stride[0], g.stride[1]);
    break;
  case AttentionForm::Kind::Gqa:
    e.line("STRATA_KERNEL({}) void @SYMBOL@({}) {{", f.threads, params);
    e.prologue();
    e.line("  attention_gqa<{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, "
           "{}, {}L, {}L, {}L, {}L, {}L, {}L, {}L, {}L>(",
           f.rowGroups, f.splits, f.keyChunk, h, d, dv, hg, shape.causal, gated,
           block, nb, nbw, f.sparse, q.stride[0], q.stride[1], k.stride[0],
           k.stride[1], v.stride[0], v.stride[1], g.stride[0], g.stride[1]);
    break;
  case AttentionForm::Kind::Tile:
    e.line("STRATA_KERNEL({}) void @SYMBOL@({}) {{", f.threads, params);
    e.prologue();
    e.line("  attention_tile<{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, "
           "{}L, {}L, {}L, {}L, {}L, {}L, {}L, {}L>(",
           f.queryRows, f.keyChunk, h, d, dv, hg, shape.causal, gated, block,
           nb, nbw, f.threads, q.stride[0], q.stride[1], k.stride[0],
           k.stride[1], v.stride[0], v.stride[1], g.stride[0], g.stride[1]);
    break;
  }
  e.line("      {} + {}, {} + {}, {} + {}, {} + {}, {}, {}, T, {}, {});",
         q.t.ptr, q.off, k.t.ptr, k.off, v.t.ptr, v.off, g.t.ptr, g.off, index,
         y.ptr, dimExpr(k.shape[0]), floatLit(e.floatAttr(op, "scale")));
  e.line("}}");
  const int64_t bq = f.queryRows;
  format::PlanDim rows = q.shape[0];
  format::PlanDim tiles{rows.coef, rows.constant / bq + 1, rows.div * bq};
  if (rows.coef == 0)
    tiles = {0, (rows.constant + bq - 1) / bq, 1};
  e.out.grid = {tiles, {0, h / f.headsPerBlock, 1}, {0, 1, 1}};
  e.out.block = {f.threads, 1, 1};
}

} // namespace strata::codegen::detail
