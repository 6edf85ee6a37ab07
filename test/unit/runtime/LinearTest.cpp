//===- LinearTest.cpp - matmul, get_rows, arange --------------------------===//
#include "RuntimeTestUtil.h"

using namespace strata::runtime;
using namespace strata::runtime::test;

namespace {

/// y[..., n] = sum_k x[..., k] w[n, k] in double, from the dequantised w.
std::vector<double> refMatmul(const std::vector<float> &x,
                              const std::vector<float> &w, int64_t rows,
                              int64_t n, int64_t k) {
  std::vector<double> y(rows * n, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < k; ++i)
        y[r * n + j] += double(x[r * k + i]) * w[j * k + i];
  return y;
}

TEST(CpuLinear, MatmulEveryQuantisableWeightType) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  for (GgmlType type :
       {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0,
        GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
        GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::IQ3_S}) {
    SCOPED_TRACE(format::ggmlTypeInfo(type).name);
    int64_t k = 256 * rng.integer(1, 2), n = rng.integer(1, 40);
    int64_t b = rng.integer(1, 3), t = rng.integer(1, 5);
    std::vector<float> xv = rng.normal(b * t * k);
    HostTensor x = buffer({b, t, k}, xv);
    HostTensor w = weight(type, {n, k}, rng.normal(n * k, 0.1f));
    HostTensor y = output({b, t, n});
    std::string error;
    ASSERT_TRUE(runKernel(Recipe::Matmul, {}, {&x, &w}, {&y}, error)) << error;
    EXPECT_LT(nmse(y.floats(), refMatmul(xv, w.floats(), b * t, n, k)),
              kF32Bar);
  }
}

/// Large enough to use every worker; the bits must not depend on how many
/// (uneven counts split the columns unevenly).
TEST(CpuLinear, MatmulThreadsGiveIdenticalBits) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  int64_t t = 7, n = 97, k = 512;
  std::vector<float> xv = rng.normal(t * k);
  HostTensor x = buffer({t, k}, xv);
  HostTensor w = weight(GgmlType::Q4_K, {n, k}, rng.normal(n * k));
  HostTensor y1 = output({t, n});
  std::string error;
  ASSERT_TRUE(runKernel(Recipe::Matmul, {}, {&x, &w}, {&y1}, error, 1))
      << error;
  EXPECT_LT(nmse(y1.floats(), refMatmul(xv, w.floats(), t, n, k)), kF32Bar);
  for (int threads : {2, 3, 5, 16}) {
    HostTensor y = output({t, n});
    ASSERT_TRUE(runKernel(Recipe::Matmul, {}, {&x, &w}, {&y}, error, threads))
        << error;
    EXPECT_EQ(y1.bytes, y.bytes) << threads << " threads";
  }
}

/// A buffer (f32 activations) as the right-hand side, and an f16 one.
TEST(CpuLinear, MatmulWithBufferWeights) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  int64_t t = 3, n = 5, k = 13; // K need not be a block multiple for buffers
  std::vector<float> xv = rng.normal(t * k), wv = rng.normal(n * k);
  HostTensor x = buffer({t, k}, xv);
  for (PlanDType type : {PlanDType::F32, PlanDType::F16}) {
    HostTensor w = buffer({n, k}, wv, type), y = output({t, n});
    std::string error;
    ASSERT_TRUE(runKernel(Recipe::Matmul, {}, {&x, &w}, {&y}, error)) << error;
    EXPECT_LT(nmse(y.floats(), refMatmul(xv, w.floats(), t, n, k)), kF32Bar);
  }
}

TEST(CpuLinear, MatmulShapeErrors) {
  HostTensor x = buffer({2, 32}, std::vector<float>(64, 1));
  HostTensor w = weight(GgmlType::Q8_0, {4, 64}, std::vector<float>(256, 1));
  HostTensor y = output({2, 4});
  std::string error;
  EXPECT_FALSE(runKernel(Recipe::Matmul, {}, {&x, &w}, {&y}, error));
  EXPECT_NE(error.find("contraction dims differ"), std::string::npos) << error;
  HostTensor x2 = buffer({2, 64}, std::vector<float>(128, 1));
  HostTensor bad = output({2, 5});
  EXPECT_FALSE(runKernel(Recipe::Matmul, {}, {&x2, &w}, {&bad}, error));
  EXPECT_NE(error.find("should be [2, 4]"), std::string::npos) << error;
  // A weight whose rows are not whole blocks, and one with too few bytes.
  HostTensor odd = w;
  odd.shape = {8, 32};
  EXPECT_FALSE(runKernel(Recipe::Matmul, {}, {&x, &odd}, {&y}, error));
  odd.shape = {4, 48};
  EXPECT_FALSE(runKernel(Recipe::Matmul, {}, {&x, &odd}, {&y}, error));
  EXPECT_NE(error.find("not a multiple of the Q8_0 block size 32"),
            std::string::npos)
      << error;
}

TEST(CpuLinear, GetRowsFromQuantisedTable) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  int64_t v = rng.integer(2, 30), d = 256, t = rng.integer(1, 9);
  HostTensor table = weight(GgmlType::Q4_K, {v, d}, rng.normal(v * d));
  std::vector<int32_t> idv = rng.integers(t, 0, v - 1);
  HostTensor idt = ids({t}, idv), y = output({t, d});
  std::string error;
  ASSERT_TRUE(runKernel(Recipe::GetRows, {}, {&table, &idt}, {&y}, error))
      << error;
  std::vector<float> tv = table.floats();
  std::vector<double> want;
  for (int32_t id : idv)
    for (int64_t i = 0; i < d; ++i)
      want.push_back(tv[id * d + i]);
  EXPECT_LT(nmse(y.floats(), want), kF32Bar);
  // An id past the table, or the poison an unwritten id buffer holds.
  idv[t - 1] = static_cast<int32_t>(v);
  HostTensor badIds = ids({t}, idv);
  EXPECT_FALSE(runKernel(Recipe::GetRows, {}, {&table, &badIds}, {&y}, error));
  EXPECT_NE(error.find(fmt::format("row id {} at position {}", v, t - 1)),
            std::string::npos)
      << error;
  HostTensor poisoned = output({t}, PlanDType::I32);
  EXPECT_FALSE(
      runKernel(Recipe::GetRows, {}, {&table, &poisoned}, {&y}, error));
}

TEST(CpuLinear, Arange) {
  HostTensor x = buffer({4, 3}, std::vector<float>(12, 0));
  HostTensor y = output({4}, PlanDType::I32);
  std::string error;
  ASSERT_TRUE(runKernel(Recipe::Arange, {}, {&x}, {&y}, error)) << error;
  EXPECT_EQ(y.ints(), (std::vector<int32_t>{0, 1, 2, 3}));
  HostTensor wrong = output({3}, PlanDType::I32);
  EXPECT_FALSE(runKernel(Recipe::Arange, {}, {&x}, {&wrong}, error));
  HostTensor stepped = output({4}, PlanDType::I32);
  ASSERT_TRUE(
      runKernel(Recipe::Arange, {{"step", aInt(64)}}, {&x}, {&stepped}, error))
      << error;
  EXPECT_EQ(stepped.ints(), (std::vector<int32_t>{0, 64, 128, 192}));
}

} // namespace
