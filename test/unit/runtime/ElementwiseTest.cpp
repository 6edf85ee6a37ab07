//===- ElementwiseTest.cpp - unary, scale, cast, broadcasting binary ------===//
#include "RuntimeTestUtil.h"

#include <functional>
#include <numbers>

using namespace strata::runtime;
using namespace strata::runtime::test;

namespace {

struct UnaryCase {
  Recipe recipe;
  std::function<double(double)> ref;
  float lo, hi; ///< input range
};

TEST(CpuElementwise, EveryUnaryRecipe) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  const double c = std::sqrt(2.0 / std::numbers::pi);
  std::vector<UnaryCase> cases = {
      {Recipe::Neg, [](double x) { return -x; }, -5, 5},
      {Recipe::Exp, [](double x) { return std::exp(x); }, -5, 5},
      {Recipe::Log, [](double x) { return std::log(x); }, 0.01f, 10},
      {Recipe::Sqrt, [](double x) { return std::sqrt(x); }, 0, 10},
      {Recipe::Rsqrt, [](double x) { return 1 / std::sqrt(x); }, 0.01f, 10},
      {Recipe::Abs, [](double x) { return std::fabs(x); }, -5, 5},
      {Recipe::Square, [](double x) { return x * x; }, -5, 5},
      {Recipe::Relu, [](double x) { return x > 0 ? x : 0; }, -5, 5},
      {Recipe::Silu, [](double x) { return x / (1 + std::exp(-x)); }, -8, 8},
      {Recipe::Sigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }, -8, 8},
      {Recipe::Softplus,
       [](double x) { return x > 20 ? x : std::log1p(std::exp(x)); }, -30, 30},
      {Recipe::Gelu,
       [c](double x) {
         return 0.5 * x * (1 + std::tanh(c * (x + 0.044715 * x * x * x)));
       },
       -6, 6},
      {Recipe::Tanh, [](double x) { return std::tanh(x); }, -4, 4},
  };
  for (const UnaryCase &uc : cases) {
    SCOPED_TRACE(format::recipeInfo(uc.recipe).name);
    int64_t t = rng.integer(1, 7), d = rng.integer(1, 40);
    std::vector<float> xv = rng.uniform(t * d, uc.lo, uc.hi);
    HostTensor x = buffer({t, d}, xv), y = output({t, d});
    std::string error;
    ASSERT_TRUE(runKernel(uc.recipe, {}, {&x}, {&y}, error)) << error;
    std::vector<double> want;
    for (float v : xv)
      want.push_back(uc.ref(v));
    EXPECT_LT(nmse(y.floats(), want), kF32Bar);
  }
}

TEST(CpuElementwise, ScaleAcceptsIntsAndDefaultsB) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  std::vector<float> xv = rng.normal(30);
  HostTensor x = buffer({5, 6}, xv), y = output({5, 6}), z = output({5, 6});
  std::string error;
  ASSERT_TRUE(runKernel(Recipe::Scale, {{"s", aFloat(0.5)}, {"b", aInt(3)}},
                        {&x}, {&y}, error))
      << error;
  ASSERT_TRUE(runKernel(Recipe::Scale, {{"s", aInt(-2)}}, {&x}, {&z}, error))
      << error;
  std::vector<double> wy, wz;
  for (float v : xv) {
    wy.push_back(v * 0.5 + 3);
    wz.push_back(-2.0 * v);
  }
  EXPECT_LT(nmse(y.floats(), wy), kF32Bar);
  EXPECT_LT(nmse(z.floats(), wz), kF32Bar);
  EXPECT_FALSE(runKernel(Recipe::Scale, {}, {&x}, {&y}, error));
  EXPECT_EQ(error, "missing attribute 's'");
}

