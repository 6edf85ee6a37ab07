//===- HyperConnectionTest.cpp - hc_expand/norm/read/write, sinkhorn ------===//
#include "RuntimeTestUtil.h"

using namespace strata::runtime;
using namespace strata::runtime::test;

namespace {

TEST(CpuHyperConnection, ExpandReadWrite) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  int64_t t = rng.integer(1, 6), n = rng.integer(1, 4), d = rng.integer(1, 40);
  std::vector<float> xv = rng.normal(t * d);
  HostTensor x = buffer({t, d}, xv), r = output({t, n, d});
  std::string error;
  ASSERT_TRUE(runKernel(Recipe::HcExpand, {{"n", aInt(n)}}, {&x}, {&r}, error))
      << error;
  std::vector<double> want;
  for (int64_t ti = 0; ti < t; ++ti)
    for (int64_t s = 0; s < n; ++s)
      for (int64_t c = 0; c < d; ++c)
        want.push_back(xv[ti * d + c]);
  EXPECT_EQ(nmse(r.floats(), want), 0.0);

  std::vector<float> xnv = rng.normal(t * n * d), gv = rng.normal(t * n * d);
  HostTensor xn = buffer({t, n, d}, xnv), g = buffer({t, n, d}, gv);
  HostTensor read = output({t, d});
  ASSERT_TRUE(runKernel(Recipe::HcRead, {}, {&xn, &g}, {&read}, error))
      << error;
  std::vector<double> wantRead(t * d, 0.0);
  for (int64_t ti = 0; ti < t; ++ti)
    for (int64_t s = 0; s < n; ++s)
      for (int64_t c = 0; c < d; ++c)
        wantRead[ti * d + c] +=
            double(gv[(ti * n + s) * d + c]) * xnv[(ti * n + s) * d + c] / n;
  EXPECT_LT(nmse(read.floats(), wantRead), kF32Bar);

  std::vector<float> fv = rng.normal(t * d), lv = rng.normal(t * n);
  HostTensor f = buffer({t, d}, fv), lam = buffer({t, n}, lv);
  HostTensor written = output({t, n, d});
  ASSERT_TRUE(
      runKernel(Recipe::HcWrite, {}, {&xn, &f, &lam}, {&written}, error))
      << error;
  std::vector<double> wantWrite;
  for (int64_t ti = 0; ti < t; ++ti)
    for (int64_t s = 0; s < n; ++s)
      for (int64_t c = 0; c < d; ++c)
        wantWrite.push_back(double(xnv[(ti * n + s) * d + c]) +
                            double(lv[ti * n + s]) * fv[ti * d + c]);
  EXPECT_LT(nmse(written.floats(), wantWrite), kF32Bar);
}

TEST(CpuHyperConnection, NormPerStream) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  int64_t t = rng.integer(1, 5), n = 4, d = 64;
  std::vector<float> rv = rng.normal(t * n * d, 2.0f);
  HostTensor r = buffer({t, n, d}, rv);
  HostTensor w = weight(GgmlType::Q8_0, {n * d}, rng.normal(n * d));
  std::vector<float> wv = w.floats();
  float eps = 1e-6f;
  for (bool withWeight : {false, true}) {
    HostTensor y = output({t, n, d});
    std::vector<HostTensor *> ins = {&r};
    if (withWeight)
      ins.push_back(&w);
    std::string error;
    ASSERT_TRUE(
        runKernel(Recipe::HcNorm, {{"eps", aFloat(eps)}}, ins, {&y}, error))
        << error;
    std::vector<double> want;
    for (int64_t row = 0; row < t * n; ++row) {
      double ss = 0;
      for (int64_t c = 0; c < d; ++c)
        ss += double(rv[row * d + c]) * rv[row * d + c];
      double scale = 1 / std::sqrt(ss / d + eps);
      for (int64_t c = 0; c < d; ++c)
        want.push_back(rv[row * d + c] * scale *
                       (withWeight ? wv[(row % n) * d + c] : 1.0));
    }
    EXPECT_LT(nmse(y.floats(), want), kF32Bar);
  }
}

TEST(CpuHyperConnection, Sinkhorn) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  int64_t t = rng.integer(1, 4), n = 4, iters = rng.integer(1, 20);
  std::vector<float> xv = rng.normal(t * n * n, 2.0f);
  HostTensor x = buffer({t, n, n}, xv), y = output({t, n, n});
  std::string error;
  ASSERT_TRUE(
      runKernel(Recipe::Sinkhorn, {{"iters", aInt(iters)}}, {&x}, {&y}, error))
      << error;
  std::vector<double> want;
  for (int64_t m = 0; m < t; ++m) {
    std::vector<double> a(xv.begin() + m * n * n, xv.begin() + (m + 1) * n * n);
    double max = *std::max_element(a.begin(), a.end());
    for (double &v : a)
      v = std::exp(v - max);
    for (int64_t it = 0; it < iters; ++it) {
      for (int64_t i = 0; i < n; ++i) {
        double s = 0;
        for (int64_t j = 0; j < n; ++j)
          s += a[i * n + j];
        for (int64_t j = 0; j < n; ++j)
          a[i * n + j] /= s;
      }
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t i = 0; i < n; ++i)
          s += a[i * n + j];
        for (int64_t i = 0; i < n; ++i)
          a[i * n + j] /= s;
      }
    }
    want.insert(want.end(), a.begin(), a.end());
  }
  EXPECT_LT(nmse(y.floats(), want), kF32Bar);
  // Columns sum to 1 after the last step.
  std::vector<float> yv = y.floats();
  for (int64_t j = 0; j < n; ++j) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i)
      s += yv[i * n + j];
    EXPECT_NEAR(s, 1.0, 1e-5);
  }
}

} // namespace
