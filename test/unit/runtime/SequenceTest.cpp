//===- SequenceTest.cpp - rope, attention, conv1d_causal, gated_delta_rule ===//
#include "RuntimeTestUtil.h"

using namespace strata::runtime;
using namespace strata::runtime::test;

namespace {

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

/// Rotary embedding in double; theta_i = pos * base^(-2i/n) either exactly
/// (\p exactTheta) or by llama.cpp's repeated f32 products.
std::vector<double> refRope(const std::vector<float> &x,
                            const std::vector<int32_t> &pos, int64_t t,
                            int64_t h, int64_t d, int64_t n, double base,
                            bool neox, bool exactTheta) {
  std::vector<double> y(x.begin(), x.end());
  float scale = std::pow(static_cast<float>(base), -2.0f / n);
  for (int64_t ti = 0; ti < t; ++ti)
    for (int64_t hi = 0; hi < h; ++hi) {
      float thetaF = static_cast<float>(pos[ti]);
      for (int64_t i = 0; i < n / 2; ++i) {
        double theta =
            exactTheta ? pos[ti] * std::pow(base, -2.0 * i / n) : thetaF;
        thetaF *= scale;
        int64_t a = (ti * h + hi) * d + (neox ? i : 2 * i);
        int64_t b = (ti * h + hi) * d + (neox ? i + n / 2 : 2 * i + 1);
        double xa = x[a], xb = x[b];
        y[a] = xa * std::cos(theta) - xb * std::sin(theta);
        y[b] = xa * std::sin(theta) + xb * std::cos(theta);
      }
    }
  return y;
}

TEST(CpuSequence, RopeNeoxNormalPartial) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  for (std::string mode : {"neox", "normal"})
    for (int64_t n : {int64_t(8), int64_t(16)}) {
      SCOPED_TRACE(fmt::format("{} dims {}", mode, n));
      int64_t t = rng.integer(1, 6), h = rng.integer(1, 3), d = 16;
      std::vector<float> xv = rng.normal(t * h * d);
      std::vector<int32_t> pv = rng.integers(t, 0, 40);
      HostTensor x = buffer({t, h, d}, xv), p = ids({t}, pv);
      HostTensor y = output({t, h, d});
      std::string error;
      AttrMap attrs = {
          {"mode", aStr(mode)}, {"dims", aInt(n)}, {"base", aFloat(10000.0)}};
      ASSERT_TRUE(runKernel(Recipe::Rope, attrs, {&x, &p}, {&y}, error))
          << error;
      EXPECT_LT(nmse(y.floats(), refRope(xv, pv, t, h, d, n, 10000.0,
                                         mode == "neox", false)),
                kF32Bar);
      // The f32 angle recurrence stays close to the exact angles.
      EXPECT_LT(nmse(y.floats(), refRope(xv, pv, t, h, d, n, 10000.0,
                                         mode == "neox", true)),
                1e-8);
      // Sections (one position stream) change nothing; base may be an int.
      attrs["sections"] = aInts({n / 4, n / 4});
      attrs["base"] = aInt(10000);
      HostTensor y2 = output({t, h, d});
      ASSERT_TRUE(runKernel(Recipe::Rope, attrs, {&x, &p}, {&y2}, error))
          << error;
      EXPECT_EQ(y.bytes, y2.bytes);
    }
}

TEST(CpuSequence, RopeErrors) {
  HostTensor x = buffer({2, 1, 8}, std::vector<float>(16, 1));
  HostTensor p = ids({2}, {0, 1}), y = output({2, 1, 8});
  std::string error;
  AttrMap attrs = {
      {"mode", aStr("neox")}, {"dims", aInt(10)}, {"base", aFloat(1e4)}};
  EXPECT_FALSE(runKernel(Recipe::Rope, attrs, {&x, &p}, {&y}, error));
  EXPECT_NE(error.find("'dims' = 10"), std::string::npos) << error;
  attrs["dims"] = aInt(8);
  attrs["mode"] = aStr("yarn");
  EXPECT_FALSE(runKernel(Recipe::Rope, attrs, {&x, &p}, {&y}, error));
  attrs.erase("mode");
  EXPECT_FALSE(runKernel(Recipe::Rope, attrs, {&x, &p}, {&y}, error));
  EXPECT_EQ(error, "missing attribute 'mode'");
}

struct AttnCase {
  int64_t t, h, hkv, d, dv;
  bool causal, gated;
  int64_t block; ///< 0 = no block index
};

/// Attention in double: scores, causal / block mask, softmax, gate.
std::vector<double> refAttention(const AttnCase &c, const std::vector<float> &q,
                                 const std::vector<float> &k,
                                 const std::vector<float> &v,
                                 const std::vector<float> &gate,
                                 const std::vector<int32_t> &index, int64_t nb,
                                 double scale) {
  std::vector<double> out(c.t * c.h * c.dv, 0.0);
  for (int64_t t = 0; t < c.t; ++t)
    for (int64_t h = 0; h < c.h; ++h) {
      int64_t kvh = h / (c.h / c.hkv);
      std::vector<int64_t> keys;
      for (int64_t j = 0; j < c.t; ++j) {
        if (c.causal && j > t)
          continue;
        bool ok = c.block == 0;
        for (int64_t b = 0; b < nb; ++b)
          ok |= index[t * nb + b] >= 0 && index[t * nb + b] == j / c.block;
        if (ok)
          keys.push_back(j);
      }
      std::vector<double> s;
      double max = -INFINITY;
      for (int64_t j : keys) {
        double dot = 0;
        for (int64_t i = 0; i < c.d; ++i)
          dot += double(q[(t * c.h + h) * c.d + i]) *
                 k[(j * c.hkv + kvh) * c.d + i];
        s.push_back(scale * dot);
        max = std::max(max, s.back());
      }
      double sum = 0;
      for (double &e : s)
        sum += (e = std::exp(e - max));
      for (int64_t x = 0; x < c.dv; ++x) {
        double acc = 0;
        for (size_t m = 0; m < keys.size(); ++m)
          acc += s[m] / sum * v[(keys[m] * c.hkv + kvh) * c.dv + x];
        if (c.gated)
          acc *= sigmoid(gate[(t * c.h + h) * c.dv + x]);
        out[(t * c.h + h) * c.dv + x] = acc;
      }
    }
  return out;
}

