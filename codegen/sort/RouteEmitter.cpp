//===- RouteEmitter.cpp - moe_route alone: the wave and block forms -------===//
//
// Prints the form selectRoute chose (RouteForm.h) for a kernel that is
// moe_route alone: the waves (wave_moe_route, a wave a token) or, in plans
// that decode, the block form of one token with the waves as an alternate
// from two tokens. The Row form (inside fused bodies, past 1,024 experts)
// is a row kernel like any other (codegen/row/RowEmitter.cpp prints
// row_moe_route). The device code is codegen/device/sort/MoeRoute.h and
// RouteOrder.h.
//
//===----------------------------------------------------------------------===//
#include "codegen/EmitterImpl.h"
#include "codegen/Options.h"
#include "codegen/sort/RouteForm.h"
#include "codegen/sort/SortForm.h"

#include <string>
#include <utility>

namespace strata::codegen::detail {

using format::BodyOp;
using format::Recipe;

namespace {

/// The row pointers of moe_route's operands: `(ptr + row * N)` for a
/// tensor whose rows are the outputs' (the kernel's `row` variable).
struct RowOf {
  PlanDim rows; ///< the outputs' leading dim
  std::string operator()(const Tensor &t) const {
    if (t.shape.empty() || !(t.shape[0] == rows))
      throw Unsupported("an operand of moe_route is not aligned with the row");
    return fmt::format("({} + row * {}L)", t.ptr, constProduct(t.shape, 1));
  }
};

/// Bytes of one expert's slab of the stack \p w [E, N, K].
int64_t slabBytes(const Tensor &w) {
  return constProduct(w.shape, 1) / w.blockSize * w.blockBytes;
}

/// The pieces the prefetching blocks ask L2 for, one bulk prefetch each.
constexpr int64_t kPrefetchPiece = 16384;

/// At most this many bytes of slabs a step asks for (two thirds of the
/// H100's 50 MB L2: the Qwen3-MoE's eight experts are 24.5 MB a layer).
constexpr int64_t kPrefetchMaxBytes = int64_t(32) << 20;

/// moe-route-prefetch's blocks for the block form of \p op: 0 without
/// hints (prefetch-experts), off the sm_90 target, or when k slabs of
/// every stack exceed kPrefetchMaxBytes.
int64_t prefetchBlocks(Emitter &e, const BodyOp &op) {
  const int64_t blocks = option(e.plan, codegen::Opt::MoeRoutePrefetch);
  if (blocks == 0 || op.inputs.size() < 2 || e.target != "sm_90")
    return 0;
  int64_t bytes = 0;
  for (size_t m = 1; m < op.inputs.size(); ++m)
    bytes += e.intAttr(op, "k") * slabBytes(e.tensor(op.inputs[m]));
  return bytes <= kPrefetchMaxBytes ? blocks : 0;
}

/// The waves of an \p nt-thread block that hold experts of the block form
/// (all of them past one expert a thread).
int64_t routeWaves(int64_t experts, int nt) {
  return experts <= nt ? (experts + 31) / 32 : nt / 32;
}

/// Whether the block form of \p nt threads takes \p op: each wave's k
/// picks, a thread each.
bool routeBlockFits(const Emitter &e, const BodyOp &op, int nt) {
  const int64_t k = e.intAttr(op, "k");
  const int64_t ne = constProduct(e.tensor(op.inputs.at(0)).shape, 1);
  return k <= 32 && routeWaves(ne, nt) * k <= nt;
}

/// moe_route of one token (a decode step) by the whole block: each
/// wave's top K of its experts by K rounds of a wave argmax of route_keys
/// (RouteOrder.h), then the block's top K of the waves' picks by rank (a
/// wave form took K rounds of dependent shuffles and rescans in one wave:
/// 16 us a layer on the H200, bench/results/ncu-decode-20261204/; a second
/// K rounds over the picks in wave 0 and route_better's NaN-aware compares
/// left the block form at 13 us, latency-bound).
///
/// The block form's body over row 0, \p nt threads, where the first \p
/// waves waves hold the experts: the ids and weights stored by \p idsPtr
/// and \p yPtr (row 0's). Blocks past the first prefetch
/// (moe-route-prefetch) and return. With \p fallThrough every thread of
/// block 0 goes on past the body (a kernel that sorts next); else the
/// threads that store nothing return.
void routeBlockBody(Emitter &e, const BodyOp &op, int nt, int64_t waves,
                    const std::string &xPtr, const std::string &idsPtr,
                    const std::string &yPtr, bool fallThrough) {
  Tensor x = e.tensor(op.inputs.at(0));
  const int64_t ne = constProduct(x.shape, 1), k = e.intAttr(op, "k");
  const int64_t pl = (ne + nt - 1) / nt;
  const int64_t picks = waves * k;
  if (k > 32 || picks > nt) // selectRoute's bounds
    throw Unsupported("moe_route's block form takes k <= 32");
  const bool softmax = e.strAttr(op, "func") == "softmax";
  e.line("  const int lane = lane_id(), wave = tid_x() >> 5;");
  e.line("  STRATA_SHARED float red[{}];", nt / 32);
  e.line("  STRATA_SHARED uint64_t cand[{}];", picks);
  e.line("  STRATA_SHARED uint64_t pick[{}];", k);
  // Expert tid + NT i: its probability (softmax by block reductions, or
  // sigmoid), as wave_moe_route computes them.
  e.line("  float p[{}];", pl);
  e.line("#pragma unroll");
  e.line("  for (int i = 0; i < {}; ++i) {{", pl);
  e.line("    const int x = tid_x() + {} * i;", nt);
  e.line("    p[i] = x < {} ? ld({}, x) : 0.0f;", ne, xPtr);
  e.line("  }}");
  if (softmax) {
    e.line("  float m = -__builtin_inff();");
    e.line("#pragma unroll");
    e.line("  for (int i = 0; i < {}; ++i)", pl);
    e.line("    m = tid_x() + {} * i < {} && p[i] > m ? p[i] : m;", nt, ne);
    e.line("  m = block_max<{}>(m, red);", nt);
    e.line("  float sum = 0;");
    e.line("#pragma unroll");
    e.line("  for (int i = 0; i < {}; ++i) {{", pl);
    e.line("    p[i] = strata_exp(p[i] - m);");
    e.line("    sum += tid_x() + {} * i < {} ? p[i] : 0.0f;", nt, ne);
    e.line("  }}");
    e.line("  sum = block_sum<{}>(sum, red);", nt);
    e.line("#pragma unroll");
    e.line("  for (int i = 0; i < {}; ++i)", pl);
    e.line("    p[i] /= sum;");
  } else {
    e.line("#pragma unroll");
    e.line("  for (int i = 0; i < {}; ++i)", pl);
    e.line("    p[i] = sm_sigmoid(p[i]);");
  }
  // The wave's top K of its experts (wave_top_keys, MoeRoute.h): round s's
  // winner in lane s.
  e.line("  uint64_t key[{}];", pl);
  e.line("#pragma unroll");
  e.line("  for (int i = 0; i < {}; ++i) {{", pl);
  e.line("    const int x = tid_x() + {} * i;", nt);
  e.line("    key[i] = route_key(p[i], x < {} ? x : -1);", ne);
  e.line("  }}");
  e.line("  const uint64_t mk = wave_top_keys<{}>(key, {});", pl, k);
  // Only the first `waves` waves hold experts and candidates.
  if (waves < nt / 32)
    e.line("  if (wave < {} && lane < {}) cand[wave * {} + lane] = mk;", waves,
           k, k);
  else
    e.line("  if (lane < {}) cand[wave * {} + lane] = mk;", k, k);
  e.line("  if (tid_x() < {}) pick[tid_x()] = 0;", k);
  e.line("  sync_block();");
  // The block's top K: each wave's list holds every pick of the whole top
  // K among its experts, so a candidate's rank among all the lists is its
  // place (keys unique; none, 0, ranks past every pick).
  e.line("  if (tid_x() < {}) {{", picks);
  e.line("    const uint64_t c = cand[tid_x()];");
  e.line("    int rank = 0;");
  e.line("#pragma unroll 8");
  e.line("    for (int j = 0; j < {}; ++j)", picks);
  e.line("      rank += cand[j] > c ? 1 : 0;");
  e.line("    if (c != 0 && rank < {}) pick[rank] = c;", k);
  e.line("  }}");
  e.line("  sync_block();");
  // moe-route-prefetch: blocks 1..P pick the same experts (the logits
  // are a few hundred floats), then ask L2 for a share of their slabs.
  const int64_t blocks = prefetchBlocks(e, op);
  if (blocks > 0) {
    e.line("  if (bid_x() != 0) {{");
    // Piece i to block 1 + i % P: a stack's pieces over every block (and
    // SM) before any block takes a second.
    e.line("    const long i0 = (long)tid_x() * {} + bid_x() - 1;", blocks);
    for (size_t m = 1; m < op.inputs.size(); ++m) {
      const Tensor w = e.tensor(op.inputs[m]);
      const int64_t slab = slabBytes(w),
                    pieces = (slab + kPrefetchPiece - 1) / kPrefetchPiece;
      e.line("    for (long i = i0; i < {}L; i += {}L) {{", k * pieces,
             blocks * nt);
      e.line("      const int x = route_key_id(pick[i / {}L]);", pieces);
      e.line("      if (x < 0 || x >= {}) continue;", ne);
      e.line("      const uint64_t s = (uint64_t)(const uint8_t *){} + "
             "(uint64_t)x "
             "* {}ULL;",
             w.ptr, slab);
      e.line("      const uint64_t a = (s + i % {}L * {}ULL) & ~15ULL;", pieces,
             kPrefetchPiece);
      e.line(
          "      const uint64_t b = (s + {}ULL < a + {}ULL ? s + {}ULL : a + "
          "{}ULL) & ~15ULL;",
          slab, kPrefetchPiece, slab, kPrefetchPiece);
      e.line(
          "      if (b > a) prefetch_l2_bulk((const void *)a, (uint32_t)(b - "
          "a));");
      e.line("    }}");
    }
    e.line("    return;");
    e.line("  }}");
  }
  // Wave 0 stores the picks (lane s the s-th), their values summed in
  // rank order (as wave_moe_route does).
  const std::string in = fallThrough ? "    " : "  ";
  if (fallThrough)
    e.line("  if (wave == 0) {{");
  else
    e.line("  if (wave != 0) return;");
  e.line("{}const uint64_t ck = lane < {} ? pick[lane] : 0;", in, k);
  e.line("{}const float mv = route_key_value(ck);", in);
  e.line("{}float total = 0;", in);
  if (e.boolAttr(op, "norm")) {
    e.line("#pragma unroll 1");
    e.line("{}for (int s = 0; s < {}; ++s)", in, k);
    e.line("{}  total += shfl_f(mv, s);", in);
  }
  e.line("{}if (lane < {}) {{", in, k);
  e.line("{}  {}[lane] = route_key_id(ck);", in, idsPtr);
  e.line("{}  st({}, lane, {});", in, yPtr,
         e.boolAttr(op, "norm") ? "mv / total" : "mv");
  e.line("{}}}", in);
  if (fallThrough)
    e.line("  }}");
}

/// moe_route of one token (a decode step) by the whole block (the form
/// above, kRouteThreads threads, every wave's picks), moe-route-prefetch's
/// blocks past the first.
void routeBlock(Emitter &e, const BodyOp &op, const RowOf &rowPtr) {
  Tensor x = e.tensor(op.inputs.at(0)), y = e.tensor(op.outputs.at(0)),
         ids = e.tensor(op.outputs.at(1));
  std::string params = e.params();
  e.line("STRATA_KERNEL({}) void @SYMBOL@({}) {{", kRouteThreads, params);
  e.prologue();
  e.line("  if ({} < 1) return;", dimExpr(rowPtr.rows));
  e.line("  const long row = 0;");
  routeBlockBody(e, op, kRouteThreads, kRouteThreads / 32, rowPtr(x),
                 rowPtr(ids), rowPtr(y), false);
  e.line("}}");
  e.out.grid = {{0, 1 + prefetchBlocks(e, op), 1}, {0, 1, 1}, {0, 1, 1}};
  e.out.block = {kRouteThreads, 1, 1};
}

/// The pointer of a routing output: the kernel's own, or, for the ids a
/// fused route + sort keeps to itself, the workspace's first S = T x k
/// slots.
std::string slotsPtr(const Tensor &t) {
  return t.isTemp ? std::string("((int32_t *)ws)") : t.ptr;
}

} // namespace

void emitRouteKernel(Emitter &e) {
  const BodyOp &op = e.body.at(0);
  Tensor x = e.tensor(op.inputs.at(0)), y = e.tensor(op.outputs.at(0)),
         ids = e.tensor(op.outputs.at(1));
  RowOf rowPtr{y.shape.empty() ? PlanDim{0, 1, 1} : y.shape[0]};
  // A wave per token, kRouteThreads / 32 tokens per block; in plans with
  // state, the one-token form (routeBlock) is the kernel's own code and
  // the waves an alternate from two tokens.
  RouteProblem rp;
  rp.experts = constProduct(x.shape, 1);
  rp.k = e.intAttr(op, "k");
  rp.state = !e.plan.states.empty();
  rp.maxTokens = e.plan.maxTokens;
  rp.blockOption = option(e.plan, codegen::Opt::MoeRouteBlock) != 0;
  const RouteForm route = selectRoute(rp);
  if (route.own == RouteForm::Kind::Row)
    return emitRowKernel(e);
  constexpr int kRows = kRouteThreads / 32;
  const bool decode = route.own == RouteForm::Kind::Block;
  EmittedKernel own;
  if (decode) {
    routeBlock(e, op, rowPtr);
    own = std::move(e.out);
    e.out = EmittedKernel{};
  }
  std::string params = e.params();
  e.line("STRATA_KERNEL({}) void @SYMBOL@{}({}) {{", kRouteThreads,
         decode ? "_waves" : "", params);
  e.prologue();
  e.line("  const long row = (long)bid_x() * {} + (tid_x() >> 5);", kRows);
  e.line("  if (row >= {}) return;", dimExpr(rowPtr.rows));
  e.line("  wave_moe_route<{}, {}, {}, {}>({}, {}, {});", rp.experts, rp.k,
         e.strAttr(op, "func") == "softmax", e.boolAttr(op, "norm"), rowPtr(x),
         rowPtr(y), rowPtr(ids));
  e.line("}}");
  e.out.grid = {rowGroups(rowPtr.rows, kRows), {0, 1, 1}, {0, 1, 1}};
  e.out.block = {kRouteThreads, 1, 1};
  if (decode) {
    EmittedKernel waves = std::move(e.out);
    waves.minTokens = 2;
    waves.suffix = "_waves";
    own.alternates.push_back(std::move(waves));
    e.out = std::move(own);
  }
}

void emitRouteSortKernel(Emitter &e) {
  const BodyOp &route = e.body.at(0), &sort = e.body.at(1);
  const format::BodyRef &idsRef = route.outputs.at(1);
  const format::BodyRef &sortIn = sort.inputs.at(0);
  if (sortIn.kind != idsRef.kind || sortIn.index != idsRef.index)
    throw Unsupported("moe_sort of other ids than its moe_route's");
  Tensor x = e.tensor(route.inputs.at(0)), y = e.tensor(route.outputs.at(0)),
         ids = e.tensor(idsRef);
  Tensor off = e.tensor(sort.outputs.at(0)),
         perm = e.tensor(sort.outputs.at(1)),
         rowsT = e.tensor(sort.outputs.at(2));
  if (y.isTemp || off.isTemp || perm.isTemp)
    throw Unsupported("a fused route + sort whose weights, offsets or "
                      "permutation nothing reads");
  const format::PlanDim rows =
      y.shape.empty() ? format::PlanDim{0, 1, 1} : y.shape[0];
  if (!(rows.coef == 1 && rows.constant == 0 && rows.div == 1))
    throw Unsupported("a fused route + sort over other rows than the run's "
                      "tokens");
  RowOf rowPtr{rows};
  const int64_t ne = constProduct(x.shape, 1), k = e.intAttr(route, "k");
  const int64_t experts = e.intAttr(sort, "experts");
  const bool softmax = e.strAttr(route, "func") == "softmax";
  const bool norm = e.boolAttr(route, "norm");
  if (ne > 1024 || k > 32)
    throw Unsupported("a fused route + sort past 1,024 experts or k > 32");
  SortProblem sp;
  sp.experts = experts;
  sp.state = !e.plan.states.empty();
  sp.oneOption = option(e.plan, Opt::MoeSortOne) != 0;
  sp.rowsAreTokens = true;
  const SortForm form = selectSort(sp);
  if (!form.fits)
    throw Unsupported("too many experts for one block's counts");
  const int nt = form.threads;
  // Slices of whole tokens: a block of the pre-launch routes the tokens of
  // its slice, then counts it.
  const int64_t perSlice = form.slice / k, sl = perSlice * k;
  if (perSlice < 1)
    throw Unsupported("k past a sort slice");
  const std::string idsP = slotsPtr(ids);
  const std::string rowsP = rowsT.isTemp ? "(int32_t *)0" : rowsT.ptr;
  // The workspace: the ids where the kernel keeps them (S ints), then the
  // slices' counts ((S / sl + 1) x E ints), bytes
  // (4 k sl + 4 E k) T / sl + 4 E >= 4 S + 4 E (S / sl + 1).
  e.workspace = true;
  const format::PlanDim workspace{
      (ids.isTemp ? 4 * k * sl : 0) + 4 * experts * k, 4 * experts, sl};
  const std::string counts = ids.isTemp
                                 ? fmt::format("((int32_t *)ws + T * {}L)", k)
                                 : std::string("((int32_t *)ws)");
  std::string params = e.params();
  auto wavesRoute = [&](const std::string &first, const std::string &end) {
    e.line("  for (long row = {} + (tid_x() >> 5); row < {}; row += {})", first,
           end, nt / 32);
    e.line("    wave_moe_route<{}, {}, {}, {}>({}, {}, {} + row * {}L);", ne, k,
           softmax, norm, rowPtr(x), rowPtr(y), idsP, k);
  };
  EmittedKernel own;
  const int64_t twoLaunch = (sl - 1) / k + 1;
  if (form.one) {
    // A run of fewer than twoLaunch tokens: one block routes (one token by
    // the block form, more a wave each), then sorts (moe_sort_one).
    const bool block =
        option(e.plan, Opt::MoeRouteBlock) != 0 && routeBlockFits(e, route, nt);
    const int64_t prefetch = block ? prefetchBlocks(e, route) : 0;
    e.line("STRATA_KERNEL({}) void @SYMBOL@({}) {{", nt, params);
    e.prologue();
    if (block) {
      e.line("  if (T == 1) {{");
      e.line("  const long row = 0;");
      routeBlockBody(e, route, nt, routeWaves(ne, nt), rowPtr(x),
                     "(" + idsP + " + row * " + std::to_string(k) + "L)",
                     rowPtr(y), true);
      // One token's k picks are k distinct experts (pick[], the block's
      // top k in shared memory): the stable sort is their ranks by id,
      // each expert's offset the picks of smaller ids; no counts, scan or
      // barriers (moe_sort_one's ~10 for k slots).
      e.line("  for (int x = tid_x(); x <= {}; x += {}) {{", experts, nt);
      e.line("    int c = 0;");
      e.line("#pragma unroll");
      e.line("    for (int j = 0; j < {}; ++j)", k);
      e.line("      c += route_key_id(pick[j]) < x ? 1 : 0;");
      e.line("    {}[x] = c;", off.ptr);
      e.line("  }}");
      e.line("  if (tid_x() < {}) {{", k);
      e.line("    const int id = route_key_id(pick[tid_x()]);");
      e.line("    int at = 0;");
      e.line("#pragma unroll");
      e.line("    for (int j = 0; j < {}; ++j)", k);
      e.line("      at += route_key_id(pick[j]) < id ? 1 : 0;");
      e.line("    {}[at] = tid_x();", perm.ptr);
      if (!rowsT.isTemp)
        e.line("    {}[tid_x()] = at;", rowsT.ptr);
      e.line("  }}");
      e.line("  return;");
      e.line("  }}");
    }
    e.line("  if (bid_x() != 0) return;");
    wavesRoute("0", "T");
    e.line("  sync_block();");
    e.line("  moe_sort_one<{}, {}, {}>({}, {}, {}, {}, T * {}L);", experts, nt,
           sl, idsP, off.ptr, perm.ptr, rowsP, k);
    e.line("}}");
    e.out.grid = {{0, 1 + prefetch, 1}, {0, 1, 1}, {0, 1, 1}};
    e.out.block = {nt, 1, 1};
    e.out.workspace = workspace;
    if (twoLaunch > e.plan.maxTokens)
      return;
    own = std::move(e.out);
    e.out = EmittedKernel{};
  }
  // Longer runs: the pre-launch's block b routes the tokens of slots
  // [b sl, (b + 1) sl) and counts each expert among them; the kernel ranks
  // each slice (moe_sort_scatter, the sort's own second launch).
  const std::string sym = form.one ? "@SYMBOL@_slices" : "@SYMBOL@";
  e.line("STRATA_KERNEL({}) void {}_prep({}) {{", nt, sym, params);
  e.prologue();
  e.line("  const long t0 = (long)bid_x() * {}L;", perSlice);
  e.line("  const long t1 = t0 + {}L < T ? t0 + {}L : T;", perSlice, perSlice);
  wavesRoute("t0", "t1");
  e.line("  sync_block();");
  e.line("  moe_sort_count<{}, {}, {}>({}, {}, T * {}L);", experts, nt, sl,
         idsP, counts, k);
  e.line("}}");
  e.line("STRATA_KERNEL({}) void {}({}) {{", nt, sym, params);
  e.prologue();
  e.line("  moe_sort_scatter<{}, {}, {}>({}, {}, {}, {}, {}, T * {}L);",
         experts, nt, sl, idsP, counts, off.ptr, perm.ptr, rowsP, k);
  e.line("}}");
  e.out.grid = {{k, 1, sl}, {0, 1, 1}, {0, 1, 1}};
  e.out.block = {nt, 1, 1};
  format::PlanPreLaunch pre;
  pre.grid = e.out.grid;
  pre.block = e.out.block;
  e.out.pre = std::move(pre);
  e.out.workspace = workspace;
  if (form.one) {
    EmittedKernel two = std::move(e.out);
    two.minTokens = twoLaunch;
    two.suffix = "_slices";
    two.args = own.args;
    own.alternates.push_back(std::move(two));
    e.out = std::move(own);
  }
}

} // namespace strata::codegen::detail
