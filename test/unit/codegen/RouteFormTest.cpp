//===- RouteFormTest.cpp - moe_route's choice of form ---------------------===//
//
// selectRoute alone (which form runs at T = 1, 64, 600 and 16,384), then
// the emitted kernel of a plan against it on both GPU targets (the route
// forms are one source for both). The forms' numbers are checked on the
// H200 by --check (bench/decode_ab_run.sh, test/device/state_run.sh).
//
//===----------------------------------------------------------------------===//
#include "codegen/sort/RouteForm.h"
#include "codegen/KernelEmitter.h"
#include "codegen/Options.h"
#include "runtime/format/Plan.h"

#include <gtest/gtest.h>

using namespace strata;
using codegen::RouteForm;
using Kind = RouteForm::Kind;

namespace {

codegen::RouteProblem problem(int64_t experts, int64_t k, bool state,
                              int64_t maxTokens = 16384) {
  codegen::RouteProblem p;
  p.experts = experts;
  p.k = k;
  p.state = state;
  p.maxTokens = maxTokens;
  return p;
}

/// logits [T, E] (f32) -> moe_route (softmax, top k) -> weights [T, k] (f32),
/// ids [T, k] (i32); one state (a generation plan) where \p withState.
format::Plan routePlan(const std::string &target, int64_t e, int64_t k,
                       bool withState) {
  format::Plan p;
  p.model = p.arch = "m";
  p.target = target;
  p.maxTokens = 64;
  const format::PlanDim t{1, 0, 1};
  using D = format::PlanDType;
  const uint64_t xBytes = 64 * e * 4, yBytes = 64 * k * 4;
  p.buffers.push_back({"x", D::F32, {t, {0, e, 1}}, 0, xBytes});
  p.buffers.push_back({"w", D::F32, {t, {0, k, 1}}, xBytes, yBytes});
  p.buffers.push_back({"ids", D::I32, {t, {0, k, 1}}, xBytes + yBytes, yBytes});
  p.arenaBytes = xBytes + 2 * yBytes;
  if (withState) {
    p.version = 3;
    p.states.push_back({"blk.0.k_cache", D::F32, {1, 32, 2, 16}, 4096});
  }
  format::PlanKernel kn;
  kn.recipe = format::Recipe::MoeRoute;
  kn.inputs = {{false, 0}};
  kn.outputs = {1, 2};
  format::PlanAttr top, func, norm;
  top.i = k;
  func.kind = format::PlanAttr::Kind::Str;
  func.s = "softmax";
  norm.kind = format::PlanAttr::Kind::Bool;
  norm.b = true;
  kn.attrs["k"] = top;
  kn.attrs["func"] = func;
  kn.attrs["norm"] = norm;
  p.kernels.push_back(kn);
  p.inputs = {0};
  p.outputs = {1, 2};
  return p;
}

} // namespace

TEST(RouteForm, SelectByTokens) {
  // Qwen4-Exp's router (512 experts, top 10) in a decode plan: the block
  // for one token, the waves from two.
  RouteForm dec = codegen::selectRoute(problem(512, 10, true));
  EXPECT_EQ(dec.own, Kind::Block);
  EXPECT_TRUE(dec.wavesFromTwo);
  EXPECT_EQ(dec.at(1), Kind::Block);
  for (int64_t t : {64, 600, 16384})
    EXPECT_EQ(dec.at(t), Kind::Waves) << t;
  // Prefill-only plans: the waves at every T.
  RouteForm pre = codegen::selectRoute(problem(512, 10, false));
  for (int64_t t : {1, 64, 600, 16384})
    EXPECT_EQ(pre.at(t), Kind::Waves) << t;
  // Past 1,024 experts, or fused into a row kernel: a block a token.
  EXPECT_EQ(codegen::selectRoute(problem(2048, 8, true)).at(1), Kind::Row);
  codegen::RouteProblem fused = problem(128, 8, true);
  fused.alone = false;
  EXPECT_EQ(codegen::selectRoute(fused).at(600), Kind::Row);
  // k past what one wave holds of every wave's picks, a plan of single
  // tokens (no alternate to take the rest), and the option: the waves.
  EXPECT_EQ(codegen::selectRoute(problem(512, 17, true)).own, Kind::Waves);
  EXPECT_EQ(codegen::selectRoute(problem(512, 10, true, 1)).own, Kind::Waves);
  codegen::RouteProblem off = problem(512, 10, true);
  off.blockOption = false;
  EXPECT_EQ(codegen::selectRoute(off).own, Kind::Waves);
}

TEST(RouteForm, EmittedKernelFollowsTheSelection) {
  for (const char *target : {"sm_90", "gfx1151"}) {
    SCOPED_TRACE(target);
    codegen::EmittedKernel k;
    std::string error;
    ASSERT_TRUE(codegen::emitKernel(routePlan(target, 512, 10, true), 0, target,
                                    k, error))
        << error;
    // Own code: one block for the one token; the waves from two tokens,
    // 8 tokens a block.
    EXPECT_EQ(k.grid[0].coef, 0);
    EXPECT_EQ(k.grid[0].constant, 1);
    // The waves' picks ranked by the block (the block form's merge).
    EXPECT_NE(k.body.find("if (c != 0 && rank < 10) pick[rank] = c;"),
              std::string::npos);
    ASSERT_EQ(k.alternates.size(), 1u);
    EXPECT_EQ(k.alternates[0].suffix, "_waves");
    EXPECT_EQ(k.alternates[0].minTokens, 2);
    EXPECT_NE(k.body.find("wave_moe_route<512, 10, true, true>"),
              std::string::npos);
    // A prefill-only plan keeps the waves as its own code.
    codegen::EmittedKernel pre;
    ASSERT_TRUE(codegen::emitKernel(routePlan(target, 512, 10, false), 0,
                                    target, pre, error))
        << error;
    EXPECT_TRUE(pre.alternates.empty());
    EXPECT_EQ(pre.body.find("pick[rank]"), std::string::npos);
    // The option turns the block off: the same kernel as without state.
    format::Plan off = routePlan(target, 512, 10, true);
    ASSERT_TRUE(codegen::setOption(off, "moe-route-block=0", error)) << error;
    codegen::EmittedKernel waves;
    ASSERT_TRUE(codegen::emitKernel(off, 0, target, waves, error)) << error;
    EXPECT_EQ(waves.body, pre.body);
  }
}