TEST(CpuSequence, Attention) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  std::vector<AttnCase> cases = {
      {5, 4, 2, 16, 16, true, false, 0}, {7, 6, 1, 8, 12, true, false, 0},
      {4, 2, 2, 8, 8, false, false, 0},  {6, 4, 2, 16, 8, true, true, 0},
      {9, 2, 1, 8, 8, true, false, 2},   {40, 4, 4, 32, 32, true, true, 4}};
  for (const AttnCase &c : cases) {
    SCOPED_TRACE(fmt::format("T {} H {} Hkv {} causal {} gated {} block {}",
                             c.t, c.h, c.hkv, c.causal, c.gated, c.block));
    std::vector<float> qv = rng.normal(c.t * c.h * c.d),
                       kv = rng.normal(c.t * c.hkv * c.d),
                       vv = rng.normal(c.t * c.hkv * c.dv),
                       gv = rng.normal(c.t * c.h * c.dv);
    int64_t nb = c.block > 0 ? 2 : 0;
    int64_t blocks = c.block > 0 ? (c.t + c.block - 1) / c.block : 0;
    std::vector<int32_t> iv =
        rng.integers(c.t * nb, -1, static_cast<int32_t>(blocks) - 1);
    HostTensor q = buffer({c.t, c.h, c.d}, qv),
               k = buffer({c.t, c.hkv, c.d}, kv),
               v = buffer({c.t, c.hkv, c.dv}, vv),
               g = buffer({c.t, c.h, c.dv}, gv), idx = ids({c.t, nb}, iv);
    HostTensor y = output({c.t, c.h, c.dv});
    double scale = 1 / std::sqrt(double(c.d));
    AttrMap attrs = {{"scale", aFloat(scale)}};
    if (!c.causal)
      attrs["causal"] = aBool(false);
    std::vector<HostTensor *> ins = {&q, &k, &v};
    if (c.gated) {
      attrs["gated"] = aBool(true);
      ins.push_back(&g);
    }
    if (c.block > 0) {
      attrs["block"] = aInt(c.block);
      ins.push_back(&idx);
    }
    std::string error;
    ASSERT_TRUE(runKernel(Recipe::Attention, attrs, ins, {&y}, error)) << error;
    EXPECT_LT(nmse(y.floats(), refAttention(c, qv, kv, vv, gv, iv, nb, scale)),
              kF32Bar);
    for (int threads : {1, 3, 5}) {
      HostTensor y1 = output({c.t, c.h, c.dv});
      ASSERT_TRUE(
          runKernel(Recipe::Attention, attrs, ins, {&y1}, error, threads))
          << error;
      EXPECT_EQ(y.bytes, y1.bytes) << threads << " threads";
    }
  }
}

TEST(CpuSequence, AttentionOperandErrors) {
  HostTensor q = buffer({2, 3, 4}, std::vector<float>(24, 1));
  HostTensor k = buffer({2, 2, 4}, std::vector<float>(16, 1));
  HostTensor y = output({2, 3, 4});
  std::string error;
  EXPECT_FALSE(runKernel(Recipe::Attention, {{"scale", aFloat(1)}},
                         {&q, &k, &k}, {&y}, error));
  EXPECT_NE(error.find("not a multiple of kv heads"), std::string::npos)
      << error;
  HostTensor q2 = buffer({2, 2, 4}, std::vector<float>(16, 1));
  HostTensor y2 = output({2, 2, 4});
  EXPECT_FALSE(runKernel(Recipe::Attention,
                         {{"scale", aFloat(1)}, {"gated", aBool(true)}},
                         {&q2, &k, &k}, {&y2}, error));
  EXPECT_NE(error.find("expects 4 inputs (q, k, v, gate)"), std::string::npos)
      << error;
}

TEST(CpuSequence, Conv1dCausal) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  int64_t t = rng.integer(1, 9), c = rng.integer(1, 20), kw = 4;
  std::vector<float> xv = rng.normal(t * c), wv = rng.normal(c * kw);
  HostTensor x = buffer({t, c}, xv);
  HostTensor w = weight(GgmlType::F32, {c, kw}, wv), y = output({t, c});
  std::string error;
  ASSERT_TRUE(runKernel(Recipe::Conv1dCausal, {}, {&x, &w}, {&y}, error))
      << error;
  std::vector<double> want(t * c, 0.0);
  for (int64_t ti = 0; ti < t; ++ti)
    for (int64_t ci = 0; ci < c; ++ci)
      for (int64_t j = 0; j < kw; ++j)
        if (ti - kw + 1 + j >= 0)
          want[ti * c + ci] +=
              double(wv[ci * kw + j]) * xv[(ti - kw + 1 + j) * c + ci];
  EXPECT_LT(nmse(y.floats(), want), kF32Bar);
}

TEST(CpuSequence, Conv1dCausalDilated) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  int64_t t = rng.integer(1, 20), c = rng.integer(1, 20), kw = 4;
  int64_t dil = rng.integer(2, 4);
  std::vector<float> xv = rng.normal(t * c), wv = rng.normal(c * kw);
  HostTensor x = buffer({t, c}, xv);
  HostTensor w = weight(GgmlType::F32, {c, kw}, wv), y = output({t, c});
  std::string error;
  ASSERT_TRUE(runKernel(Recipe::Conv1dCausal, {{"dilation", aInt(dil)}},
                        {&x, &w}, {&y}, error))
      << error;
  std::vector<double> want(t * c, 0.0);
  for (int64_t ti = 0; ti < t; ++ti)
    for (int64_t ci = 0; ci < c; ++ci)
      for (int64_t j = 0; j < kw; ++j) {
        int64_t src = ti - (kw - 1 - j) * dil;
        if (src >= 0)
          want[ti * c + ci] += double(wv[ci * kw + j]) * xv[src * c + ci];
      }
  EXPECT_LT(nmse(y.floats(), want), kF32Bar);
  HostTensor y2 = output({t, c});
  EXPECT_FALSE(runKernel(Recipe::Conv1dCausal, {{"dilation", aInt(0)}},
                         {&x, &w}, {&y2}, error));
  EXPECT_NE(error.find("attribute 'dilation' = 0 must lie in 1..1048576"),
            std::string::npos)
      << error;
}

