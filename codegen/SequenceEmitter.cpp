//===- SequenceEmitter.cpp - attention, gated delta rule, moe_sort --------===//
//
// Kernels whose work is not per row: attention (flash-style tiles of query
// rows), the gated delta rule (one block per value head, recurrent over T)
// and moe_sort (one block). A fused body may put slices and reshapes of
// kernel inputs before the op (fuse-elementwise's prologue): they become
// strided views, so the op reads the input in place and nothing is copied.
//
//===----------------------------------------------------------------------===//
#include "codegen/EmitterImpl.h"
#include "codegen/Limits.h"
#include "codegen/Options.h"
#include "codegen/attention/AttentionForm.h"
#include "codegen/delta/DeltaForm.h"
#include "ir/Target.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>

namespace strata::codegen::detail {

using format::BodyOp;
using format::BodyRef;
using format::Recipe;

namespace {

/// A strided view of a kernel input: element (i0, i1, ...) is at
/// ptr[off + sum i_d * stride[d]].
struct Access {
  Tensor t;
  int64_t off = 0;
  std::vector<int64_t> stride; ///< per dim of `shape`
  Shape shape;
};

/// Contiguous strides of \p s (dim 0 may depend on T).
std::vector<int64_t> contiguous(const Shape &s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t d = s.size(); d-- > 1;)
    st[d - 1] = st[d] * s[d].constant;
  return st;
}

class SequenceEmitter {
public:
  explicit SequenceEmitter(Emitter &e) : e(e) {}

  /// Resolves the prologue (slices of inputs into temporaries) and returns
  /// the single non-view op.
  const BodyOp &resolve(Recipe want);
  Access access(const BodyRef &r);

  Emitter &e;
  std::map<uint32_t, Access> temps; ///< temporaries that are views
};

const BodyOp &SequenceEmitter::resolve(Recipe want) {
  const BodyOp *main = nullptr;
  for (const BodyOp &op : e.body) {
    if (op.recipe == Recipe::Slice &&
        op.outputs[0].kind == BodyRef::Kind::Tmp) {
      Access a = access(op.inputs[0]);
      int64_t ax = e.intAttr(op, "axis");
      if (ax < 0)
        ax += static_cast<int64_t>(a.shape.size());
      if (ax <= 0 || ax >= static_cast<int64_t>(a.shape.size()))
        throw Unsupported("a slice along the token dim before a sequence op");
      int64_t start = e.intAttr(op, "start"), end = e.intAttr(op, "end");
      a.off += start * a.stride[ax];
      a.shape[ax] = {0, end - start, 1};
      temps[op.outputs[0].index] = a;
      continue;
    }
    if (op.recipe != want || main)
      throw Unsupported(fmt::format("'{}' in a {} kernel",
                                    format::recipeInfo(op.recipe).name,
                                    format::recipeInfo(want).name));
    main = &op;
  }
  if (!main)
    throw Unsupported("no sequence op in the kernel");
  return *main;
}

Access SequenceEmitter::access(const BodyRef &r) {
  Access a;
  if (r.kind == BodyRef::Kind::Tmp) {
    auto it = temps.find(r.index);
    if (it == temps.end())
      throw Unsupported("a sequence op reads a temporary that is not a view");
    a = it->second;
  } else {
    a.t = e.tensor({r.kind, r.index, {}});
    a.shape = a.t.shape;
    a.stride = contiguous(a.shape);
  }
  if (!r.view.empty()) {
    // A reshape of the inner dims, which must be contiguous.
    std::vector<int64_t> inner = contiguous(a.shape);
    for (size_t d = 1; d < a.shape.size(); ++d)
      if (a.stride[d] != inner[d])
        throw Unsupported("a reshape of a strided view");
    if (!(r.view[0] == a.shape[0]))
      throw Unsupported("a reshape of the token dim");
    int64_t rowStride = a.stride[0];
    a.shape = r.view;
    a.stride = contiguous(a.shape);
    a.stride[0] = rowStride;
  }
  if (a.t.quant())
    throw Unsupported("a sequence op reads a quantised weight");
  return a;
}

} // namespace

void emitAttentionKernel(Emitter &e) {
  SequenceEmitter s(e);
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
           "{}L, {}L, {}L, {}L, {}L, {}L, {}L, {}L>(",
           f.rowGroups, f.splits, f.keyChunk, h, d, dv, hg, shape.causal, gated,
           block, nb, nbw, q.stride[0], q.stride[1], k.stride[0], k.stride[1],
           v.stride[0], v.stride[1], g.stride[0], g.stride[1]);
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

void emitDeltaKernel(Emitter &e) {
  SequenceEmitter s(e);
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

void emitSortKernel(Emitter &e) {
  if (e.body.size() != 1)
    throw Unsupported("moe_sort with a fused body");
  const BodyOp &op = e.body[0];
  Tensor ids = e.tensor(op.inputs[0]);
  int64_t experts = e.intAttr(op, "experts");
  // 512 threads (half the rounds of 256) where the per-wave counts fit.
  auto fits = [&](int threads) {
    return experts * (threads / 32 + 2) * 4 <= staticSharedBudget();
  };
  const int kThreads = fits(512) ? 512 : 256;
  if (!fits(kThreads))
    throw Unsupported("too many experts for one block's counts");
  // Two launches over slices of kSlice slots (S / kSlice + 1 blocks): the
  // pre-launch counts each slice's experts into the workspace, the kernel
  // scans them and scatters its slice; one block took 0.64 ms a layer at
  // T = 16,384 (163,840 slots).
  constexpr int64_t kSlice = 2048;
  int64_t k = constProduct(ids.shape, 1);
  e.workspace = true;
  std::string params = e.params();
  std::string slots = fmt::format("{} * {}L", dimExpr(ids.shape[0]), k);
  e.line("STRATA_KERNEL({}) void @SYMBOL@_prep({}) {{", kThreads, params);
  e.prologue();
  e.line("  moe_sort_count<{}, {}, {}>({}, (int32_t *)ws, {});", experts,
         kThreads, kSlice, ids.ptr, slots);
  e.line("}}");
  e.line("STRATA_KERNEL({}) void @SYMBOL@({}) {{", kThreads, params);
  e.prologue();
  e.line("  moe_sort_scatter<{}, {}, {}>({}, (const int32_t *)ws, out0, out1, "
         "{}, {});",
         experts, kThreads, kSlice, ids.ptr,
         e.kernel.outputs.size() > 2 ? "out2" : "(int32_t *)0", slots);
  e.line("}}");
  format::PlanDim rows = ids.shape[0];
  if (rows.div != 1)
    throw Unsupported("moe_sort over a divided token count");
  // S / kSlice + 1 blocks, S = k (coef T + constant); one more where the
  // constant's share may round down (PlanDim floors coef T alone), so the
  // grid covers what the kernels count (extra blocks have empty slices).
  format::PlanDim blocks{k * rows.coef,
                         k * rows.constant / kSlice + 1 +
                             (k * rows.constant % kSlice != 0),
                         kSlice};
  if (rows.coef == 0)
    blocks = {0, k * rows.constant / kSlice + 1, 1};
  e.out.grid = {blocks, {0, 1, 1}, {0, 1, 1}};
  e.out.block = {kThreads, 1, 1};
  format::PlanPreLaunch pre;
  pre.grid = e.out.grid;
  pre.block = e.out.block;
  e.out.pre = std::move(pre);
  // counts[blocks][experts] as int32.
  e.out.workspace = {blocks.coef * experts * 4, blocks.constant * experts * 4,
                     blocks.div};
}

} // namespace strata::codegen::detail
