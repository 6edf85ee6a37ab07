//===- SynthTest.cpp - strata-gguf synth: PRNG, globs, --types, tables ----===//
#include "tools/strata-gguf/Synth.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

using namespace strata::tools;
using strata::format::GgmlType;

namespace {

TEST(SynthRng, SplitMix64PublishedValues) {
  // SplitMix64 started at state 0 (values from the algorithm's reference
  // implementation, widely used to seed xoshiro).
  uint64_t state = 0;
  EXPECT_EQ(splitMix64(state), 0xe220a8397b1dcdafull);
  EXPECT_EQ(splitMix64(state), 0x6e789e6aa1b965f4ull);
  EXPECT_EQ(splitMix64(state), 0x06c45d188009454full);
}

TEST(SynthRng, Xoshiro256StarStarFromKnownState) {
  // Worked by hand from the definition: result = rotl(s1 * 5, 7) * 9.
  SynthRng rng = SynthRng::fromState({1, 2, 3, 4});
  EXPECT_EQ(rng.next(), 11520u);
  EXPECT_EQ(rng.next(), 0u);
  EXPECT_EQ(rng.next(), 1509978240u);
}

TEST(SynthRng, Fnv1a64) {
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cull);
}

TEST(SynthRng, SameSeedAndNameGiveTheSameStream) {
  SynthRng a = SynthRng::forTensor(7, "blk.0.attn_q.weight");
  SynthRng b = SynthRng::forTensor(7, "blk.0.attn_q.weight");
  for (int i = 0; i < 1000; ++i)
    ASSERT_EQ(a.next(), b.next());
  SynthRng c = SynthRng::forTensor(7, "blk.0.attn_q.weight");
  SynthRng d = SynthRng::forTensor(7, "blk.0.attn_q.weight");
  for (int i = 0; i < 1001; ++i) // an odd count exercises the cached normal
    ASSERT_EQ(c.normal(), d.normal());
}

TEST(SynthRng, SeedAndNameSelectDifferentStreams) {
  SynthRng a = SynthRng::forTensor(1, "x");
  SynthRng b = SynthRng::forTensor(2, "x");
  SynthRng c = SynthRng::forTensor(1, "y");
  uint64_t va = a.next(), vb = b.next(), vc = c.next();
  EXPECT_NE(va, vb);
  EXPECT_NE(va, vc);
  EXPECT_NE(vb, vc);
}

TEST(SynthRng, ForTensorAtJumpsTheStream) {
  // forTensorAt(seed, name, n) is forTensor(seed, name) after n draws, for
  // n across several bits of the jump (matrix powers 2^0 .. 2^12).
  for (uint64_t n : {0ull, 1ull, 2ull, 3ull, 64ull, 1000ull, 4097ull}) {
    SynthRng stepped = SynthRng::forTensor(9, "blk.0.ffn_up_exps.weight");
    for (uint64_t i = 0; i < n; ++i)
      stepped.next();
    SynthRng jumped = SynthRng::forTensorAt(9, "blk.0.ffn_up_exps.weight", n);
    for (int i = 0; i < 8; ++i)
      EXPECT_EQ(jumped.next(), stepped.next()) << "n = " << n << ", i = " << i;
  }
  // Large jumps compose with steps (the powers past 2^12 are squarings of
  // the ones checked above).
  const uint64_t big = (uint64_t(1) << 40) + 12345;
  SynthRng far = SynthRng::forTensorAt(9, "t", big);
  for (int i = 0; i < 7; ++i)
    far.next();
  EXPECT_EQ(far.next(), SynthRng::forTensorAt(9, "t", big + 7).next());
  // Normals pair draws: an even jump continues the sequence of normals.
  SynthRng a = SynthRng::forTensor(3, "x");
  for (int i = 0; i < 10; ++i)
    a.normal();
  SynthRng b = SynthRng::forTensorAt(3, "x", 10);
  EXPECT_EQ(a.normal(), b.normal());
}

TEST(SynthRng, UniformAndNormalMoments) {
  SynthRng rng(12345);
  const int n = 200000;
  double sum = 0, sum2 = 0, usum = 0;
  for (int i = 0; i < n; ++i) {
    double u = rng.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    usum += u;
    double z = rng.normal();
    ASSERT_TRUE(std::isfinite(z));
    sum += z;
    sum2 += z * z;
  }
  EXPECT_NEAR(usum / n, 0.5, 0.005);
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sum2 / n, 1.0, 0.02);
}