TEST(CpuSequence, GatedDeltaRule) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  int64_t t = rng.integer(1, 12), hk = 2, h = 4, dk = 16, dv = 8;
  std::vector<float> qv = rng.normal(t * hk * dk, 0.25f),
                     kv = rng.normal(t * hk * dk, 0.25f),
                     vv = rng.normal(t * h * dv),
                     gv = rng.uniform(t * h, -1.0f, 0.0f),
                     bv = rng.uniform(t * h, 0.0f, 1.0f);
  HostTensor q = buffer({t, hk, dk}, qv), k = buffer({t, hk, dk}, kv),
             v = buffer({t, h, dv}, vv), g = buffer({t, h}, gv),
             beta = buffer({t, h}, bv);
  // Cases: default scale and grouped heads; explicit scale; tiled heads.
  for (int variant : {0, 1, 2}) {
    bool explicitScale = variant == 1, tiled = variant == 2;
    HostTensor y = output({t, h, dv});
    AttrMap attrs;
    double scale = explicitScale ? 0.3 : 1 / std::sqrt(double(dk));
    if (explicitScale)
      attrs["scale"] = aFloat(scale);
    if (tiled) {
      PlanAttr heads;
      heads.kind = PlanAttr::Kind::Str;
      heads.s = "tiled";
      attrs["heads"] = heads;
    }
    std::string error;
    ASSERT_TRUE(runKernel(Recipe::GatedDeltaRule, attrs,
                          {&q, &k, &v, &g, &beta}, {&y}, error))
        << error;
    std::vector<double> want(t * h * dv);
    for (int64_t hi = 0; hi < h; ++hi) {
      // Grouped: repeat-interleave, as llama.cpp; tiled: the qwen4exp order.
      int64_t kh = tiled ? hi % hk : hi / (h / hk);
      std::vector<double> s(dk * dv, 0.0);
      for (int64_t ti = 0; ti < t; ++ti) {
        const float *qt = &qv[(ti * hk + kh) * dk],
                    *kt = &kv[(ti * hk + kh) * dk];
        for (double &e : s)
          e *= std::exp(double(gv[ti * h + hi]));
        std::vector<double> delta(dv);
        for (int64_t j = 0; j < dv; ++j) {
          double acc = 0;
          for (int64_t i = 0; i < dk; ++i)
            acc += s[i * dv + j] * kt[i];
          delta[j] = (vv[(ti * h + hi) * dv + j] - acc) * bv[ti * h + hi];
        }
        for (int64_t i = 0; i < dk; ++i)
          for (int64_t j = 0; j < dv; ++j)
            s[i * dv + j] += kt[i] * delta[j];
        for (int64_t j = 0; j < dv; ++j) {
          double acc = 0;
          for (int64_t i = 0; i < dk; ++i)
            acc += s[i * dv + j] * qt[i];
          want[(ti * h + hi) * dv + j] = scale * acc;
        }
      }
    }
    EXPECT_LT(nmse(y.floats(), want), kF32Bar);
  }
}

} // namespace

// kv_store writes row r at [seq[r], pos[r]] of its state (converting bf16
// rows to f32) and leaves every other place alone.
TEST(CpuState, KvStoreWritesRowsInPlace) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t s = 3, c = 8, hkv = 2, d = 4, t = 4;
  for (PlanDType type : {PlanDType::F32, PlanDType::BF16}) {
    std::vector<float> xv = rng.normal(t * hkv * d);
    HostTensor state =
        buffer({s, c, hkv, d}, std::vector<float>(s * c * hkv * d, 7));
    HostTensor x = buffer({t, hkv, d}, xv, type);
    std::vector<int32_t> sv = {2, 0, 2, 1}, pv = {5, 0, 6, 7};
    HostTensor seq = ids({t}, sv), pos = ids({t}, pv);
    std::string error;
    ASSERT_TRUE(
        runKernel(Recipe::KvStore, {}, {&state, &x, &seq, &pos}, {}, error))
        << error;
    std::vector<float> got = state.floats(), rows = x.floats();
    for (int64_t si = 0; si < s; ++si)
      for (int64_t p = 0; p < c; ++p) {
        int64_t r = -1;
        for (int64_t i = 0; i < t; ++i)
          if (sv[i] == si && pv[i] == p)
            r = i;
        for (int64_t e = 0; e < hkv * d; ++e)
          EXPECT_EQ(got[(si * c + p) * hkv * d + e],
                    r < 0 ? 7.0f : rows[r * hkv * d + e])
              << si << " " << p;
      }
  }
}

TEST(CpuState, KvStoreAndAttentionCachedErrors) {
  HostTensor state = buffer({2, 4, 1, 2}, std::vector<float>(16, 0));
  HostTensor x = buffer({2, 1, 2}, std::vector<float>(4, 1));
  HostTensor seq = ids({2}, {0, 1}), pos = ids({2}, {0, 4});
  std::string error;
  EXPECT_FALSE(
      runKernel(Recipe::KvStore, {}, {&state, &x, &seq, &pos}, {}, error));
  EXPECT_NE(error.find("row 1 is at position 4 of slot 1, outside the state's "
                       "2 slots x 4 positions"),
            std::string::npos)
      << error;
  HostTensor badSeq = ids({2}, {2, 0}), okPos = ids({2}, {0, 1});
  HostTensor q = buffer({2, 2, 2}, std::vector<float>(8, 1));
  HostTensor y = output({2, 2, 2});
  EXPECT_FALSE(runKernel(Recipe::AttentionCached, {{"scale", aFloat(1)}},
                         {&q, &state, &state, &badSeq, &okPos}, {&y}, error));
  EXPECT_NE(error.find("row 0 is at position 0 of slot 2"), std::string::npos)
      << error;
  // A cache is f32, bf16 or i8 (rows a multiple of 4 long); a kernel
  // output is not listed for it.
  HostTensor half =
      buffer({2, 4, 1, 2}, std::vector<float>(16, 0), PlanDType::F16);
  EXPECT_FALSE(
      runKernel(Recipe::KvStore, {}, {&half, &x, &seq, &okPos}, {}, error));
  EXPECT_NE(error.find("must be an f32, bf16 or i8 state"), std::string::npos)
      << error;
  HostTensor narrow = buffer({2, 4, 1, 2}, std::vector<float>(16, 0));
  narrow.dtype = PlanDType::I8;
  EXPECT_FALSE(
      runKernel(Recipe::KvStore, {}, {&narrow, &x, &seq, &okPos}, {}, error));
  EXPECT_NE(error.find("an i8 state's rows are a multiple of 4 long"),
            std::string::npos)
      << error;
  HostTensor out = output({2, 4, 1, 2});
  EXPECT_FALSE(runKernel(Recipe::KvStore, {}, {&state, &x, &seq, &okPos},
                         {&out}, error));
  EXPECT_EQ(error, "takes 4..4 inputs and 0 outputs, got 4 and 1");
  EXPECT_FALSE(runKernel(Recipe::State, {}, {}, {&out}, error));
  EXPECT_NE(error.find("'state' is not a kernel"), std::string::npos) << error;
  EXPECT_FALSE(runKernel(Recipe::AttentionCached,
                         {{"scale", aFloat(1)}, {"gated", aBool(true)}},
                         {&q, &state, &state, &seq, &okPos}, {&y}, error));
  EXPECT_NE(error.find("expects 6 inputs"), std::string::npos) << error;
}

namespace {

/// A zeroed cache state of \p shape stored as \p type (format::stateBytes).
HostTensor cacheState(std::vector<int64_t> shape, PlanDType type) {
  HostTensor t;
  t.dtype = type;
  t.shape = std::move(shape);
  std::vector<uint64_t> dims(t.shape.begin(), t.shape.end());
  t.bytes.assign(*format::stateBytes(type, dims), 0);
  return t;
}

/// The values \p cache holds (bf16 widened, i8 rows times their scales).
std::vector<float> cacheValues(const HostTensor &cache) {
  format::PlanState st;
  st.dtype = cache.dtype;
  st.shape.assign(cache.shape.begin(), cache.shape.end());
  return stateElements(st, cache.bytes.data());
}

} // namespace

