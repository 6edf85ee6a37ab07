//===- DataMovementTest.cpp - copy, permute, slice, concat ----------------===//
#include "RuntimeTestUtil.h"

#include <numeric>

using namespace strata::runtime;
using namespace strata::runtime::test;

namespace {

std::vector<float> iotaF(int64_t n) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 0.0f);
  return v;
}

TEST(CpuDataMovement, CopyReshapesAndConverts) {
  HostTensor x = buffer({2, 6}, iotaF(12));
  HostTensor y = output({3, 2, 2});
  std::string error;
  ASSERT_TRUE(runKernel(Recipe::Reshape, {}, {&x}, {&y}, error)) << error;
  EXPECT_EQ(y.floats(), iotaF(12));
  HostTensor h = output({12}, PlanDType::F16);
  ASSERT_TRUE(runKernel(Recipe::Reshape, {}, {&x}, {&h}, error)) << error;
  EXPECT_EQ(h.floats(), iotaF(12));
  // A weight copied out is dequantised.
  HostTensor w = weight(GgmlType::Q8_0, {2, 32}, iotaF(64));
  HostTensor wy = output({64});
  ASSERT_TRUE(runKernel(Recipe::Reshape, {}, {&w}, {&wy}, error)) << error;
  EXPECT_EQ(wy.floats(), w.floats());
  HostTensor small = output({11});
  EXPECT_FALSE(runKernel(Recipe::Reshape, {}, {&x}, {&small}, error));
  HostTensor ints = output({12}, PlanDType::I32);
  EXPECT_FALSE(runKernel(Recipe::Reshape, {}, {&x}, {&ints}, error));
  EXPECT_NE(error.find("convert with cast"), std::string::npos) << error;
}

TEST(CpuDataMovement, PermuteEveryOrderOfRank3) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  std::vector<int64_t> s = {rng.integer(1, 4), rng.integer(1, 5),
                            rng.integer(1, 6)};
  std::vector<float> xv = rng.normal(count(s));
  HostTensor x = buffer(s, xv);
  std::vector<int64_t> perm = {0, 1, 2};
  do {
    SCOPED_TRACE(fmt::format("perm {}", fmt::join(perm, ",")));
    std::vector<int64_t> os = {s[perm[0]], s[perm[1]], s[perm[2]]};
    HostTensor y = output(os);
    std::string error;
    ASSERT_TRUE(
        runKernel(Recipe::Permute, {{"perm", aInts(perm)}}, {&x}, {&y}, error))
        << error;
    std::vector<float> yv = y.floats();
    for (int64_t i = 0; i < os[0]; ++i)
      for (int64_t j = 0; j < os[1]; ++j)
        for (int64_t k = 0; k < os[2]; ++k) {
          int64_t in[3];
          in[perm[0]] = i;
          in[perm[1]] = j;
          in[perm[2]] = k;
          ASSERT_EQ(yv[(i * os[1] + j) * os[2] + k],
                    xv[(in[0] * s[1] + in[1]) * s[2] + in[2]]);
        }
  } while (std::next_permutation(perm.begin(), perm.end()));
  HostTensor y = output(s);
  std::string error;
  EXPECT_FALSE(runKernel(Recipe::Permute, {{"perm", aInts({0, 0, 1})}}, {&x},
                         {&y}, error));
  EXPECT_NE(error.find("is not a permutation"), std::string::npos) << error;
}

TEST(CpuDataMovement, SliceAndConcat) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  std::vector<int64_t> s = {3, 5, 4};
  std::vector<float> xv = rng.normal(count(s));
  HostTensor x = buffer(s, xv);
  for (int64_t axis = -3; axis < 3; ++axis) {
    int64_t ax = axis < 0 ? axis + 3 : axis;
    int64_t start = rng.integer(0, s[ax] - 1), end = rng.integer(start, s[ax]);
    SCOPED_TRACE(fmt::format("axis {} {}..{}", axis, start, end));
    std::vector<int64_t> os = s;
    os[ax] = end - start;
    if (end == start)
      continue; // zero-sized outputs are not planned
    HostTensor y = output(os);
    std::string error;
    ASSERT_TRUE(runKernel(
        Recipe::Slice,
        {{"axis", aInt(axis)}, {"start", aInt(start)}, {"end", aInt(end)}},
        {&x}, {&y}, error))
        << error;
    std::vector<float> yv = y.floats();
    for (int64_t i = 0; i < os[0]; ++i)
      for (int64_t j = 0; j < os[1]; ++j)
        for (int64_t k = 0; k < os[2]; ++k) {
          int64_t in[3] = {i, j, k};
          in[ax] += start;
          ASSERT_EQ(yv[(i * os[1] + j) * os[2] + k],
                    xv[(in[0] * s[1] + in[1]) * s[2] + in[2]]);
        }
    // Concatenating the slice [0, start), [start, end), [end, n) gives x.
    std::vector<HostTensor> parts;
    for (auto [a, b] :
         {std::pair{int64_t(0), start}, {start, end}, {end, s[ax]}}) {
      if (a == b)
        continue;
      std::vector<int64_t> ps = s;
      ps[ax] = b - a;
      HostTensor p = output(ps);
      ASSERT_TRUE(
          runKernel(Recipe::Slice,
                    {{"axis", aInt(ax)}, {"start", aInt(a)}, {"end", aInt(b)}},
                    {&x}, {&p}, error))
          << error;
      parts.push_back(std::move(p));
    }
    std::vector<HostTensor *> ins;
    for (HostTensor &p : parts)
      ins.push_back(&p);
    HostTensor whole = output(s);
    ASSERT_TRUE(
        runKernel(Recipe::Concat, {{"axis", aInt(axis)}}, ins, {&whole}, error))
        << error;
    EXPECT_EQ(whole.floats(), xv);
  }
  HostTensor y = output({3, 5, 4});
  std::string error;
  EXPECT_FALSE(runKernel(
      Recipe::Slice, {{"axis", aInt(1)}, {"start", aInt(2)}, {"end", aInt(6)}},
      {&x}, {&y}, error));
  EXPECT_NE(error.find("slice 2..6 does not fit"), std::string::npos) << error;
  EXPECT_FALSE(
      runKernel(Recipe::Concat, {{"axis", aInt(0)}}, {&x, &x}, {&y}, error));
  EXPECT_NE(error.find("add up to 6 along axis 0"), std::string::npos) << error;
}

} // namespace