TEST(Glob, Matches) {
  EXPECT_TRUE(globMatch("*", ""));
  EXPECT_TRUE(globMatch("*", "blk.0.attn_q.weight"));
  EXPECT_TRUE(globMatch("*attn_q*", "blk.0.attn_q.weight"));
  EXPECT_TRUE(globMatch("*attn_q*", "blk.0.attn_q_norm.weight"));
  EXPECT_FALSE(globMatch("*attn_q.*", "blk.0.attn_q_norm.weight"));
  EXPECT_TRUE(globMatch("*ffn_*_exps*", "blk.1.ffn_down_exps.weight"));
  EXPECT_FALSE(globMatch("*ffn_*_exps*", "blk.1.ffn_down_shexp.weight"));
  EXPECT_TRUE(globMatch("token_embd*", "token_embd.weight"));
  EXPECT_FALSE(globMatch("token_embd*", "output.weight"));
  EXPECT_TRUE(globMatch("blk.?.ssm_a", "blk.2.ssm_a"));
  EXPECT_FALSE(globMatch("blk.?.ssm_a", "blk.12.ssm_a"));
  EXPECT_TRUE(globMatch("blk.[0-2].*", "blk.1.attn_qkv.weight"));
  EXPECT_FALSE(globMatch("blk.[0-2].*", "blk.3.attn_q.weight"));
  EXPECT_TRUE(globMatch("blk.[!0-2].*", "blk.3.attn_q.weight"));
  EXPECT_TRUE(globMatch("blk.[^0-2].*", "blk.3.attn_q.weight"));
  EXPECT_FALSE(globMatch("blk.[!0-2].*", "blk.0.attn_q.weight"));
  EXPECT_TRUE(globMatch("[]x]", "]"));
  EXPECT_TRUE(globMatch("a\\*b", "a*b"));
  EXPECT_FALSE(globMatch("a\\*b", "axb"));
  EXPECT_TRUE(globMatch("*a*b*c*", "xxaxxbxxcxx"));
  EXPECT_FALSE(globMatch("*a*b*c*", "xxaxxcxxbxx"));
  EXPECT_TRUE(globMatch("**.weight", "output.weight"));
  EXPECT_FALSE(globMatch("output", "output.weight")); // whole name
  EXPECT_FALSE(globMatch("*.bias", "blk.0.ssm_dt.biasx"));
}

TEST(Glob, SyntaxErrors) {
  EXPECT_EQ(globSyntaxError("*ffn_*"), "");
  EXPECT_EQ(globSyntaxError("[]x]"), "");
  EXPECT_EQ(globSyntaxError("a\\["), "");
  EXPECT_NE(globSyntaxError(""), "");
  EXPECT_NE(globSyntaxError("*[ffn"), "");
  EXPECT_NE(globSyntaxError("[]"), ""); // ']' first is literal: unclosed
  EXPECT_NE(globSyntaxError("a\\"), "");
  EXPECT_NE(globSyntaxError("[z-a]"), "");
}

TEST(TypeSpec, DefaultAndRules) {
  std::string error;
  std::optional<TypeSpec> s =
      parseTypeSpec("q8_0,*ffn_*=Q4_K,*attn_v*=q6_k", error);
  ASSERT_TRUE(s) << error;
  EXPECT_EQ(s->defaultType, GgmlType::Q8_0);
  ASSERT_EQ(s->rules.size(), 2u);
  EXPECT_EQ(s->rules[0].glob, "*ffn_*");
  EXPECT_EQ(s->rules[0].type, GgmlType::Q4_K);
  EXPECT_EQ(s->rules[0].text, "*ffn_*=Q4_K");
  EXPECT_EQ(s->rules[1].type, GgmlType::Q6_K);

  s = parseTypeSpec("*_exps*=iq3_s", error);
  ASSERT_TRUE(s) << error;
  EXPECT_EQ(s->defaultType, GgmlType::F32); // no bare default given
  ASSERT_EQ(s->rules.size(), 1u);
  EXPECT_EQ(s->rules[0].type, GgmlType::IQ3_S);
}

TEST(TypeSpec, Errors) {
  auto fails = [](std::string_view spec, std::string_view what) {
    std::string error;
    std::optional<TypeSpec> s = parseTypeSpec(spec, error);
    EXPECT_FALSE(s) << spec;
    EXPECT_NE(error.find(what), std::string::npos)
        << "'" << spec << "' gave: " << error;
  };
  fails("", "empty");
  fails("q9_9", "unknown type 'q9_9'");
  fails("q2_k", "cannot quantise to q2_k");
  fails("f32,*=iq2_xxs", "cannot quantise to iq2_xxs in rule '*=iq2_xxs'");
  fails("f32,q8_0", "'q8_0' is not GLOB=TYPE");
  fails("f32,,x=q8_0", "item 2");
  fails("f32,x=", "no type");
  fails("f32,=q8_0", "the glob is empty");
  fails("f32,*[ffn=q8_0", "no closing ']'");
  fails("f32,", "item 2");
}