// The KV cache in bf16 and int8 (--kv): kv_store rounds each row (bf16:
// nearest even) or quantises it with its own absmax scale (int8: the f32
// scale max|x| / 127 stored after the row's values, the values x / scale
// rounded to nearest even), and attention_cached and block_mean_cached read
// those values: bit for bit `attention` and an f32 cache over the values
// the cache holds.
TEST(CpuState, KvCachesInBf16AndInt8) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t slots = 2, context = 12, t = 9, h = 4, hkv = 2, d = 8;
  std::vector<float> qv = rng.normal(t * h * d), kv = rng.normal(t * hkv * d),
                     vv = rng.normal(t * hkv * d);
  // A zero row (scale 0) and a row of one large value.
  std::fill(kv.begin(), kv.begin() + d, 0.0f);
  kv[d + 3] = 1000.0f;
  HostTensor q = buffer({t, h, d}, qv), k = buffer({t, hkv, d}, kv),
             v = buffer({t, hkv, d}, vv);
  std::vector<int32_t> posv(t), seqv(t, 1);
  for (int64_t i = 0; i < t; ++i)
    posv[i] = static_cast<int32_t>(i);
  HostTensor seq = ids({t}, seqv), pos = ids({t}, posv);
  AttrMap attrs = {{"scale", aFloat(0.35)}};
  for (PlanDType type : {PlanDType::BF16, PlanDType::I8}) {
    SCOPED_TRACE(format::planDTypeName(type));
    HostTensor kc = cacheState({slots, context, hkv, d}, type),
               vc = cacheState({slots, context, hkv, d}, type);
    std::string error;
    ASSERT_TRUE(
        runKernel(Recipe::KvStore, {}, {&kc, &k, &seq, &pos}, {}, error))
        << error;
    ASSERT_TRUE(
        runKernel(Recipe::KvStore, {}, {&vc, &v, &seq, &pos}, {}, error))
        << error;
    std::vector<float> kh = cacheValues(kc), vh = cacheValues(vc);
    // What each row must hold, computed here.
    for (int64_t r = 0; r < t * hkv; ++r) {
      const float *x = kv.data() + r * d;
      const float *got = kh.data() + (context * hkv + r) * d; // slot 1
      float amax = 0;
      for (int64_t i = 0; i < d; ++i)
        amax = std::max(amax, std::fabs(x[i]));
      for (int64_t i = 0; i < d; ++i) {
        float want = format::bf16ToFp32(format::fp32ToBf16(x[i]));
        if (type == PlanDType::I8) {
          float scale = amax / 127.0f;
          want = scale > 0 ? std::nearbyint(x[i] / scale) * scale : 0.0f;
          EXPECT_LE(std::fabs(got[i] - x[i]), scale / 2 * 1.0001f);
        }
        EXPECT_EQ(got[i], want) << "row " << r << " value " << i;
      }
    }
    // Slot 0 stays zero.
    EXPECT_TRUE(std::all_of(kh.begin(), kh.begin() + context * hkv * d,
                            [](float x) { return x == 0; }));
    // attention over the values held.
    std::vector<float> kHeld(kh.begin() + context * hkv * d,
                             kh.begin() + (context + t) * hkv * d),
        vHeld(vh.begin() + context * hkv * d,
              vh.begin() + (context + t) * hkv * d);
    HostTensor k2 = buffer({t, hkv, d}, kHeld), v2 = buffer({t, hkv, d}, vHeld);
    HostTensor ref = output({t, h, d}), y = output({t, h, d});
    ASSERT_TRUE(
        runKernel(Recipe::Attention, attrs, {&q, &k2, &v2}, {&ref}, error))
        << error;
    ASSERT_TRUE(runKernel(Recipe::AttentionCached, attrs,
                          {&q, &kc, &vc, &seq, &pos}, {&y}, error))
        << error;
    EXPECT_EQ(y.bytes, ref.bytes);
    // block_mean_cached over the values held (an f32 cache of them).
    HostTensor f32Cache = buffer({slots, context, hkv, d}, kh);
    HostTensor m1 = output({t, hkv, d}), m2 = output({t, hkv, d});
    HostTensor s1 = output({t}, PlanDType::I32),
               s2 = output({t}, PlanDType::I32);
    ASSERT_TRUE(runKernel(Recipe::BlockMeanCached, {{"block", aInt(4)}},
                          {&kc, &seq, &pos}, {&m1, &s1}, error))
        << error;
    ASSERT_TRUE(runKernel(Recipe::BlockMeanCached, {{"block", aInt(4)}},
                          {&f32Cache, &seq, &pos}, {&m2, &s2}, error))
        << error;
    EXPECT_EQ(m1.bytes, m2.bytes);
    EXPECT_EQ(s1.bytes, s2.bytes);
  }
}