TEST(CpuElementwise, SignAndClamp) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  int64_t t = rng.integer(1, 7), d = rng.integer(1, 40);
  std::vector<float> xv = rng.uniform(t * d, -3, 3);
  xv[0] = 0.0f;
  HostTensor x = buffer({t, d}, xv), s = output({t, d});
  std::string error;
  ASSERT_TRUE(runKernel(Recipe::Sign, {}, {&x}, {&s}, error)) << error;
  std::vector<double> want;
  for (float v : xv)
    want.push_back(v > 0 ? 1.0 : (v < 0 ? -1.0 : 0.0));
  EXPECT_EQ(s.floats(), std::vector<float>(want.begin(), want.end()));

  double lo = rng.uniform(1, -2, 0)[0], hi = rng.uniform(1, 0, 2)[0];
  struct Case {
    AttrMap attrs;
    double lo, hi;
  };
  std::vector<Case> cases = {
      {{{"min", aFloat(lo)}, {"max", aFloat(hi)}}, lo, hi},
      {{{"min", aFloat(lo)}}, lo, INFINITY},
      {{{"max", aInt(1)}}, -INFINITY, 1},
      {{}, -INFINITY, INFINITY},
  };
  for (const Case &c : cases) {
    HostTensor y = output({t, d});
    ASSERT_TRUE(runKernel(Recipe::Clamp, c.attrs, {&x}, {&y}, error)) << error;
    std::vector<double> w;
    for (float v : xv)
      w.push_back(std::min(std::max(double(v), double(float(c.lo))),
                           double(float(c.hi))));
    EXPECT_LT(nmse(y.floats(), w), kF32Bar);
  }
  HostTensor y = output({t, d});
  EXPECT_FALSE(runKernel(Recipe::Clamp,
                         {{"min", aFloat(1)}, {"max", aFloat(0)}}, {&x}, {&y},
                         error));
  EXPECT_NE(error.find("'min' (1) is above 'max' (0)"), std::string::npos)
      << error;
  // NaN passes through both.
  HostTensor n = buffer({1}, {NAN}), ns = output({1}), nc = output({1});
  ASSERT_TRUE(runKernel(Recipe::Sign, {}, {&n}, {&ns}, error)) << error;
  ASSERT_TRUE(
      runKernel(Recipe::Clamp, {{"min", aFloat(0)}}, {&n}, {&nc}, error))
      << error;
  EXPECT_TRUE(std::isnan(ns.floats()[0]));
  EXPECT_TRUE(std::isnan(nc.floats()[0]));
}

TEST(CpuElementwise, CastBetweenEveryType) {
  std::vector<float> xv = {1.5f, -2.25f, 3.0f, 100000.0f, -0.0f, 7.75f};
  HostTensor x = buffer({2, 3}, xv);
  std::string error;
  HostTensor h = output({2, 3}, PlanDType::F16);
  ASSERT_TRUE(runKernel(Recipe::Cast, {{"to", aStr("f16")}}, {&x}, {&h}, error))
      << error;
  std::vector<float> hv = h.floats();
  EXPECT_EQ(hv[0], 1.5f);
  EXPECT_TRUE(std::isinf(hv[3])); // above f16's range
  HostTensor b = output({2, 3}, PlanDType::BF16);
  ASSERT_TRUE(
      runKernel(Recipe::Cast, {{"to", aStr("bf16")}}, {&x}, {&b}, error))
      << error;
  EXPECT_EQ(b.floats()[1], -2.25f);
  HostTensor i = output({6}, PlanDType::I32);
  ASSERT_TRUE(runKernel(Recipe::Cast, {{"to", aStr("i32")}}, {&x}, {&i}, error))
      << error;
  EXPECT_EQ(i.ints(), (std::vector<int32_t>{1, -2, 3, 100000, 0, 7}));
  HostTensor back = output({2, 3});
  ASSERT_TRUE(
      runKernel(Recipe::Cast, {{"to", aStr("f32")}}, {&i}, {&back}, error))
      << error;
  EXPECT_EQ(back.floats(), (std::vector<float>{1, -2, 3, 100000, 0, 7}));
  // `to` and the output buffer's type must agree.
  EXPECT_FALSE(
      runKernel(Recipe::Cast, {{"to", aStr("f16")}}, {&x}, {&back}, error));
  EXPECT_NE(error.find("but 'to' is f16"), std::string::npos) << error;
}