TEST(SynthTables, ArchesAndPresets) {
  std::vector<std::string> arches = synthArchNames();
  ASSERT_EQ(arches, (std::vector<std::string>{"qwen3", "qwen3moe", "qwen3next",
                                              "qwen4exp"}));
  for (const std::string &a : arches)
    EXPECT_EQ(synthPresetNames(a),
              a == "qwen4exp"
                  ? (std::vector<std::string>{"tiny", "full", "full12"})
              : a == "qwen3moe" ? (std::vector<std::string>{"tiny", "30b-a3b"})
                                : std::vector<std::string>{"tiny"});
  EXPECT_TRUE(synthPresetNames("llama").empty());
  EXPECT_TRUE(synthTensors("llama", "tiny").empty());
  EXPECT_TRUE(synthTensors("qwen3", "full").empty());
}

TEST(SynthTables, Qwen4ExpTensorCounts) {
  // GDN layers 25 tensors, QSA layers 26, PLE 6, global 6 (plus the PLE
  // table): the real file's 1224 at full size.
  EXPECT_EQ(synthTensors("qwen4exp", "tiny").size(), 6u + 3 * 25 + 26 + 6);
  std::vector<SynthTensor> full = synthTensors("qwen4exp", "full");
  EXPECT_EQ(full.size(), 1224u);
  auto find = [&](const std::string &name) -> const SynthTensor * {
    for (const SynthTensor &t : full)
      if (t.name == name)
        return &t;
    return nullptr;
  };
  const SynthTensor *table = find("per_layer_token_embd.weight");
  ASSERT_TRUE(table);
  EXPECT_EQ(table->dims, (std::vector<uint64_t>{160, 320001536}));
  const SynthTensor *down = find("blk.47.ffn_down_exps.weight");
  ASSERT_TRUE(down);
  EXPECT_EQ(down->dims, (std::vector<uint64_t>{640, 2560, 512}));
  EXPECT_TRUE(find("blk.47.indexer.q_proj.weight"));
  EXPECT_FALSE(find("blk.46.indexer.q_proj.weight"));
}

TEST(SynthTables, EveryWeightFitsEveryBlockType) {
  for (const std::string &a : synthArchNames()) {
    std::vector<SynthTensor> ts = synthTensors(a, "tiny");
    ASSERT_FALSE(ts.empty()) << a;
    std::set<std::string> names;
    for (const SynthTensor &t : ts) {
      EXPECT_TRUE(names.insert(t.name).second) << a << ": " << t.name;
      EXPECT_LT(t.name.size(), 64u) << t.name; // ggml's GGML_MAX_NAME
      if (t.dims.size() >= 2 && !t.defaultF32)
        EXPECT_EQ(t.dims[0] % 256, 0u) << a << ": " << t.name;
      if (t.name.find("_exps") != std::string::npos) {
        ASSERT_EQ(t.dims.size(), 3u) << t.name;
        EXPECT_GE(t.dims[2], 8u) << t.name;
      }
    }
  }
}

TEST(SynthTables, Qwen3NextLayerPattern) {
  std::vector<SynthTensor> ts = synthTensors("qwen3next", "tiny");
  auto has = [&](const std::string &name) {
    for (const SynthTensor &t : ts)
      if (t.name == name)
        return true;
    return false;
  };
  for (int l = 0; l < 3; ++l) {
    std::string b = "blk." + std::to_string(l) + ".";
    EXPECT_TRUE(has(b + "ssm_conv1d.weight"));
    EXPECT_TRUE(has(b + "ssm_ba.weight"));
    EXPECT_TRUE(has(b + "ssm_a"));
    EXPECT_TRUE(has(b + "ssm_dt.bias"));
    EXPECT_FALSE(has(b + "attn_q.weight"));
  }
  EXPECT_TRUE(has("blk.3.attn_q.weight"));
  EXPECT_FALSE(has("blk.3.ssm_conv1d.weight"));
  for (int l = 0; l < 4; ++l) {
    std::string b = "blk." + std::to_string(l) + ".";
    EXPECT_TRUE(has(b + "ffn_gate_inp_shexp.weight"));
    EXPECT_TRUE(has(b + "ffn_down_shexp.weight"));
    EXPECT_TRUE(has(b + "post_attention_norm.weight"));
    EXPECT_FALSE(has(b + "ffn_norm.weight"));
  }
}

} // namespace
