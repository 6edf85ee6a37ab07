//===- PlanTest.cpp - plan.json round trip and validation -----------------===//
#include "runtime/format/Plan.h"

#include <gtest/gtest.h>

using namespace strata::format;

namespace {

Plan smallPlan() {
  Plan p;
  p.model = "m";
  p.arch = "qwen3";
  p.target = "host";
  p.maxTokens = 8;
  PlanBuffer tok{"tok", PlanDType::I32, {{1, 0}}, 0, 32};
  PlanBuffer x{"x", PlanDType::F32, {{1, 0}, {0, 64}}, 256, 8 * 64 * 4};
  p.buffers = {tok, x};
  p.arenaBytes = 256 + 8 * 64 * 4;
  p.arenaLowerBound = p.arenaBytes;
  p.weights = {{"token_embd.weight", GgmlType::Q8_0, {64, 100}}};
  PlanKernel k;
  k.recipe = Recipe::GetRows;
  k.inputs = {{true, 0}, {false, 0}};
  k.outputs = {1};
  PlanAttr f;
  f.kind = PlanAttr::Kind::Float;
  f.f = 0.5;
  k.attrs["s"] = f;
  PlanAttr ints;
  ints.kind = PlanAttr::Kind::Ints;
  ints.ints = {1, 2};
  k.attrs["perm"] = ints;
  k.bytes = 100;
  k.flops = 7;
  p.kernels = {k};
  p.inputs = {0};
  p.outputs = {1};
  return p;
}

std::string errorOf(const std::string &json) {
  Plan p;
  std::string err;
  EXPECT_FALSE(planFromJson(json, "plan.json", p, err));
  return err;
}

} // namespace

TEST(Plan, JsonRoundTrip) {
  Plan p = smallPlan();
  std::string text = planToJson(p);
  Plan q;
  std::string err;
  ASSERT_TRUE(planFromJson(text, "plan.json", q, err)) << err;
  EXPECT_EQ(planToJson(q), text);
  EXPECT_EQ(q.kernels[0].attr("s")->kind, PlanAttr::Kind::Float);
  EXPECT_EQ(q.kernels[0].attr("perm")->ints, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(q.buffers[1].numElements(3), 3 * 64);
}

TEST(Plan, DividedDimsRoundTrip) {
  // Version-1 dims without a divisor still read, with div 1.
  {
    Plan q;
    std::string err;
    ASSERT_TRUE(planFromJson(planToJson(smallPlan()), "plan.json", q, err))
        << err;
    EXPECT_EQ(q.buffers[1].shape[0], (PlanDim{1, 0, 1}));
  }
  Plan p = smallPlan();
  // A pooled [T / 4, 64] buffer: floor(T / 4) rows, empty below T = 4.
  p.buffers.push_back(
      {"kb", PlanDType::F32, {{1, 0, 4}, {0, 64}}, p.arenaBytes, 2 * 64 * 4});
  p.arenaBytes += 2 * 64 * 4;
  std::string text = planToJson(p);
  Plan q;
  std::string err;
  ASSERT_TRUE(planFromJson(text, "plan.json", q, err)) << err;
  EXPECT_EQ(planToJson(q), text);
  EXPECT_EQ(q.buffers[2].shape[0], (PlanDim{1, 0, 4}));
  EXPECT_EQ(q.buffers[2].numElements(8), 2 * 64);
  EXPECT_EQ(q.buffers[2].numElements(7), 1 * 64);
  EXPECT_EQ(q.buffers[2].numElements(3), 0);
  EXPECT_EQ((PlanDim{3, 1, 2}).at(5), 8);
  // A divisor below 1 is rejected with its path.
  p.buffers[2].shape[0].div = 0;
  EXPECT_NE(
      errorOf(planToJson(p)).find("buffers[2].shape[0]: dim out of range"),
      std::string::npos)
      << errorOf(planToJson(p));
}

TEST(Plan, RejectsWithJsonPath) {
  std::string text = planToJson(smallPlan());
  auto replace = [&](const std::string &from, const std::string &to) {
    std::string t = text;
    size_t pos = t.find(from);
    EXPECT_NE(pos, std::string::npos) << from;
    return t.replace(pos, from.size(), to);
  };
  EXPECT_NE(errorOf("{").find("not valid JSON"), std::string::npos);
  EXPECT_NE(errorOf(replace("\"version\": 1", "\"version\": 9"))
                .find("$.version: plan version 9 is not supported"),
            std::string::npos);
  EXPECT_NE(errorOf(replace("\"recipe\": \"get_rows\"", "\"recipe\": \"zap\""))
                .find("$.kernels[0].recipe: unknown recipe 'zap'"),
            std::string::npos);
  EXPECT_NE(errorOf(replace("\"offset\": 256", "\"offset\": 4096"))
                .find("$.buffers[1]: bytes [4096, 6144) lie outside the arena"),
            std::string::npos);
  EXPECT_NE(errorOf(replace("\"bytes\": 32", "\"bytes\": 33"))
                .find("$.buffers[0].bytes: 33 bytes, but shape and dtype "
                      "need 32"),
            std::string::npos);
  EXPECT_NE(errorOf(replace("\"weight\": 0", "\"weight\": 5"))
                .find("$.kernels[0].inputs[0]: weight 5 does not exist"),
            std::string::npos);
  EXPECT_NE(errorOf(replace("\"type\": \"q8_0\"", "\"type\": \"q2_k\""))
                .find("$.weights[0].type: unknown or unloadable"),
            std::string::npos);
}

TEST(Plan, RecipeCatalogIsConsistent) {
  for (const RecipeInfo &r : allRecipes()) {
    EXPECT_EQ(lookupRecipe(r.name), &recipeInfo(r.id));
    EXPECT_LE(r.minInputs, r.maxInputs);
    EXPECT_GE(r.numOutputs, 1);
  }
}
