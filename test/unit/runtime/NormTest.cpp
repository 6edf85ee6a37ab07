//===- NormTest.cpp - softmax, reductions, rms_norm, l2_norm --------------===//
#include "RuntimeTestUtil.h"

using namespace strata::runtime;
using namespace strata::runtime::test;

namespace {

TEST(CpuNorm, Softmax) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  int64_t t = rng.integer(1, 6), h = rng.integer(1, 4), d = rng.integer(1, 50);
  std::vector<float> xv = rng.normal(t * h * d, 4.0f);
  xv[0] = 80.0f; // exp(80) overflows f32 without the max subtraction
  HostTensor x = buffer({t, h, d}, xv), y = output({t, h, d});
  std::string error;
  ASSERT_TRUE(runKernel(Recipe::Softmax, {}, {&x}, {&y}, error)) << error;
  std::vector<double> want(xv.size());
  for (int64_t r = 0; r < t * h; ++r) {
    double max = -INFINITY, sum = 0;
    for (int64_t i = 0; i < d; ++i)
      max = std::max<double>(max, xv[r * d + i]);
    for (int64_t i = 0; i < d; ++i)
      sum += std::exp(xv[r * d + i] - max);
    for (int64_t i = 0; i < d; ++i)
      want[r * d + i] = std::exp(xv[r * d + i] - max) / sum;
  }
  EXPECT_LT(nmse(y.floats(), want), kF32Bar);
}

TEST(CpuNorm, ArgmaxTakesTheFirstHighestAndRefusesBadRows) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  int64_t t = rng.integer(2, 6), h = rng.integer(1, 3), d = rng.integer(2, 60);
  // Integers: many ties, which the lowest index must win.
  std::vector<float> xv(t * h * d);
  for (float &v : xv)
    v = static_cast<float>(rng.integer(-3, 3));
  const int64_t rows = t * h;
  // Row 0 all -inf, row 1 a NaN, the last a +inf: no token (-1); any
  // -inf elsewhere is just a low value.
  for (int64_t i = 0; i < d; ++i)
    xv[i] = -INFINITY;
  xv[d + rng.integer(0, d - 1)] = NAN;
  xv[(rows - 1) * d + rng.integer(0, d - 1)] = INFINITY;
  if (rows > 3)
    xv[2 * d] = -INFINITY;
  HostTensor x = buffer({t, h, d}, xv), y = output({t, h}, PlanDType::I32);
  std::string error;
  ASSERT_TRUE(runKernel(Recipe::Argmax, {}, {&x}, {&y}, error)) << error;
  std::vector<int32_t> got = y.ints();
  ASSERT_EQ(got.size(), static_cast<size_t>(rows));
  EXPECT_EQ(got[0], -1);
  EXPECT_EQ(got[1], -1);
  EXPECT_EQ(got[rows - 1], -1);
  for (int64_t r = 2; r + 1 < rows; ++r) {
    const float *v = xv.data() + r * d;
    const int64_t want = std::max_element(v, v + d) - v; // the first
    EXPECT_EQ(got[r], want) << "row " << r;
  }
}

TEST(CpuNorm, ReduceSumAndMeanOnEveryAxis) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  std::vector<int64_t> s = {rng.integer(1, 4), rng.integer(1, 5),
                            rng.integer(1, 6)};
  std::vector<float> xv = rng.normal(count(s));
  HostTensor x = buffer(s, xv);
  for (int64_t axis = -3; axis < 3; ++axis)
    for (bool mean : {false, true}) {
      SCOPED_TRACE(fmt::format("axis {} mean {}", axis, mean));
      int64_t ax = axis < 0 ? axis + 3 : axis;
      std::vector<int64_t> os = s;
      os.erase(os.begin() + ax);
      HostTensor y = output(os);
      std::string error;
      ASSERT_TRUE(runKernel(mean ? Recipe::ReduceMean : Recipe::ReduceSum,
                            {{"axis", aInt(axis)}}, {&x}, {&y}, error))
          << error;
      std::vector<double> want(count(os), 0.0);
      for (int64_t i = 0; i < s[0]; ++i)
        for (int64_t j = 0; j < s[1]; ++j)
          for (int64_t k = 0; k < s[2]; ++k) {
            int64_t idx[3] = {i, j, k};
            std::vector<int64_t> o;
            for (int64_t d = 0; d < 3; ++d)
              if (d != ax)
                o.push_back(idx[d]);
            want[o[0] * os[1] + o[1]] +=
                xv[(i * s[1] + j) * s[2] + k] / (mean ? s[ax] : 1);
          }
      EXPECT_LT(nmse(y.floats(), want), kF32Bar);
    }
  HostTensor bad = output({s[0], s[1], s[2]});
  std::string error;
  EXPECT_FALSE(
      runKernel(Recipe::ReduceSum, {{"axis", aInt(3)}}, {&x}, {&bad}, error));
  EXPECT_NE(error.find("axis 3 is out of range"), std::string::npos) << error;
}

