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

/// moe_route of one token (a decode step) by the whole block: each
/// wave's top K of its experts by K rounds of a wave argmax of route_keys
/// (RouteOrder.h), then the block's top K of the waves' picks by rank (a
/// wave form took K rounds of dependent shuffles and rescans in one wave:
/// 16 us a layer on the H200, bench/results/ncu-decode-20261204/; a second
/// K rounds over the picks in wave 0 and route_better's NaN-aware compares
/// left the block form at 13 us, latency-bound).
void routeBlock(Emitter &e, const BodyOp &op, const RowOf &rowPtr) {
  Tensor x = e.tensor(op.inputs.at(0)), y = e.tensor(op.outputs.at(0)),
         ids = e.tensor(op.outputs.at(1));
  const int64_t ne = constProduct(x.shape, 1), k = e.intAttr(op, "k");
  const int64_t pl = (ne + kRouteThreads - 1) / kRouteThreads;
  const int64_t waves = kRouteThreads / 32, picks = waves * k;
  if (k > 32 || picks > kRouteThreads) // selectRoute's bounds
    throw Unsupported("moe_route's block form takes k <= 32");
  const bool softmax = e.strAttr(op, "func") == "softmax";
  std::string params = e.params();
  e.line("STRATA_KERNEL({}) void @SYMBOL@({}) {{", kRouteThreads, params);
  e.prologue();
  e.line("  if ({} < 1) return;", dimExpr(rowPtr.rows));
  e.line("  const long row = 0;");
  e.line("  const int lane = lane_id(), wave = tid_x() >> 5;");
  e.line("  STRATA_SHARED float red[{}];", waves);
  e.line("  STRATA_SHARED uint64_t cand[{}];", picks);
  e.line("  STRATA_SHARED uint64_t pick[{}];", k);
  // Expert tid + NT i: its probability (softmax by block reductions, or
  // sigmoid), as wave_moe_route computes them.
  e.line("  float p[{}];", pl);
  e.line("#pragma unroll");
  e.line("  for (int i = 0; i < {}; ++i) {{", pl);
  e.line("    const int x = tid_x() + {} * i;", kRouteThreads);
  e.line("    p[i] = x < {} ? ld({}, x) : 0.0f;", ne, rowPtr(x));
  e.line("  }}");
  if (softmax) {
    e.line("  float m = -__builtin_inff();");
    e.line("#pragma unroll");
    e.line("  for (int i = 0; i < {}; ++i)", pl);
    e.line("    m = tid_x() + {} * i < {} && p[i] > m ? p[i] : m;",
           kRouteThreads, ne);
    e.line("  m = block_max<{}>(m, red);", kRouteThreads);
    e.line("  float sum = 0;");
    e.line("#pragma unroll");
    e.line("  for (int i = 0; i < {}; ++i) {{", pl);
    e.line("    p[i] = strata_exp(p[i] - m);");
    e.line("    sum += tid_x() + {} * i < {} ? p[i] : 0.0f;", kRouteThreads,
           ne);
    e.line("  }}");
    e.line("  sum = block_sum<{}>(sum, red);", kRouteThreads);
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
  e.line("    const int x = tid_x() + {} * i;", kRouteThreads);
  e.line("    key[i] = route_key(p[i], x < {} ? x : -1);", ne);
  e.line("  }}");
  e.line("  const uint64_t mk = wave_top_keys<{}>(key, {});", pl, k);
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
             blocks * kRouteThreads);
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
  e.line("  if (wave != 0) return;");
  e.line("  const uint64_t ck = lane < {} ? pick[lane] : 0;", k);
  e.line("  const float mv = route_key_value(ck);");
  // The picks' values summed in rank order (as wave_moe_route does).
  e.line("  float total = 0;");
  if (e.boolAttr(op, "norm")) {
    e.line("#pragma unroll 1");
    e.line("  for (int s = 0; s < {}; ++s)", k);
    e.line("    total += shfl_f(mv, s);");
  }
  e.line("  if (lane < {}) {{", k);
  e.line("    {}[lane] = route_key_id(ck);", rowPtr(ids));
  e.line("    st({}, lane, {});", rowPtr(y),
         e.boolAttr(op, "norm") ? "mv / total" : "mv");
  e.line("  }}");
  e.line("}}");
  e.out.grid = {{0, 1 + blocks, 1}, {0, 1, 1}, {0, 1, 1}};
  e.out.block = {kRouteThreads, 1, 1};
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

} // namespace strata::codegen::detail