// Cached attention is attention over the cache: the rows of one prompt
// stored at positions 0 .. T-1 of a slot give bit for bit what `attention`
// gives over the prompt's own keys (the same summation order), in any slot,
// gated or not, on any number of threads; a row at position P sees keys
// 0 .. P only.
TEST(CpuState, AttentionCachedEqualsAttentionBitForBit) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  struct Case {
    int64_t t, h, hkv, d, dv;
    bool gated;
  };
  for (const Case &cs :
       {Case{5, 4, 2, 16, 16, false}, Case{7, 6, 1, 8, 12, true},
        Case{33, 4, 4, 32, 32, false}}) {
    SCOPED_TRACE(
        fmt::format("T {} H {} Hkv {} gated {}", cs.t, cs.h, cs.hkv, cs.gated));
    const int64_t slots = 3, context = 40;
    std::vector<float> qv = rng.normal(cs.t * cs.h * cs.d),
                       kv = rng.normal(cs.t * cs.hkv * cs.d),
                       vv = rng.normal(cs.t * cs.hkv * cs.dv),
                       gv = rng.normal(cs.t * cs.h * cs.dv);
    HostTensor q = buffer({cs.t, cs.h, cs.d}, qv),
               k = buffer({cs.t, cs.hkv, cs.d}, kv),
               v = buffer({cs.t, cs.hkv, cs.dv}, vv),
               g = buffer({cs.t, cs.h, cs.dv}, gv);
    AttrMap attrs = {{"scale", aFloat(1 / std::sqrt(double(cs.d)))}};
    if (cs.gated)
      attrs["gated"] = aBool(true);
    std::vector<HostTensor *> ins = {&q, &k, &v};
    if (cs.gated)
      ins.push_back(&g);
    HostTensor ref = output({cs.t, cs.h, cs.dv});
    std::string error;
    ASSERT_TRUE(runKernel(Recipe::Attention, attrs, ins, {&ref}, error))
        << error;
    // Other slots hold other sequences (noise that must not be read).
    std::vector<float> noise = rng.normal(slots * context * cs.hkv * cs.d);
    HostTensor kc = buffer({slots, context, cs.hkv, cs.d}, noise);
    HostTensor vc = buffer({slots, context, cs.hkv, cs.dv},
                           rng.normal(slots * context * cs.hkv * cs.dv));
    std::vector<int32_t> posv(cs.t), seqv(cs.t, 1);
    for (int64_t i = 0; i < cs.t; ++i)
      posv[i] = static_cast<int32_t>(i);
    HostTensor seq = ids({cs.t}, seqv), pos = ids({cs.t}, posv);
    ASSERT_TRUE(
        runKernel(Recipe::KvStore, {}, {&kc, &k, &seq, &pos}, {}, error))
        << error;
    ASSERT_TRUE(
        runKernel(Recipe::KvStore, {}, {&vc, &v, &seq, &pos}, {}, error))
        << error;
    // Noise past the prompt in the slot itself must not be read either.
    for (int threads : {1, 3}) {
      HostTensor y = output({cs.t, cs.h, cs.dv});
      std::vector<HostTensor *> cins = {&q, &kc, &vc, &seq, &pos};
      if (cs.gated)
        cins.push_back(&g);
      ASSERT_TRUE(
          runKernel(Recipe::AttentionCached, attrs, cins, {&y}, error, threads))
          << error;
      EXPECT_EQ(y.bytes, ref.bytes) << threads << " threads";
    }
    // One decode row at the last position, alone: the prefill's last row.
    const int64_t last = cs.t - 1;
    std::vector<float> ql(qv.begin() + last * cs.h * cs.d, qv.end());
    std::vector<float> gl(gv.begin() + last * cs.h * cs.dv, gv.end());
    HostTensor q1 = buffer({1, cs.h, cs.d}, ql),
               g1 = buffer({1, cs.h, cs.dv}, gl);
    HostTensor s1 = ids({1}, {1}), p1 = ids({1}, {static_cast<int32_t>(last)});
    HostTensor y1 = output({1, cs.h, cs.dv});
    std::vector<HostTensor *> dins = {&q1, &kc, &vc, &s1, &p1};
    if (cs.gated)
      dins.push_back(&g1);
    ASSERT_TRUE(runKernel(Recipe::AttentionCached, attrs, dins, {&y1}, error))
        << error;
    size_t rowBytes = cs.h * cs.dv * 4;
    EXPECT_TRUE(std::equal(y1.bytes.begin(), y1.bytes.begin() + rowBytes,
                           ref.bytes.begin() + last * rowBytes));
  }
}

// The QSA indexer over a cache: a prompt's raw indexer keys stored in a
// cache, one row per position in chunks, block_mean_cached of the rows that
// complete a block, kv_store {block} of those means and qsa_select_cached
// give bit for bit the block keys and the selection of block_mean and
// qsa_select over the whole prompt; attention_cached with that index is
// attention's block-sparse form, bit for bit, gated.
// gated_delta_qkv_cached (fold-delta-inputs' form) is the slices, the two
// l2 norms and gated_delta_cached bit for bit: the outputs and the states.
TEST(CpuState, GatedDeltaQkvCachedIsSlicesNormsAndStep) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t t = 7, slots = 2, hk = 2, h = 6, dk = 8, dv = 4;
  const int64_t a = hk * dk, cols = 2 * a + h * dv;
  const float eps = 1e-6f;
  std::vector<int32_t> seqv, posv;
  for (int64_t i = 0; i < t; ++i) {
    seqv.push_back(static_cast<int32_t>(i % slots));
    posv.push_back(static_cast<int32_t>(i / slots + (i % slots) * 3));
  }
  for (const char *heads : {"grouped", "tiled"}) {
    SCOPED_TRACE(heads);
    std::vector<float> x = rng.normal(t * cols);
    std::vector<float> g = rng.uniform(t * h, -1.0f, 0.0f),
                       b = rng.uniform(t * h, 0.0f, 1.0f),
                       s0 = rng.normal(slots * h * dk * dv);
    HostTensor seq = ids({t}, seqv), pos = ids({t}, posv);
    HostTensor gt = buffer({t, h}, g), bt = buffer({t, h}, b);
    // Unfolded: the slices by hand, l2_norm, the step.
    std::vector<float> qs, ks, vs;
    for (int64_t r = 0; r < t; ++r) {
      const float *row = x.data() + r * cols;
      qs.insert(qs.end(), row, row + a);
      ks.insert(ks.end(), row + a, row + 2 * a);
      vs.insert(vs.end(), row + 2 * a, row + cols);
    }
    AttrMap norm = {{"eps", aFloat(eps)}, {"form", aStr("add")}};
    HostTensor q0 = buffer({t, hk, dk}, qs), k0 = buffer({t, hk, dk}, ks),
               qn = output({t, hk, dk}), kn = output({t, hk, dk});
    std::string error;
    ASSERT_TRUE(runKernel(Recipe::L2Norm, norm, {&q0}, {&qn}, error)) << error;
    ASSERT_TRUE(runKernel(Recipe::L2Norm, norm, {&k0}, {&kn}, error)) << error;
    HostTensor v = buffer({t, h, dv}, vs), st1 = buffer({slots, h, dk, dv}, s0),
               o1 = output({t, h, dv});
    AttrMap step = {{"scale", aFloat(0.35)}, {"heads", aStr(heads)}};
    ASSERT_TRUE(runKernel(Recipe::GatedDeltaCached, step,
                          {&st1, &qn, &kn, &v, &gt, &bt, &seq, &pos}, {&o1},
                          error))
        << error;
    // Folded.
    AttrMap packed = {{"hk", aInt(hk)},
                      {"eps", aFloat(eps)},
                      {"scale", aFloat(0.35)},
                      {"heads", aStr(heads)}};
    HostTensor xt = buffer({t, cols}, x), st2 = buffer({slots, h, dk, dv}, s0),
               o2 = output({t, h, dv});
    ASSERT_TRUE(runKernel(Recipe::GatedDeltaQkvCached, packed,
                          {&st2, &xt, &gt, &bt, &seq, &pos}, {&o2}, error))
        << error;
    EXPECT_EQ(o2.floats(), o1.floats());
    EXPECT_EQ(st2.floats(), st1.floats());
    // A row of the wrong width is refused, naming the count it needs.
    HostTensor narrow =
        buffer({t, cols - 1}, std::vector<float>(t * (cols - 1)));
    EXPECT_FALSE(runKernel(Recipe::GatedDeltaQkvCached, packed,
                           {&st2, &narrow, &gt, &bt, &seq, &pos}, {&o2},
                           error));
    EXPECT_NE(error.find(fmt::format("{} columns", cols)), std::string::npos)
        << error;
  }
}