/// rms_norm with and without a weight, plain and in groups; the weight is a
/// quantised GGUF-style tensor.
TEST(CpuNorm, RmsNorm) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  int64_t t = rng.integer(1, 5), h = rng.integer(1, 3), d = 64;
  std::vector<float> xv = rng.normal(t * h * d, 3.0f);
  HostTensor x = buffer({t, h, d}, xv);
  HostTensor w = weight(GgmlType::Q8_0, {d}, rng.normal(d));
  std::vector<float> wv = w.floats();
  for (int64_t groups : {int64_t(1), int64_t(4), int64_t(64)})
    for (bool withWeight : {false, true}) {
      SCOPED_TRACE(fmt::format("groups {} weight {}", groups, withWeight));
      float eps = 1e-5f;
      HostTensor y = output({t, h, d});
      AttrMap attrs = {{"eps", aFloat(eps)}};
      if (groups > 1)
        attrs["groups"] = aInt(groups);
      std::vector<HostTensor *> ins = {&x};
      if (withWeight)
        ins.push_back(&w);
      std::string error;
      ASSERT_TRUE(runKernel(Recipe::RmsNorm, attrs, ins, {&y}, error)) << error;
      int64_t g = d / groups;
      std::vector<double> want(xv.size());
      for (int64_t r = 0; r < t * h * groups; ++r) {
        double ss = 0;
        for (int64_t i = 0; i < g; ++i)
          ss += double(xv[r * g + i]) * xv[r * g + i];
        double scale = 1 / std::sqrt(ss / g + eps);
        for (int64_t i = 0; i < g; ++i)
          want[r * g + i] =
              xv[r * g + i] * scale * (withWeight ? wv[(r * g + i) % d] : 1.0);
      }
      EXPECT_LT(nmse(y.floats(), want), kF32Bar);
    }
  HostTensor y = output({t, h, d});
  std::string error;
  EXPECT_FALSE(runKernel(Recipe::RmsNorm,
                         {{"eps", aFloat(1e-6)}, {"groups", aInt(5)}}, {&x},
                         {&y}, error));
  EXPECT_NE(error.find("groups = 5"), std::string::npos) << error;
  EXPECT_FALSE(runKernel(Recipe::RmsNorm, {}, {&x}, {&y}, error));
  EXPECT_EQ(error, "missing attribute 'eps'");
}

TEST(CpuNorm, L2Norm) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  int64_t t = rng.integer(1, 6), d = rng.integer(1, 70);
  std::vector<float> xv = rng.normal(t * d);
  for (int64_t i = 0; i < d; ++i)
    xv[i] = 1e-9f; // a tiny row: divided by eps, not by its norm
  HostTensor x = buffer({t, d}, xv), y = output({t, d});
  float eps = 1e-6f;
  std::string error;
  ASSERT_TRUE(
      runKernel(Recipe::L2Norm, {{"eps", aFloat(eps)}}, {&x}, {&y}, error))
      << error;
  std::vector<double> want(xv.size());
  for (int64_t r = 0; r < t; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < d; ++i)
      ss += double(xv[r * d + i]) * xv[r * d + i];
    double div = std::max(std::sqrt(ss), double(eps));
    for (int64_t i = 0; i < d; ++i)
      want[r * d + i] = xv[r * d + i] / div;
  }
  EXPECT_LT(nmse(y.floats(), want), kF32Bar);
}

TEST(CpuNorm, L2NormFormAdd) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  int64_t t = rng.integer(1, 6), d = rng.integer(1, 70);
  std::vector<float> xv = rng.normal(t * d);
  for (int64_t i = 0; i < d; ++i)
    xv[i] = 1e-4f; // a small row: eps dominates the sum
  HostTensor x = buffer({t, d}, xv), y = output({t, d}), z = output({t, d});
  float eps = 1e-6f;
  std::string error;
  ASSERT_TRUE(runKernel(Recipe::L2Norm,
                        {{"eps", aFloat(eps)}, {"form", aStr("add")}}, {&x},
                        {&y}, error))
      << error;
  std::vector<double> want(xv.size());
  for (int64_t r = 0; r < t; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < d; ++i)
      ss += double(xv[r * d + i]) * xv[r * d + i];
    double scale = 1.0 / std::sqrt(ss + double(eps));
    for (int64_t i = 0; i < d; ++i)
      want[r * d + i] = xv[r * d + i] * scale;
  }
  EXPECT_LT(nmse(y.floats(), want), kF32Bar);
  EXPECT_FALSE(runKernel(Recipe::L2Norm,
                         {{"eps", aFloat(eps)}, {"form", aStr("sum")}}, {&x},
                         {&z}, error));
  EXPECT_NE(error.find("'form' must be"), std::string::npos) << error;
}

} // namespace
