//===- MoeTest.cpp - moe_route, moe_experts, moe_combine ------------------===//
#include "RuntimeTestUtil.h"

#include <algorithm>
#include <numeric>

using namespace strata::runtime;
using namespace strata::runtime::test;

namespace {

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

/// Per token, k distinct expert ids of e, drawn at random: ids [t, k].
std::vector<int32_t> distinctExperts(Rng &rng, int64_t t, int64_t e,
                                     int64_t k) {
  std::vector<int32_t> ids;
  for (int64_t ti = 0; ti < t; ++ti) {
    std::vector<int32_t> all(e);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng.gen());
    ids.insert(ids.end(), all.begin(), all.begin() + k);
  }
  return ids;
}

TEST(CpuMoe, RouteSoftmaxAndSigmoid) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  int64_t t = rng.integer(1, 8), e = rng.integer(4, 16), k = rng.integer(1, 4);
  std::vector<float> lv = rng.normal(t * e, 2.0f);
  HostTensor logits = buffer({t, e}, lv);
  for (std::string func : {"softmax", "sigmoid"})
    for (bool norm : {false, true}) {
      SCOPED_TRACE(fmt::format("{} norm {}", func, norm));
      HostTensor w = output({t, k}), id = output({t, k}, PlanDType::I32);
      std::string error;
      ASSERT_TRUE(runKernel(
          Recipe::MoeRoute,
          {{"k", aInt(k)}, {"func", aStr(func)}, {"norm", aBool(norm)}},
          {&logits}, {&w, &id}, error))
          << error;
      std::vector<double> want;
      std::vector<int32_t> wantIds;
      for (int64_t ti = 0; ti < t; ++ti) {
        std::vector<double> p(e);
        double max = *std::max_element(&lv[ti * e], &lv[ti * e] + e), sum = 0;
        for (int64_t i = 0; i < e; ++i) {
          p[i] = func == "softmax" ? std::exp(lv[ti * e + i] - max)
                                   : sigmoid(lv[ti * e + i]);
          sum += p[i];
        }
        if (func == "softmax")
          for (double &x : p)
            x /= sum;
        std::vector<int32_t> order(e);
        std::iota(order.begin(), order.end(), 0);
        std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
          return p[a] > p[b] || (p[a] == p[b] && a < b);
        });
        double sel = 0;
        for (int64_t s = 0; s < k; ++s)
          sel += p[order[s]];
        for (int64_t s = 0; s < k; ++s) {
          wantIds.push_back(order[s]);
          want.push_back(norm ? p[order[s]] / sel : p[order[s]]);
        }
      }
      EXPECT_EQ(id.ints(), wantIds);
      EXPECT_LT(nmse(w.floats(), want), kF32Bar);
    }
}

TEST(CpuMoe, RouteTiesGoToTheLowerExpert) {
  HostTensor logits = buffer({1, 5}, {1.0f, 3.0f, 2.0f, 3.0f, 3.0f});
  HostTensor w = output({1, 3}), id = output({1, 3}, PlanDType::I32);
  std::string error;
  ASSERT_TRUE(runKernel(
      Recipe::MoeRoute,
      {{"k", aInt(3)}, {"func", aStr("softmax")}, {"norm", aBool(true)}},
      {&logits}, {&w, &id}, error))
      << error;
  EXPECT_EQ(id.ints(), (std::vector<int32_t>{1, 3, 4}));
  for (float x : w.floats())
    EXPECT_NEAR(x, 1.0 / 3, 1e-7);
  EXPECT_FALSE(runKernel(
      Recipe::MoeRoute,
      {{"k", aInt(6)}, {"func", aStr("softmax")}, {"norm", aBool(true)}},
      {&logits}, {&w, &id}, error));
  EXPECT_NE(error.find("'k' = 6"), std::string::npos) << error;
}