TEST(CpuState, QsaCachedEqualsQsaBitForBit) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t t = 37, block = 4, top = 3, hi = 2, di = 8;
  const int64_t slots = 2, context = 42; // no multiple of the block
  const int64_t h = 4, hkv = 2, d = 8, dv = 8;
  std::string error;
  // The stateless reference: block keys, then each query's blocks.
  std::vector<float> krv = rng.normal(t * di), qiv = rng.normal(t * hi * di);
  HostTensor kr = buffer({t, di}, krv), qi = buffer({t, hi, di}, qiv);
  HostTensor kb = output({t / block, di});
  ASSERT_TRUE(runKernel(Recipe::BlockMean, {{"block", aInt(block)}}, {&kr},
                        {&kb}, error))
      << error;
  AttrMap sel = {{"block", aInt(block)}, {"top", aInt(top)}};
  HostTensor idx = output({t, top + 1}, format::PlanDType::I32);
  ASSERT_TRUE(runKernel(Recipe::QsaSelect, sel, {&qi, &kb}, {&idx}, error))
      << error;
  // The cached form, slot 1, chunks of 5 rows (noise in the caches).
  HostTensor rawCache =
      buffer({slots, context, 1, di}, rng.normal(slots * context * di));
  HostTensor keyCache = buffer({slots, context / block, 1, di},
                               rng.normal(slots * (context / block) * di));
  std::vector<int32_t> got;
  std::vector<float> means;
  for (int64_t c0 = 0; c0 < t; c0 += 5) {
    int64_t n = std::min<int64_t>(5, t - c0);
    std::vector<int32_t> pv(n), sv(n, 1);
    for (int64_t i = 0; i < n; ++i)
      pv[i] = static_cast<int32_t>(c0 + i);
    HostTensor seq = ids({n}, sv), pos = ids({n}, pv);
    HostTensor rows =
        buffer({n, 1, di}, std::vector<float>(krv.begin() + c0 * di,
                                              krv.begin() + (c0 + n) * di));
    ASSERT_TRUE(runKernel(Recipe::KvStore, {}, {&rawCache, &rows, &seq, &pos},
                          {}, error))
        << error;
    HostTensor mean = output({n, 1, di});
    HostTensor start = output({n}, format::PlanDType::I32);
    ASSERT_TRUE(runKernel(Recipe::BlockMeanCached, {{"block", aInt(block)}},
                          {&rawCache, &seq, &pos}, {&mean, &start}, error))
        << error;
    // floats() and ints() return copies: one each.
    std::vector<float> mf = mean.floats();
    std::vector<int32_t> sf = start.ints();
    for (int64_t i = 0; i < n; ++i) {
      int32_t p = pv[i];
      EXPECT_EQ(sf[i], p - p % block) << "row " << p;
      std::vector<float> m(mf.begin() + i * di, mf.begin() + (i + 1) * di);
      if (p % block == block - 1)
        means.insert(means.end(), m.begin(), m.end());
      else
        EXPECT_EQ(m, std::vector<float>(di, 0.0f)) << "row " << p;
    }
    ASSERT_TRUE(runKernel(Recipe::KvStore, {{"block", aInt(block)}},
                          {&keyCache, &mean, &seq, &pos}, {}, error))
        << error;
    HostTensor qc = buffer(
        {n, hi, di}, std::vector<float>(qiv.begin() + c0 * hi * di,
                                        qiv.begin() + (c0 + n) * hi * di));
    HostTensor out = output({n, top + 1}, format::PlanDType::I32);
    ASSERT_TRUE(runKernel(Recipe::QsaSelectCached, sel,
                          {&qc, &keyCache, &seq, &pos}, {&out}, error))
        << error;
    std::vector<int32_t> chosen = out.ints();
    got.insert(got.end(), chosen.begin(), chosen.end());
  }
  EXPECT_EQ(means, kb.floats());
  EXPECT_EQ(got, idx.ints());
  // Slot 0's block keys are untouched noise; the cache holds slot 1's means.
  std::vector<float> cached = keyCache.floats();
  std::vector<float> stored(cached.begin() + (context / block) * di,
                            cached.begin() +
                                (context / block + t / block) * di);
  EXPECT_EQ(stored, kb.floats());

  // Block-sparse attention over the cache with that index.
  std::vector<float> qv = rng.normal(t * h * d), kv = rng.normal(t * hkv * d),
                     vv = rng.normal(t * hkv * dv), gv = rng.normal(t * h * dv);
  HostTensor q = buffer({t, h, d}, qv), k = buffer({t, hkv, d}, kv),
             v = buffer({t, hkv, dv}, vv), g = buffer({t, h, dv}, gv);
  AttrMap attrs = {
      {"scale", aFloat(0.3)}, {"gated", aBool(true)}, {"block", aInt(block)}};
  HostTensor ref = output({t, h, dv});
  ASSERT_TRUE(runKernel(Recipe::Attention, attrs, {&q, &k, &v, &g, &idx},
                        {&ref}, error))
      << error;
  HostTensor kc =
      buffer({slots, context, hkv, d}, rng.normal(slots * context * hkv * d));
  HostTensor vc =
      buffer({slots, context, hkv, dv}, rng.normal(slots * context * hkv * dv));
  std::vector<int32_t> pv(t), sv(t, 1);
  for (int64_t i = 0; i < t; ++i)
    pv[i] = static_cast<int32_t>(i);
  HostTensor seq = ids({t}, sv), pos = ids({t}, pv);
  ASSERT_TRUE(runKernel(Recipe::KvStore, {}, {&kc, &k, &seq, &pos}, {}, error))
      << error;
  ASSERT_TRUE(runKernel(Recipe::KvStore, {}, {&vc, &v, &seq, &pos}, {}, error))
      << error;
  for (int threads : {1, 3}) {
    HostTensor y = output({t, h, dv});
    ASSERT_TRUE(runKernel(Recipe::AttentionCached, attrs,
                          {&q, &kc, &vc, &seq, &pos, &g, &idx}, {&y}, error,
                          threads))
        << error;
    EXPECT_EQ(y.bytes, ref.bytes) << threads << " threads";
  }
}

