//===- IndexerTest.cpp - block_mean, qsa_select, ngram_hash ---------------===//
#include "RuntimeTestUtil.h"

#include <algorithm>
#include <fstream>

using namespace strata::runtime;
using namespace strata::runtime::test;

namespace {

TEST(CpuIndexer, BlockMeanPoolsCompleteBlocks) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  int64_t block = rng.integer(1, 6), t = rng.integer(0, 30);
  int64_t c = rng.integer(1, 20), nb = t / block;
  std::vector<float> xv = rng.normal(t * c);
  HostTensor x = buffer({t, c}, xv), y = output({nb, c});
  std::string error;
  ASSERT_TRUE(
      runKernel(Recipe::BlockMean, {{"block", aInt(block)}}, {&x}, {&y}, error))
      << error;
  std::vector<double> want(nb * c, 0.0);
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t ci = 0; ci < c; ++ci) {
      for (int64_t i = 0; i < block; ++i)
        want[b * c + ci] += xv[(b * block + i) * c + ci];
      want[b * c + ci] /= double(block);
    }
  if (nb > 0)
    EXPECT_LT(nmse(y.floats(), want), kF32Bar);
  HostTensor wrong = output({nb + 1, c});
  EXPECT_FALSE(runKernel(Recipe::BlockMean, {{"block", aInt(block)}}, {&x},
                         {&wrong}, error));
  EXPECT_FALSE(
      runKernel(Recipe::BlockMean, {{"block", aInt(0)}}, {&x}, {&y}, error));
}

/// The §3.7 selection in doubles: the `top` best complete blocks (ties to
/// the lower block), then the tail block, then -1.
std::vector<int32_t> naiveSelect(const std::vector<float> &q,
                                 const std::vector<float> &kb, int64_t t,
                                 int64_t hi, int64_t di, int64_t block,
                                 int64_t top) {
  std::vector<int32_t> out;
  for (int64_t ti = 0; ti < t; ++ti) {
    int64_t nc = (ti + 1) / block;
    std::vector<std::pair<double, int64_t>> s;
    for (int64_t b = 0; b < nc; ++b) {
      double sum = 0;
      for (int64_t h = 0; h < hi; ++h) {
        double dot = 0;
        for (int64_t k = 0; k < di; ++k)
          dot += double(q[(ti * hi + h) * di + k]) * kb[b * di + k];
        sum += std::max(dot, 0.0);
      }
      s.push_back({-sum / std::sqrt(double(di)), b});
    }
    std::sort(s.begin(), s.end());
    int64_t chosen = std::min<int64_t>(top, nc);
    for (int64_t k = 0; k < chosen; ++k)
      out.push_back(static_cast<int32_t>(s[k].second));
    out.push_back(static_cast<int32_t>(nc));
    for (int64_t k = chosen + 1; k <= top; ++k)
      out.push_back(-1);
  }
  return out;
}

TEST(CpuIndexer, QsaSelectMatchesNaiveTopK) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  int64_t block = rng.integer(1, 4), top = rng.integer(1, 4);
  int64_t t = rng.integer(1, 40), hi = rng.integer(1, 3);
  int64_t di = rng.integer(1, 12), nb = t / block;
  std::vector<float> qv = rng.normal(t * hi * di), kv = rng.normal(nb * di);
  HostTensor q = buffer({t, hi, di}, qv), kb = buffer({nb, di}, kv);
  HostTensor y = output({t, top + 1}, PlanDType::I32);
  std::string error;
  AttrMap attrs{{"block", aInt(block)}, {"top", aInt(top)}};
  ASSERT_TRUE(runKernel(Recipe::QsaSelect, attrs, {&q, &kb}, {&y}, error))
      << error;
  // Random normal scores have no ties and no near-ties at f32 precision.
  EXPECT_EQ(y.ints(), naiveSelect(qv, kv, t, hi, di, block, top));
}

TEST(CpuIndexer, QsaSelectDenseEarlyAndTiesToLowerBlock) {
  // Every dot product is negative: all scores are exactly 0 and tie.
  int64_t t = 9, block = 2, top = 2, nb = t / block;
  HostTensor q = buffer({t, 1, 2}, std::vector<float>(t * 2, 1.0f));
  HostTensor kb = buffer({nb, 2}, std::vector<float>(nb * 2, -1.0f));
  HostTensor y = output({t, top + 1}, PlanDType::I32);
  std::string error;
  ASSERT_TRUE(runKernel(Recipe::QsaSelect,
                        {{"block", aInt(block)}, {"top", aInt(top)}}, {&q, &kb},
                        {&y}, error))
      << error;
  EXPECT_EQ(y.ints(), (std::vector<int32_t>{
                          0, -1, -1, // t=0: no complete block, tail 0
                          0, 1,  -1, // t=1: block 0 complete (dense)
                          0, 1,  -1, // t=2
                          0, 1,  2,  // t=3: blocks 0, 1; tail 2
                          0, 1,  2,  // t=4
                          0, 1,  3,  // t=5: 3 candidates, ties keep 0, 1
                          0, 1,  3,  // t=6
                          0, 1,  4,  // t=7
                          0, 1,  4,  // t=8
                      }));
  // Too few block keys for the queries is an error.
  HostTensor few = buffer({1, 2}, {1.0f, 1.0f});
  EXPECT_FALSE(runKernel(Recipe::QsaSelect,
                         {{"block", aInt(block)}, {"top", aInt(top)}},
                         {&q, &few}, {&y}, error));
}