/// Experts from 3-D quantised stacks, checked against row-by-row double math
/// (row r of expert e at (e*N + r)).
TEST(CpuMoe, ExpertsFromQuantisedStacks) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::F32}) {
    SCOPED_TRACE(format::ggmlTypeInfo(type).name);
    int64_t t = rng.integer(1, 6), d = 256, f = 256, e = rng.integer(2, 6);
    int64_t k = std::min<int64_t>(2, e);
    std::vector<float> xv = rng.normal(t * d);
    std::vector<int32_t> iv = distinctExperts(rng, t, e, k);
    HostTensor x = buffer({t, d}, xv), id = ids({t, k}, iv);
    HostTensor gate = weight(type, {e, f, d}, rng.normal(e * f * d, 0.1f));
    HostTensor up = weight(type, {e, f, d}, rng.normal(e * f * d, 0.1f));
    HostTensor down = weight(type, {e, d, f}, rng.normal(e * d * f, 0.1f));
    HostTensor y = output({t, k, d});
    std::string error;
    ASSERT_TRUE(runKernel(Recipe::MoeExperts, {}, {&x, &id, &gate, &up, &down},
                          {&y}, error))
        << error;
    std::vector<float> gv = gate.floats(), uv = up.floats(), dv = down.floats();
    std::vector<double> want;
    for (int64_t ti = 0; ti < t; ++ti)
      for (int64_t s = 0; s < k; ++s) {
        int64_t ex = iv[ti * k + s];
        std::vector<double> hid(f);
        for (int64_t j = 0; j < f; ++j) {
          double a = 0, b = 0;
          for (int64_t i = 0; i < d; ++i) {
            a += double(gv[(ex * f + j) * d + i]) * xv[ti * d + i];
            b += double(uv[(ex * f + j) * d + i]) * xv[ti * d + i];
          }
          hid[j] = a * sigmoid(a) * b;
        }
        for (int64_t c = 0; c < d; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < f; ++j)
            acc += dv[(ex * d + c) * f + j] * hid[j];
          want.push_back(acc);
        }
      }
    EXPECT_LT(nmse(y.floats(), want), kF32Bar);
    // Experts are shared out between workers; the bits must not depend on
    // how many there are.
    for (int threads : {1, 3, 5}) {
      HostTensor y1 = output({t, k, d});
      ASSERT_TRUE(runKernel(Recipe::MoeExperts, {},
                            {&x, &id, &gate, &up, &down}, {&y1}, error,
                            threads))
          << error;
      EXPECT_EQ(y.bytes, y1.bytes) << threads << " threads";
    }
    // An expert id past the stack is an error, not a wild read.
    iv[0] = static_cast<int32_t>(e);
    HostTensor badIds = ids({t, k}, iv);
    EXPECT_FALSE(runKernel(Recipe::MoeExperts, {},
                           {&x, &badIds, &gate, &up, &down}, {&y}, error));
    EXPECT_NE(error.find("is not below the expert count"), std::string::npos)
        << error;
  }
}

TEST(CpuMoe, Combine) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  int64_t t = rng.integer(1, 6), k = rng.integer(1, 4), d = rng.integer(1, 30);
  std::vector<float> yv = rng.normal(t * k * d), wv = rng.uniform(t * k, 0, 1),
                     sv = rng.normal(t * d), gv = rng.normal(t);
  HostTensor y = buffer({t, k, d}, yv), w = buffer({t, k}, wv),
             shared = buffer({t, d}, sv), gate = buffer({t, 1}, gv);
  for (int inputs = 2; inputs <= 4; ++inputs) {
    SCOPED_TRACE(fmt::format("{} inputs", inputs));
    std::vector<HostTensor *> ins = {&y, &w, &shared, &gate};
    ins.resize(inputs);
    HostTensor out = output({t, d});
    std::string error;
    ASSERT_TRUE(runKernel(Recipe::MoeCombine, {}, ins, {&out}, error)) << error;
    std::vector<double> want(t * d);
    for (int64_t ti = 0; ti < t; ++ti)
      for (int64_t c = 0; c < d; ++c) {
        double acc = 0;
        for (int64_t s = 0; s < k; ++s)
          acc += double(wv[ti * k + s]) * yv[(ti * k + s) * d + c];
        if (inputs > 2)
          acc += (inputs > 3 ? sigmoid(gv[ti]) : 1.0) * sv[ti * d + c];
        want[ti * d + c] = acc;
      }
    EXPECT_LT(nmse(out.floats(), want), kF32Bar);
  }
}

