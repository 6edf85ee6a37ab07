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

/// moe_route of one token (a decode step) by the whole block: each
/// wave's top K of its experts, then wave 0's top K of those (a wave
/// form took K rounds of dependent shuffles and rescans in one wave:
/// 16 us a layer on the H200, bench/results/ncu-decode-20261204/).
void routeBlock(Emitter &e, const BodyOp &op, const RowOf &rowPtr) {
  Tensor x = e.tensor(op.inputs.at(0)), y = e.tensor(op.outputs.at(0)),
         ids = e.tensor(op.outputs.at(1));
  const int64_t ne = constProduct(x.shape, 1), k = e.intAttr(op, "k");
  const int64_t pl = (ne + kRouteThreads - 1) / kRouteThreads;
  const int64_t waves = kRouteThreads / 32, pc = (waves * k + 31) / 32;
  const bool softmax = e.strAttr(op, "func") == "softmax";
  // A wave's top K of its lanes' PL candidates (id < 0: none) in route
  // order (RouteOrder.h), round s's winner left in lane s; ids are unique,
  // so the lane whose best it was marks it taken and finds its next.
  e.line("template <int PL>");
  e.line("STRATA_FN void @SYMBOL@_top(const float *p, const int *id, float "
         "&mv, int &mi) {{");
  e.line("  const int lane = lane_id();");
  e.line("  uint32_t taken = 0;");
  e.line("  float lv = 0;");
  e.line("  int li = -1;");
  e.line("#pragma unroll");
  e.line("  for (int i = 0; i < PL; ++i)");
  e.line("    if (route_better(p[i], id[i], lv, li)) lv = p[i], li = id[i];");
  e.line("  mv = 0;");
  e.line("  mi = -1;");
  e.line("#pragma unroll 1");
  e.line("  for (int s = 0; s < {}; ++s) {{", k);
  e.line("    float bv = lv;");
  e.line("    int bi = li;");
  e.line("#pragma unroll");
  e.line("    for (int d = 16; d >= 1; d >>= 1) {{");
  e.line("      const float ov = shfl_xor_f(bv, d);");
  e.line("      const int oi = shfl_xor_i(bi, d);");
  e.line("      if (route_better(ov, oi, bv, bi)) bv = ov, bi = oi;");
  e.line("    }}");
  e.line("    if (lane == s) mv = bv, mi = bi;");
  e.line("    if (bi >= 0 && li == bi) {{");
  e.line("      lv = 0;");
  e.line("      li = -1;");
  e.line("#pragma unroll");
  e.line("      for (int i = 0; i < PL; ++i) {{");
  e.line("        taken |= id[i] == bi ? 1u << i : 0u;");
  e.line("        if (!(taken >> i & 1u) && route_better(p[i], id[i], lv, "
         "li)) lv = p[i], li = id[i];");
  e.line("      }}");
  e.line("    }}");
  e.line("  }}");
  e.line("}}");
  std::string params = e.params();
  e.line("STRATA_KERNEL({}) void @SYMBOL@({}) {{", kRouteThreads, params);
  e.prologue();
  e.line("  if ({} < 1) return;", dimExpr(rowPtr.rows));
  e.line("  const long row = 0;");
  e.line("  const int lane = lane_id(), wave = tid_x() >> 5;");
  e.line("  STRATA_SHARED float red[{}];", waves);
  e.line("  STRATA_SHARED float cv[{}];", waves * k);
  e.line("  STRATA_SHARED int ci[{}];", waves * k);
  // Expert tid + NT i: its probability (softmax by block reductions, or
  // sigmoid), as wave_moe_route computes them.
  e.line("  float p[{}];", pl);
  e.line("  int id[{}];", pl);
  e.line("#pragma unroll");
  e.line("  for (int i = 0; i < {}; ++i) {{", pl);
  e.line("    const int x = tid_x() + {} * i;", kRouteThreads);
  e.line("    p[i] = x < {} ? ld({}, x) : 0.0f;", ne, rowPtr(x));
  e.line("    id[i] = x < {} ? x : -1;", ne);
  e.line("  }}");
  if (softmax) {
    e.line("  float m = -__builtin_inff();");
    e.line("#pragma unroll");
    e.line("  for (int i = 0; i < {}; ++i)", pl);
    e.line("    m = id[i] >= 0 && p[i] > m ? p[i] : m;");
    e.line("  m = block_max<{}>(m, red);", kRouteThreads);
    e.line("  float sum = 0;");
    e.line("#pragma unroll");
    e.line("  for (int i = 0; i < {}; ++i) {{", pl);
    e.line("    p[i] = strata_exp(p[i] - m);");
    e.line("    sum += id[i] >= 0 ? p[i] : 0.0f;");
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
  e.line("  float mv;");
  e.line("  int mi;");
  e.line("  @SYMBOL@_top<{}>(p, id, mv, mi);", pl);
  e.line("  if (lane < {}) {{", k);
  e.line("    cv[wave * {} + lane] = mv;", k);
  e.line("    ci[wave * {} + lane] = mi;", k);
  e.line("  }}");
  e.line("  sync_block();");
  e.line("  if (wave != 0) return;");
  // Wave 0: the top K of the waves' picks (each wave's list holds every
  // pick of the whole top K among its experts).
  e.line("  float q[{}];", pc);
  e.line("  int qi[{}];", pc);
  e.line("#pragma unroll");
  e.line("  for (int j = 0; j < {}; ++j) {{", pc);
  e.line("    const int c = lane + 32 * j;");
  e.line("    q[j] = c < {} ? cv[c] : 0.0f;", waves * k);
  e.line("    qi[j] = c < {} ? ci[c] : -1;", waves * k);
  e.line("  }}");
  e.line("  @SYMBOL@_top<{}>(q, qi, mv, mi);", pc);
  // The picks' values summed in round order (as wave_moe_route does).
  e.line("  float total = 0;");
  if (e.boolAttr(op, "norm")) {
    e.line("#pragma unroll 1");
    e.line("  for (int s = 0; s < {}; ++s)", k);
    e.line("    total += shfl_f(mv, s);");
  }
  e.line("  if (lane < {}) {{", k);
  e.line("    {}[lane] = mi;", rowPtr(ids));
  e.line("    st({}, lane, {});", rowPtr(y),
         e.boolAttr(op, "norm") ? "mv / total" : "mv");
  e.line("  }}");
  e.line("}}");
  e.out.grid = {{0, 1, 1}, {0, 1, 1}, {0, 1, 1}};
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
