//===- ExpandTest.cpp - expand against in-memory metadata -----------------===//
#include "ir/Parser.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"
#include "passes/Pass.h"
#include "runtime/format/KeyValueFile.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <tuple>

using namespace strata;

namespace {

/// Parses, verifies and expands; returns the printed result or "" on error.
std::string expand(const std::string &text, const std::string &kv,
                   std::string *diagsOut = nullptr,
                   size_t maxOps = size_t(1) << 22) {
  ir::SourceMgr sm;
  std::ostringstream os;
  ir::DiagnosticEngine diag(sm, os);
  std::string err;
  auto model = format::parseKeyValueText(kv, "meta.kv", err);
  EXPECT_TRUE(model) << err;
  auto m = ir::parseModule(sm, sm.addBuffer("t.strata", text), diag);
  std::string out;
  if (m && ir::verifyModule(*m, diag)) {
    passes::PassManager pm;
    pm.add(passes::createPass("expand"));
    passes::PassContext ctx{diag};
    ctx.model = model.get();
    ctx.maxExpandedOps = maxOps;
    if (pm.run(m, ctx))
      out = ir::printModule(*m);
  }
  if (diagsOut)
    *diagsOut = os.str();
  return out;
}

const char *kLayers = R"(model m {
  let L = meta("block_count")
  let D = meta("embedding_length")
  func @main(%x: f32[T, D]) -> f32[T, D] {
    %h = repeat l in 0..L carry(%c = %x) {
      %y = if l % 2 == 1 {
        %n = rms_norm(%c, weight("blk.{l}.norm.weight")) {eps = 0.00001}
        yield %n
      } else {
        %s = silu(%c)
        yield %s
      }
      yield %y
    }
    return %h
  }
}
)";

const char *kMeta = R"(general.architecture = "toy"
toy.block_count = 3
toy.embedding_length = 32
tensor blk.1.norm.weight f32 [32]
)";

} // namespace

TEST(Expand, UnrollsRepeatResolvesIfBindsWeights) {
  std::string diags;
  std::string out = expand(kLayers, kMeta, &diags);
  ASSERT_FALSE(out.empty()) << diags;
  EXPECT_NE(out.find("%s = silu(%x) : f32[T, 32]"), std::string::npos) << out;
  EXPECT_NE(out.find("weight<f32>(\"blk.1.norm.weight\", [32])"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("%s.1 = silu(%n)"), std::string::npos) << out;
  EXPECT_EQ(out.find("repeat"), std::string::npos);
  EXPECT_EQ(out.find("blk.0."), std::string::npos);
}

TEST(Expand, MissingMetaKeyIsADiagnostic) {
  std::string diags;
  std::string out = expand(kLayers, "general.architecture = \"toy\"\n", &diags);
  EXPECT_TRUE(out.empty());
  EXPECT_NE(diags.find("missing metadata key 'toy.block_count'"),
            std::string::npos)
      << diags;
}

TEST(Expand, OpBudgetStopsRunawayRepeats) {
  std::string text = R"(model m {
  func @main(%x: f32[4]) -> f32[4] {
    %h = repeat i in 0..1000000 carry(%c = %x) {
      %n = neg(%c)
      yield %n
    }
    return %h
  }
}
)";
  std::string diags;
  std::string out =
      expand(text, "general.architecture = \"toy\"\n", &diags, 1000);
  EXPECT_TRUE(out.empty());
  EXPECT_NE(diags.find("more than 1000 ops"), std::string::npos) << diags;
}

TEST(Expand, OutputIsAFixedPoint) {
  std::string once = expand(kLayers, kMeta);
  ASSERT_FALSE(once.empty());
  EXPECT_EQ(expand(once, kMeta), once);
}

TEST(Expand, ArrayMetaIndexingAndU64ListsBecomeInts) {
  std::string text = R"(model m {
  let N = meta("ple.ngram_size")
  let HPN = meta("ple.heads_per_ngram")
  func @main(%tok: i32[T], %x: f32[T, 8]) -> i32[T, (N - 1) * HPN] {
    %h = repeat l in 0..3 carry(%c = %x) {
      %y = if meta("attention.compress_ratios")[l] > 0 {
        %b = block_mean(%c) {block = meta("attention.compress_ratios")[l]} : f32[T / meta("attention.compress_ratios")[l], 8]
        %n = neg(%c)
        yield %n
      } else {
        yield %c
      }
      yield %y
    }
    %ids = ngram_hash(%tok) {n = N, heads = HPN, eos = meta("ple.eos_token_id"), mults = meta("ple.layer_multipliers"), sizes = meta("ple.head_vocab_sizes"), offsets = meta("ple.head_offsets")}
    return %ids
  }
}
)";
  const char *meta = R"(general.architecture = "toy"