/// The grouped form (group-experts) against the per-slot reference on fresh
/// random inputs: moe_sort + moe_grouped_swiglu + moe_grouped_down +
/// moe_scatter equals moe_experts + moe_combine (the same sums in the same
/// order: NMSE <= 1e-12, in fact equal), with and without a gated shared
/// expert, for quantised and f32 stacks, experts no token picks included.
TEST(CpuMoe, GroupedExpertsEqualThePerSlotReference) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::F32})
    for (bool shared : {false, true}) {
      SCOPED_TRACE(
          fmt::format("{} shared {}", format::ggmlTypeInfo(type).name, shared));
      int64_t t = rng.integer(1, 9), d = 256, f = 256, e = rng.integer(3, 9);
      int64_t k = rng.integer(1, std::min<int64_t>(3, e));
      std::vector<int32_t> iv = distinctExperts(rng, t, e, k);
      HostTensor x = buffer({t, d}, rng.normal(t * d)), id = ids({t, k}, iv);
      HostTensor w = buffer({t, k}, rng.normal(t * k, 0.5f));
      HostTensor sh = buffer({t, d}, rng.normal(t * d));
      HostTensor gl = buffer({t, 1}, rng.normal(t));
      HostTensor gate = weight(type, {e, f, d}, rng.normal(e * f * d, 0.1f));
      HostTensor up = weight(type, {e, f, d}, rng.normal(e * f * d, 0.1f));
      HostTensor down = weight(type, {e, d, f}, rng.normal(e * d * f, 0.1f));
      std::vector<HostTensor *> extra;
      if (shared)
        extra = {&sh, &gl};
      std::string error;
      HostTensor y = output({t, k, d}), ref = output({t, d});
      ASSERT_TRUE(runKernel(Recipe::MoeExperts, {},
                            {&x, &id, &gate, &up, &down}, {&y}, error))
          << error;
      std::vector<HostTensor *> combineIn{&y, &w};
      combineIn.insert(combineIn.end(), extra.begin(), extra.end());
      ASSERT_TRUE(runKernel(Recipe::MoeCombine, {}, combineIn, {&ref}, error))
          << error;

      HostTensor off = output({e + 1}, PlanDType::I32);
      HostTensor perm = output({t * k}, PlanDType::I32);
      HostTensor slotRows = output({t * k}, PlanDType::I32);
      ASSERT_TRUE(runKernel(Recipe::MoeSort, {{"experts", aInt(e)}}, {&id},
                            {&off, &perm, &slotRows}, error))
          << error;
      // Offsets count each expert's slots; the permutation lists them by
      // expert, in slot order within one; the slot rows are its inverse.
      std::vector<int32_t> wantOff(e + 1, 0), wantPerm;
      for (int32_t x : iv)
        ++wantOff[x + 1];
      for (int64_t x = 0; x < e; ++x) {
        wantOff[x + 1] += wantOff[x];
        for (int64_t s = 0; s < t * k; ++s)
          if (iv[s] == x)
            wantPerm.push_back(static_cast<int32_t>(s));
      }
      EXPECT_EQ(off.ints(), wantOff);
      EXPECT_EQ(perm.ints(), wantPerm);
      std::vector<int32_t> wantRows(t * k, -1);
      for (int64_t r = 0; r < t * k; ++r)
        wantRows[wantPerm[r]] = static_cast<int32_t>(r);
      EXPECT_EQ(slotRows.ints(), wantRows);
      HostTensor h = output({t * k, f}), rows = output({t * k, d});
      HostTensor got = output({t, d});
      ASSERT_TRUE(runKernel(Recipe::MoeGroupedSwiglu, {},
                            {&x, &perm, &off, &gate, &up}, {&h}, error))
          << error;
      ASSERT_TRUE(runKernel(Recipe::MoeGroupedDown, {}, {&h, &off, &down},
                            {&rows}, error))
          << error;
      std::vector<HostTensor *> scatterIn{&rows, &slotRows, &w};
      scatterIn.insert(scatterIn.end(), extra.begin(), extra.end());
      ASSERT_TRUE(runKernel(Recipe::MoeScatter, {}, scatterIn, {&got}, error))
          << error;
      EXPECT_LE(nmse(got.floats(), toDouble(ref.floats())), 1e-12);
      EXPECT_EQ(got.floats(), ref.floats());
    }
}

/// Inconsistent grouped launches are errors, never crashes.
TEST(CpuMoe, GroupedExpertsRefuseBadSortResults) {
  HostTensor id = ids({2, 1}, {0, 5});
  HostTensor off = output({3}, PlanDType::I32),
             perm = output({2}, PlanDType::I32),
             slotRows = output({2}, PlanDType::I32);
  std::string error;
  EXPECT_FALSE(runKernel(Recipe::MoeSort, {{"experts", aInt(2)}}, {&id},
                         {&off, &perm, &slotRows}, error));
  EXPECT_EQ(error, "expert id 5 at 1 of input 0 't' [2, 1] is not below the "
                   "expert count 2");
  HostTensor goodId = ids({2, 1}, {1, 0}),
             shortRows = output({1}, PlanDType::I32);
  EXPECT_FALSE(runKernel(Recipe::MoeSort, {{"experts", aInt(2)}}, {&goodId},
                         {&off, &perm, &shortRows}, error));
  EXPECT_EQ(error, "output 2 'out' [1] should be [2] from the inputs");
  HostTensor rows = buffer({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  HostTensor twice = ids({2}, {1, 1}), w = buffer({2, 1}, {1, 1});
  HostTensor out = output({2, 4});
  EXPECT_FALSE(
      runKernel(Recipe::MoeScatter, {}, {&rows, &twice, &w}, {&out}, error));
  EXPECT_EQ(error, "input 1 't' [2] names row 1 twice (slots 0 and 1)");
  for (int32_t bad : {2, -1}) {
    HostTensor outside = ids({2}, {0, bad});
    EXPECT_FALSE(runKernel(Recipe::MoeScatter, {}, {&rows, &outside, &w},
                           {&out}, error));
    EXPECT_EQ(error, fmt::format("input 1 't' [2] holds row {} for slot 1, "
                                 "outside 0..1",
                                 bad));
  }
  HostTensor h = buffer({2, 256}, std::vector<float>(512, 0.5f));
  HostTensor badOff = ids({3}, {0, 3, 2});
  HostTensor down =
      weight(GgmlType::F32, {2, 4, 256}, std::vector<float>(2 * 4 * 256, 0.1f));
  EXPECT_FALSE(runKernel(Recipe::MoeGroupedDown, {}, {&h, &badOff, &down},
                         {&out}, error));
  EXPECT_EQ(error, "input 1 't' [3] must not decrease (at expert 1)");
}

} // namespace