/// §3.4 in the most literal form: the EOS-prefixed history and its rule.
std::vector<int32_t> naiveNgram(const std::vector<int32_t> &tok, int64_t n,
                                int64_t heads, int64_t eos,
                                const std::vector<int64_t> &mults,
                                const std::vector<int64_t> &sizes,
                                const std::vector<int64_t> &offsets) {
  std::vector<int64_t> hist(n - 1, eos);
  hist.insert(hist.end(), tok.begin(), tok.end());
  std::vector<int32_t> out;
  for (size_t i = 0; i < tok.size(); ++i) {
    int64_t p = int64_t(i) + n - 1;
    std::vector<int64_t> b(n);
    for (int64_t s = 0; s < n; ++s) {
      bool clean = true;
      for (int64_t k = p - s; k <= p - 1; ++k)
        clean = clean && hist[k] != eos;
      b[s] = s == 0 || clean ? hist[p - s] : eos;
    }
    for (int64_t order = 2; order <= n; ++order) {
      int64_t mixed = 0;
      for (int64_t s = 0; s < order; ++s)
        mixed ^= b[s] * mults[s];
      for (int64_t j = 0; j < heads; ++j) {
        int64_t hh = (order - 2) * heads + j;
        out.push_back(static_cast<int32_t>(mixed % sizes[hh] + offsets[hh]));
      }
    }
  }
  return out;
}

TEST(CpuIndexer, NgramHashMatchesNaive) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  int64_t n = rng.integer(2, 4), heads = rng.integer(1, 3);
  int64_t t = rng.integer(1, 40), v = 50, eos = 49;
  std::vector<int32_t> tv = rng.integers(t, 0, int32_t(v - 1));
  std::vector<int64_t> mults, sizes, offsets;
  for (int64_t s = 0; s < n; ++s)
    mults.push_back(2 * rng.integer(0, (INT64_MAX / v) / 2 - 1) + 1);
  int64_t off = 0;
  for (int64_t h = 0; h < (n - 1) * heads; ++h) {
    sizes.push_back(rng.integer(100, 1000));
    offsets.push_back(off);
    off += sizes.back();
  }
  HostTensor tok = ids({t}, tv);
  HostTensor y = output({t, (n - 1) * heads}, PlanDType::I32);
  AttrMap attrs{{"n", aInt(n)},          {"heads", aInt(heads)},
                {"eos", aInt(eos)},      {"mults", aInts(mults)},
                {"sizes", aInts(sizes)}, {"offsets", aInts(offsets)}};
  std::string error;
  ASSERT_TRUE(runKernel(Recipe::NgramHash, attrs, {&tok}, {&y}, error))
      << error;
  EXPECT_EQ(y.ints(), naiveNgram(tv, n, heads, eos, mults, sizes, offsets));
  // Wrong list lengths are errors.
  AttrMap bad = attrs;
  bad["mults"] = aInts({1, 2, 3, 4, 5});
  EXPECT_FALSE(runKernel(Recipe::NgramHash, bad, {&tok}, {&y}, error));
  EXPECT_NE(error.find("'mults' has 5 entries"), std::string::npos) << error;
}

/// The HF oracle's ids for the long prompt (test/golden/qwen4exp): tokens
/// from logits.json, constants from the GGUF's qwen4exp.ple.* metadata.
TEST(CpuIndexer, NgramHashMatchesHfGolden) {
  const std::vector<int32_t> tv = {
      47,  211, 38,  53,  204, 116, 152, 249, 143, 177, 23,  233, 154, 30,  171,
      158, 236, 124, 26,  118, 186, 120, 112, 220, 69,  80,  201, 127, 246, 254,
      175, 50,  240, 251, 76,  37,  34,  255, 250, 195, 231, 139, 128, 233, 75,
      80,  3,   2,   19,  140, 193, 203, 115, 107, 250, 209, 14,  243, 199, 60,
      234, 107, 174, 156, 81,  87,  13,  116, 96,  140, 197, 253};
  ASSERT_EQ(tv.size(), 72u);
  std::ifstream f(STRATA_SOURCE_DIR
                  "/test/golden/qwen4exp_llama/act_ple1_ngram_ids.i32",
                  std::ios::binary);
  ASSERT_TRUE(f) << "missing golden file";
  std::vector<int32_t> want(72 * 4);
  f.read(reinterpret_cast<char *>(want.data()), want.size() * 4);
  ASSERT_EQ(f.gcount(), std::streamsize(want.size() * 4));
  HostTensor tok = ids({72}, tv);
  HostTensor y = output({72, 4}, PlanDType::I32);
  AttrMap attrs{{"n", aInt(3)},
                {"heads", aInt(2)},
                {"eos", aInt(255)},
                {"mults", aInts({4295158889762567, 35454616657218897,
                                 19285316470915801})},
                {"sizes", aInts({503, 509, 521, 523})},
                {"offsets", aInts({0, 503, 1012, 1533})}};
  std::string error;
  ASSERT_TRUE(runKernel(Recipe::NgramHash, attrs, {&tok}, {&y}, error))
      << error;
  EXPECT_EQ(y.ints(), want);
}

} // namespace