toy.attention.compress_ratios = [0, 0, 4]
toy.ple.ngram_size = 3
toy.ple.heads_per_ngram = 2
toy.ple.eos_token_id = 255
toy.ple.layer_multipliers = [4295158889762567, 35454616657218897, 9223372036854775807]
toy.ple.head_vocab_sizes = [503, 509, 521, 523]
toy.ple.head_offsets = [0, 503, 1012, 1533]
)";
  std::string diags;
  std::string out = expand(text, meta, &diags);
  ASSERT_FALSE(out.empty()) << diags;
  // Only layer 2 has a compress ratio; its block_mean is planned as T / 4.
  EXPECT_NE(out.find("block_mean(%x) {block = 4} : f32[(T / 4), 8]"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("block_mean(%x) {block = 0}"), std::string::npos) << out;
  // u64 arrays (values below 2^63) become ints lists.
  EXPECT_NE(out.find("mults = [4295158889762567, 35454616657218897, "
                     "9223372036854775807]"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("sizes = [503, 509, 521, 523], offsets = [0, 503, 1012, "
                     "1533]"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("eos = 255"), std::string::npos) << out;
  EXPECT_NE(out.find(": i32[T, 4]"), std::string::npos) << out;
  EXPECT_EQ(expand(out, meta), out);
}

TEST(Expand, NonFiniteMetaFloatIsADiagnostic) {
  // A NaN or inf epsilon used to pass expand and surface only as "internal
  // error, the plan does not validate" in strata-compile.
  const char *text = R"(model m {
  let D = meta("embedding_length")
  let eps = meta("attention.layer_norm_rms_epsilon")
  let s = meta("rope.scales", [1.0])
  func @main(%x: f32[T, D]) -> f32[T, D] {
    %n = rms_norm(%x, weight("norm.weight")) {eps = eps * s[0]}
    return %n
  }
}
)";
  using format::MetaValue;
  auto run = [&](MetaValue eps, MetaValue scales) {
    format::ModelInfo model;
    model.source = "m.gguf";
    model.addMeta("general.architecture", MetaValue::makeString("toy"));
    model.addMeta("toy.embedding_length", MetaValue::makeUInt(32));
    model.addMeta("toy.attention.layer_norm_rms_epsilon", std::move(eps));
    model.addMeta("rope.scales", std::move(scales));
    format::TensorInfo w;
    w.name = "norm.weight";
    w.dims = {32};
    model.addTensor(w);
    ir::SourceMgr sm;
    std::ostringstream os;
    ir::DiagnosticEngine diag(sm, os);
    auto m = ir::parseModule(sm, sm.addBuffer("t.strata", text), diag);
    EXPECT_TRUE(m && ir::verifyModule(*m, diag)) << os.str();
    passes::PassManager pm;
    pm.add(passes::createPass("expand"));
    passes::PassContext ctx{diag};
    ctx.model = &model;
    bool ok = pm.run(m, ctx);
    return std::make_pair(ok, os.str());
  };
  auto one = MetaValue::makeArray(format::GgufValueType::Float32,
                                  {MetaValue::makeFloat(1.0)});
  auto [ok, diags] = run(MetaValue::makeFloat(1e-6), one);
  EXPECT_TRUE(ok) << diags;
  std::tie(ok, diags) = run(MetaValue::makeFloat(std::nan("")), one);
  EXPECT_FALSE(ok);
  EXPECT_NE(diags.find("t.strata:3:13: error: metadata key "
                       "'toy.attention.layer_norm_rms_epsilon' in m.gguf is "
                       "not a finite number (nan)"),
            std::string::npos)
      << diags;
  std::tie(ok, diags) =
      run(MetaValue::makeFloat(-INFINITY, format::GgufValueType::Float64), one);
  EXPECT_NE(diags.find("is not a finite number (-inf)"), std::string::npos)
      << diags;
  // Inside an array, found without the architecture prefix.
  std::tie(ok, diags) =
      run(MetaValue::makeFloat(1e-6),
          MetaValue::makeArray(
              format::GgufValueType::Float32,
              {MetaValue::makeFloat(1), MetaValue::makeFloat(INFINITY)}));
  EXPECT_FALSE(ok);
  EXPECT_NE(diags.find("metadata key 'rope.scales' in m.gguf is not a finite "
                       "number ([1, inf])"),
            std::string::npos)
      << diags;
}