// The cached QSA kernels refuse what they cannot read.
TEST(CpuState, QsaCachedErrors) {
  std::string error;
  HostTensor keys = buffer({2, 3, 1, 4}, std::vector<float>(24, 0));
  HostTensor q = buffer({1, 2, 4}, std::vector<float>(8, 1));
  HostTensor seq = ids({1}, {0}), far = ids({1}, {15});
  HostTensor out = output({1, 3}, format::PlanDType::I32);
  AttrMap sel = {{"block", aInt(4)}, {"top", aInt(2)}};
  // 3 blocks of 4 cover positions whose complete blocks are 0..2: up to 14.
  EXPECT_FALSE(runKernel(Recipe::QsaSelectCached, sel, {&q, &keys, &seq, &far},
                         {&out}, error));
  EXPECT_NE(error.find("row 0 is at position 15 of slot 0, outside the "
                       "state's 2 slots x 15 positions"),
            std::string::npos)
      << error;
  HostTensor twoHeads = buffer({2, 3, 2, 4}, std::vector<float>(48, 0));
  HostTensor ok = ids({1}, {3});
  EXPECT_FALSE(runKernel(Recipe::QsaSelectCached, sel,
                         {&q, &twoHeads, &seq, &ok}, {&out}, error));
  EXPECT_NE(error.find("must be block keys [S, NB, 1, 4]"), std::string::npos)
      << error;
  HostTensor mean = output({1, 1, 4});
  HostTensor start = output({1}, format::PlanDType::I32);
  EXPECT_FALSE(runKernel(Recipe::BlockMeanCached, {{"block", aInt(0)}},
                         {&keys, &seq, &ok}, {&mean, &start}, error));
  EXPECT_NE(error.find("attribute 'block' = 0 must lie in 1..1048576"),
            std::string::npos)
      << error;
  HostTensor qa = buffer({1, 2, 4}, std::vector<float>(8, 1));
  HostTensor y = output({1, 2, 4});
  EXPECT_FALSE(runKernel(Recipe::AttentionCached,
                         {{"scale", aFloat(1)}, {"block", aInt(4)}},
                         {&qa, &keys, &keys, &seq, &ok}, {&y}, error));
  EXPECT_NE(error.find("expects 6 inputs (q, k cache, v cache, slots, "
                       "positions, block index), got 5"),
            std::string::npos)
      << error;
}

/// Rows of two sequences (A in slot 0, B in slot 1) in runs of \p chunk
/// positions each, interleaved A, B, A, B within a run: the order a
/// batched decode or two chunked prefills give a recurrent state op.
struct TwoSlotRuns {
  int64_t t, chunk;
  /// The rows of run \p c0 (its first position): (sequence, position).
  std::vector<std::pair<int, int64_t>> rows(int64_t c0) const {
    std::vector<std::pair<int, int64_t>> out;
    for (int64_t p = c0; p < std::min(t, c0 + chunk); ++p)
      for (int s = 0; s < 2; ++s)
        out.push_back({s, p});
    return out;
  }
  HostTensor seq(int64_t c0) const {
    std::vector<int32_t> v;
    for (auto [s, p] : rows(c0))
      v.push_back(s);
    return ids({int64_t(v.size())}, v);
  }
  HostTensor pos(int64_t c0) const {
    std::vector<int32_t> v;
    for (auto [s, p] : rows(c0))
      v.push_back(static_cast<int32_t>(p));
    return ids({int64_t(v.size())}, v);
  }
  /// Gathers row data of \p width values: sequence s's position p from
  /// \p src[s] ([t, width]).
  std::vector<float> gather(int64_t c0, const std::vector<float> *src,
                            int64_t width) const {
    std::vector<float> out;
    for (auto [s, p] : rows(c0))
      out.insert(out.end(), src[s].begin() + p * width,
                 src[s].begin() + (p + 1) * width);
    return out;
  }
};

TEST(CpuState, RecurrentCachedFormsEqualPrefillBitForBit) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t t = 23, chunk = 5, slots = 3;
  TwoSlotRuns runs{t, chunk};
  std::string error;

  // conv1d_cached (K = 4, dilation 2: a window of 6) against conv1d_causal.
  const int64_t c = 6, kw = 4, dil = 2, w = (kw - 1) * dil;
  std::vector<float> wv = rng.normal(c * kw);
  HostTensor cw = buffer({c, kw}, wv);
  std::vector<float> xs[2] = {rng.normal(t * c), rng.normal(t * c)};
  std::vector<float> ys[2];
  for (int s = 0; s < 2; ++s) {
    HostTensor x = buffer({t, c}, xs[s]), y = output({t, c});
    ASSERT_TRUE(runKernel(Recipe::Conv1dCausal, {{"dilation", aInt(dil)}},
                          {&x, &cw}, {&y}, error))
        << error;
    ys[s] = y.floats();
  }
  // The same with act = "silu" (fuse-elementwise's epilogue): the silu
  // op's values of conv1d_causal's sums.
  std::vector<float> silus[2];
  for (int s = 0; s < 2; ++s) {
    HostTensor x = buffer({t, c}, ys[s]), y = output({t, c});
    ASSERT_TRUE(runKernel(Recipe::Silu, {}, {&x}, {&y}, error)) << error;
    silus[s] = y.floats();
  }
  for (const char *act : {"none", "silu"}) {
    SCOPED_TRACE(act);
    // Noise in the windows: taps before position 0 never read them.
    HostTensor win = buffer({slots, w, c}, rng.normal(slots * w * c));
    std::vector<float> convGot[2];
    for (int64_t c0 = 0; c0 < t; c0 += chunk) {
      HostTensor seq = runs.seq(c0), pos = runs.pos(c0);
      int64_t n = seq.shape[0];
      HostTensor x = buffer({n, c}, runs.gather(c0, xs, c)), y = output({n, c});
      ASSERT_TRUE(runKernel(Recipe::Conv1dCached,
                            {{"dilation", aInt(dil)}, {"act", aStr(act)}},
                            {&win, &x, &cw, &seq, &pos}, {&y}, error))
          << error;
      std::vector<float> yf = y.floats();
      for (int64_t i = 0; i < n; ++i)
        convGot[i % 2].insert(convGot[i % 2].end(), yf.begin() + i * c,
                              yf.begin() + (i + 1) * c);
    }
    const bool silu = std::string(act) == "silu";
    EXPECT_EQ(convGot[0], silu ? silus[0] : ys[0]);
    EXPECT_EQ(convGot[1], silu ? silus[1] : ys[1]);
  }

  // gated_delta_cached against gated_delta_rule, both head orders.
  const int64_t hk = 2, h = 4, dk = 8, dv = 4;
  for (const char *heads : {"grouped", "tiled"}) {
    SCOPED_TRACE(heads);
    AttrMap attrs = {{"scale", aFloat(0.35)}, {"heads", aStr(heads)}};
    std::vector<float> in[2][5];
    std::vector<float> want[2];
    for (int s = 0; s < 2; ++s) {
      in[s][0] = rng.normal(t * hk * dk);
      in[s][1] = rng.normal(t * hk * dk, 0.3f);
      in[s][2] = rng.normal(t * h * dv);
      in[s][3] = rng.uniform(t * h, -1.0f, 0.0f); // log-decay <= 0
      in[s][4] = rng.uniform(t * h, 0.0f, 1.0f);
      HostTensor q = buffer({t, hk, dk}, in[s][0]),
                 k = buffer({t, hk, dk}, in[s][1]),
                 v = buffer({t, h, dv}, in[s][2]), g = buffer({t, h}, in[s][3]),
                 b = buffer({t, h}, in[s][4]), o = output({t, h, dv});
      ASSERT_TRUE(runKernel(Recipe::GatedDeltaRule, attrs, {&q, &k, &v, &g, &b},
                            {&o}, error))
          << error;
      want[s] = o.floats();
    }
    // Noise in the states: a row at position 0 starts from zero.
    HostTensor st = buffer({slots, h, dk, dv}, rng.normal(slots * h * dk * dv));
    std::vector<float> got[2];
    for (int64_t c0 = 0; c0 < t; c0 += chunk) {
      HostTensor seq = runs.seq(c0), pos = runs.pos(c0);
      int64_t n = seq.shape[0];
      auto part = [&](int i, int64_t width) {
        std::vector<float> src[2] = {in[0][i], in[1][i]};
        return runs.gather(c0, src, width);
      };
      HostTensor q = buffer({n, hk, dk}, part(0, hk * dk)),
                 k = buffer({n, hk, dk}, part(1, hk * dk)),
                 v = buffer({n, h, dv}, part(2, h * dv)),
                 g = buffer({n, h}, part(3, h)), b = buffer({n, h}, part(4, h)),
                 o = output({n, h, dv});
      ASSERT_TRUE(runKernel(Recipe::GatedDeltaCached, attrs,
                            {&st, &q, &k, &v, &g, &b, &seq, &pos}, {&o}, error))
          << error;
      std::vector<float> of = o.floats();
      for (int64_t i = 0; i < n; ++i)
        got[i % 2].insert(got[i % 2].end(), of.begin() + i * h * dv,
                          of.begin() + (i + 1) * h * dv);
    }
    EXPECT_EQ(got[0], want[0]);
    EXPECT_EQ(got[1], want[1]);
  }

  // ngram_hash_cached against ngram_hash (n = 3, 2 heads; EOS in A).
  AttrMap ng = {{"n", aInt(3)},
                {"heads", aInt(2)},
                {"eos", aInt(7)},
                {"mults", aInts({3, 1000003, 998244353})},
                {"sizes", aInts({11, 13, 17, 19})},
                {"offsets", aInts({0, 11, 24, 41})}};
  std::vector<float> toks[2];
  std::vector<int32_t> wantIds[2];
  for (int s = 0; s < 2; ++s) {
    std::vector<int32_t> tv(t);
    for (int64_t i = 0; i < t; ++i)
      tv[i] = static_cast<int32_t>(rng.integer(0, 11));
    tv[9] = 7;
    toks[s].assign(tv.begin(), tv.end());
    HostTensor tok = ids({t}, tv), y = output({t, 4}, format::PlanDType::I32);
    ASSERT_TRUE(runKernel(Recipe::NgramHash, ng, {&tok}, {&y}, error)) << error;
    wantIds[s] = y.ints();
  }
  HostTensor hist = buffer({slots, 2}, rng.normal(slots * 2));
  std::vector<int32_t> idsGot[2];
  for (int64_t c0 = 0; c0 < t; c0 += chunk) {
    HostTensor seq = runs.seq(c0), pos = runs.pos(c0);
    int64_t n = seq.shape[0];
    std::vector<float> tf = runs.gather(c0, toks, 1);
    HostTensor tok = ids({n}, std::vector<int32_t>(tf.begin(), tf.end()));
    HostTensor y = output({n, 4}, format::PlanDType::I32);
    ASSERT_TRUE(runKernel(Recipe::NgramHashCached, ng,
                          {&hist, &tok, &seq, &pos}, {&y}, error))
        << error;
    std::vector<int32_t> yi = y.ints();
    for (int64_t i = 0; i < n; ++i)
      idsGot[i % 2].insert(idsGot[i % 2].end(), yi.begin() + i * 4,
                           yi.begin() + (i + 1) * 4);
  }
  EXPECT_EQ(idsGot[0], wantIds[0]);
  EXPECT_EQ(idsGot[1], wantIds[1]);
}