/// numpy broadcasting, reference computed by explicit index arithmetic.
TEST(CpuElementwise, BinaryBroadcasting) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  struct Case {
    std::vector<int64_t> a, b, out;
  };
  std::vector<Case> cases = {
      {{3, 4}, {3, 4}, {3, 4}},       {{3, 4}, {4}, {3, 4}},
      {{4}, {3, 4}, {3, 4}},          {{3, 1}, {1, 4}, {3, 4}},
      {{2, 3, 4}, {3, 1}, {2, 3, 4}}, {{2, 1, 4}, {1, 3, 1}, {2, 3, 4}},
      {{5, 1}, {1}, {5, 1}},          {{}, {2, 2}, {2, 2}}};
  std::vector<std::pair<Recipe, std::function<double(double, double)>>> ops = {
      {Recipe::Add, [](double a, double b) { return a + b; }},
      {Recipe::Sub, [](double a, double b) { return a - b; }},
      {Recipe::Mul, [](double a, double b) { return a * b; }},
      {Recipe::Div, [](double a, double b) { return a / b; }},
      {Recipe::Maximum, [](double a, double b) { return std::max(a, b); }},
      {Recipe::Minimum, [](double a, double b) { return std::min(a, b); }}};
  for (const Case &c : cases)
    for (const auto &[recipe, f] : ops) {
      SCOPED_TRACE(fmt::format("{} {} {}", format::recipeInfo(recipe).name,
                               fmt::join(c.a, "x"), fmt::join(c.b, "x")));
      std::vector<float> av = rng.normal(count(c.a));
      std::vector<float> bv = rng.uniform(count(c.b), 0.5f, 2.0f);
      HostTensor a = buffer(c.a, av), b = buffer(c.b, bv), y = output(c.out);
      std::string error;
      ASSERT_TRUE(runKernel(recipe, {}, {&a, &b}, {&y}, error)) << error;
      size_t rank = c.out.size();
      std::vector<double> want(count(c.out));
      for (int64_t i = 0; i < count(c.out); ++i) {
        // Multi-index of i in the output, then each input's flat index.
        std::vector<int64_t> idx(rank);
        int64_t rem = i;
        for (size_t d = rank; d-- > 0;) {
          idx[d] = rem % c.out[d];
          rem /= c.out[d];
        }
        auto flat = [&](const std::vector<int64_t> &s) {
          int64_t f = 0;
          for (size_t k = 0; k < s.size(); ++k) {
            int64_t od = idx[rank - s.size() + k];
            f = f * s[k] + (s[k] == 1 ? 0 : od);
          }
          return f;
        };
        want[i] = f(av[flat(c.a)], bv[flat(c.b)]);
      }
      EXPECT_LT(nmse(y.floats(), want), kF32Bar);
    }
}

TEST(CpuElementwise, BinaryRejectsBadShapes) {
  HostTensor a = buffer({3, 4}, std::vector<float>(12, 1));
  HostTensor b = buffer({3, 5}, std::vector<float>(15, 1));
  HostTensor y = output({3, 4});
  std::string error;
  EXPECT_FALSE(runKernel(Recipe::Add, {}, {&a, &b}, {&y}, error));
  EXPECT_NE(error.find("does not broadcast"), std::string::npos) << error;
  HostTensor c = buffer({4}, std::vector<float>(4, 1));
  HostTensor big = output({2, 3, 4});
  EXPECT_FALSE(runKernel(Recipe::Mul, {}, {&a, &c}, {&big}, error));
  EXPECT_NE(error.find("is not the broadcast"), std::string::npos) << error;
}

TEST(CpuElementwise, MaximumPropagatesNan) {
  HostTensor a = buffer({2}, {NAN, 1.0f}), b = buffer({2}, {0.0f, NAN});
  HostTensor y = output({2});
  std::string error;
  ASSERT_TRUE(runKernel(Recipe::Maximum, {}, {&a, &b}, {&y}, error)) << error;
  EXPECT_TRUE(std::isnan(y.floats()[0]));
  EXPECT_TRUE(std::isnan(y.floats()[1]));
}

/// An output that aliases an input (in place, or shifted) still reads the
/// inputs as they were before the kernel.
TEST(CpuElementwise, OutputOverlappingAnInput) {
  std::vector<float> v = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<float> arena = v;
  Launch l;
  l.recipe = Recipe::Add;
  TensorArg a;
  a.data = arena.data();
  a.bytes = 32;
  a.shape = {4};
  TensorArg b = a;
  b.data = arena.data() + 2;
  b.bytes = 24;
  TensorArg y = a;
  y.data = arena.data() + 1;
  y.bytes = 28;
  l.inputs = {a, b};
  l.outputs = {y};
  std::string error;
  ASSERT_TRUE(runCpuKernel(l, error)) << error;
  // y[i] = v[i] + v[i + 2], written at arena[1..4].
  EXPECT_EQ(arena, (std::vector<float>{1, 4, 6, 8, 10, 6, 7, 8}));
}

/// f16 and bf16 buffers are read and written with conversion.
TEST(CpuElementwise, HalfPrecisionBuffers) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  std::vector<float> av = rng.normal(24), bv = rng.normal(6);
  HostTensor a = buffer({4, 6}, av, PlanDType::F16);
  HostTensor b = buffer({6}, bv, PlanDType::BF16);
  HostTensor y = output({4, 6}, PlanDType::F16);
  std::string error;
  ASSERT_TRUE(runKernel(Recipe::Mul, {}, {&a, &b}, {&y}, error)) << error;
  std::vector<float> af = a.floats(), bf = b.floats();
  std::vector<double> want;
  for (int64_t i = 0; i < 24; ++i)
    want.push_back(static_cast<double>(af[i]) * bf[i % 6]);
  EXPECT_LT(nmse(y.floats(), want), 1e-6); // f16 output rounding
}

} // namespace