TEST(CpuState, RecurrentCachedErrors) {
  std::string error;
  HostTensor seq = ids({1}, {0}), pos = ids({1}, {2}), far = ids({1}, {3});
  // A window that is not (K - 1) * dilation long.
  HostTensor win = buffer({2, 3, 4}, std::vector<float>(24, 0));
  HostTensor x = buffer({1, 4}, std::vector<float>(4, 1));
  HostTensor cw = buffer({4, 3}, std::vector<float>(12, 1));
  HostTensor y = output({1, 4});
  EXPECT_FALSE(runKernel(Recipe::Conv1dCached, {}, {&win, &x, &cw, &seq, &pos},
                         {&y}, error));
  EXPECT_NE(error.find("the window length (K - 1) * dilation is 3, expected 2"),
            std::string::npos)
      << error;
  // An activation the convolution does not apply.
  HostTensor win3 = buffer({2, 2, 4}, std::vector<float>(16, 0));
  EXPECT_FALSE(runKernel(Recipe::Conv1dCached, {{"act", aStr("gelu")}},
                         {&win3, &x, &cw, &seq, &pos}, {&y}, error));
  EXPECT_NE(error.find("attribute 'act' must be \"none\" or \"silu\", got "
                       "\"gelu\""),
            std::string::npos)
      << error;
  // A slot past the state's.
  HostTensor slot2 = ids({1}, {2});
  HostTensor win2 = buffer({2, 2, 4}, std::vector<float>(16, 0));
  EXPECT_FALSE(runKernel(Recipe::Conv1dCached, {},
                         {&win2, &x, &cw, &slot2, &pos}, {&y}, error));
  EXPECT_NE(error.find("row 0 is at position 2 of slot 2, outside the state's "
                       "2 slots"),
            std::string::npos)
      << error;
  // A delta state of another head dim.
  HostTensor st = buffer({1, 2, 3, 2}, std::vector<float>(12, 0));
  HostTensor q = buffer({1, 1, 4}, std::vector<float>(4, 1));
  HostTensor v = buffer({1, 2, 2}, std::vector<float>(4, 1));
  HostTensor g = buffer({1, 2}, std::vector<float>(2, 0));
  HostTensor o = output({1, 2, 2});
  EXPECT_FALSE(runKernel(Recipe::GatedDeltaCached, {},
                         {&st, &q, &q, &v, &g, &g, &seq, &far}, {&o}, error));
  EXPECT_NE(error.find("the key head dim is 3, expected 4"), std::string::npos)
      << error;
  // A token id the f32 history cannot hold.
  AttrMap ng = {{"n", aInt(2)},        {"heads", aInt(1)},
                {"eos", aInt(0)},      {"mults", aInts({1, 1})},
                {"sizes", aInts({5})}, {"offsets", aInts({0})}};
  HostTensor hist = buffer({1, 1}, {0});
  HostTensor big = ids({1}, {1 << 24});
  HostTensor ids1 = output({1, 1}, format::PlanDType::I32);
  EXPECT_FALSE(runKernel(Recipe::NgramHashCached, ng, {&hist, &big, &seq, &pos},
                         {&ids1}, error));
  EXPECT_NE(error.find("token 16777216 of row 0 is outside 0 .. 2^24 - 1"),
            std::string::npos)
      << error;
}
