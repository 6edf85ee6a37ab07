//===- OptionsTest.cpp - code generation options (Options.def) ------------===//
#include "codegen/Options.h"

#include "runtime/format/Plan.h"

#include <gtest/gtest.h>

#include <set>

using namespace strata;
using codegen::Opt;

TEST(CodegenOptions, EveryFormerEnvironmentKnobIsAnOption) {
  // The fifteen STRATA_GEMM_* / STRATA_ATTN_* variables the generator used
  // to read, each now one row of Options.def, and the options added since.
  const std::set<std::string> want = {"gemm-decode-rows",
                                      "gemm-decode-pieces",
                                      "gemm-decode-cols",
                                      "gemm-decode-stage",
                                      "gemm-tma",
                                      "gemm-tma-quant",
                                      "gemm-tma-grouped",
                                      "gemm-tma-pair",
                                      "gemm-tma-persist",
                                      "gemm-staged",
                                      "gemm-core",
                                      "attn-sparse",
                                      "attn-compact",
                                      "attn-ws",
                                      "attn-pingpong",
                                      "attn-expfirst",
                                      "attn-trace",
                                      "attn-rolled",
                                      "attn-smx",
                                      "gemm-f32-rows",
                                      "gemm-decode-int8",
                                      "gemm-decode-blocks",
                                      "gemm-decode-one-blocks",
                                      "moe-route-block",
                                      "moe-route-prefetch",
                                      "gemm-dequant-once",
                                      "portable-forms",
                                      "gemm-decode-prefetch",
                                      "gemm-decode-prefetch-early",
                                      "gemm-decode-prefetch-ahead",
                                      "gemm-decode-mma",
                                      "gemm-decode-wide",
                                      "grouped-decode-grid",
                                      "grouped-decode-search",
                                      "grouped-decode-pass",
                                      "grouped-decode-wide",
                                      "grouped-decode-blocks",
                                      "grouped-decode-rows",
                                      "row-loads",
                                      "gemm-decode-grid",
                                      "moe-sort-one",
                                      "conv-by-slot",
                                      "attn-decode-prefetch",
                                      "attn-decode-keys",
                                      "row-chains",
                                      "row-norm-block",
                                      "row-scatter-norm",
                                      "row-rope-table",
                                      "attn-decode-chunk"};
  std::set<std::string> have;
  for (const codegen::OptionInfo &o : codegen::allOptions()) {
    have.insert(o.name);
    EXPECT_GE(o.dflt, o.min) << o.name;
    EXPECT_LE(o.dflt, o.max) << o.name;
    EXPECT_NE(std::string(o.help), "") << o.name;
  }
  EXPECT_EQ(have, want);
  std::string help = codegen::optionsHelp();
  for (const std::string &n : want)
    EXPECT_NE(help.find("  " + n + " "), std::string::npos) << n;
}

TEST(CodegenOptions, ValuesAreParsedRecordedAndReadBack) {
  format::Plan p;
  std::string error;
  // Defaults are not recorded: a plan compiled without options is
  // byte-identical to one compiled before options existed.
  EXPECT_EQ(codegen::option(p, Opt::GemmTma), 1);
  EXPECT_EQ(codegen::option(p, Opt::AttnSmx), 7);
  ASSERT_TRUE(codegen::setOption(p, "gemm-tma=1", error)) << error;
  EXPECT_TRUE(p.options.empty());
  EXPECT_EQ(codegen::optionsSummary(p), "");
  // Bool, Int and Enum values.
  ASSERT_TRUE(codegen::setOption(p, "gemm-tma=off", error)) << error;
  ASSERT_TRUE(codegen::setOption(p, "attn-smx=3", error)) << error;
  ASSERT_TRUE(codegen::setOption(p, "gemm-core=mma", error)) << error;
  ASSERT_TRUE(codegen::setOption(p, "attn-compact=off", error)) << error;
  EXPECT_EQ(codegen::option(p, Opt::GemmTma), 0);
  EXPECT_EQ(codegen::option(p, Opt::AttnSmx), 3);
  EXPECT_EQ(codegen::option(p, Opt::GemmCore), 1);
  EXPECT_EQ(codegen::option(p, Opt::AttnCompact), 2);
  EXPECT_EQ(p.options.at("codegen.gemm-tma"), 0);
  EXPECT_EQ(p.options.at("codegen.gemm-core"), 1);
  EXPECT_EQ(codegen::optionsSummary(p),
            "gemm-tma=0, gemm-core=mma, attn-compact=off, attn-smx=3");
  // Back to the default: no longer recorded.
  ASSERT_TRUE(codegen::setOption(p, "gemm-core=wgmma", error)) << error;
  EXPECT_EQ(p.options.count("codegen.gemm-core"), 0u);
}

TEST(CodegenOptions, MistakesNameTheOptionAndWhatIsAllowed) {
  format::Plan p;
  std::string error;
  struct Case {
    const char *text, *message;
  };
  const Case cases[] = {
      {"gemm-tmaa=1", "unknown code generation option 'gemm-tmaa' "
                      "(--codegen-opt help lists the options)"},
      {"gemm-tma", "--codegen-opt needs NAME=VALUE, got 'gemm-tma'"},
      {"=1", "--codegen-opt needs NAME=VALUE, got '=1'"},
      {"gemm-tma=2", "--codegen-opt gemm-tma: '2' is not 0 or 1"},
      {"attn-smx=8", "--codegen-opt attn-smx: '8' is not an integer in 0..7"},
      {"attn-smx=-1", "--codegen-opt attn-smx: '-1' is not an integer in "
                      "0..7"},
      {"attn-smx=3x", "--codegen-opt attn-smx: '3x' is not an integer"},
      {"gemm-core=tensor", "--codegen-opt gemm-core: 'tensor' is not one of "
                           "wgmma|mma"},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.text);
    EXPECT_FALSE(codegen::setOption(p, c.text, error));
    EXPECT_EQ(error.rfind(c.message, 0), 0u) << error;
  }
  EXPECT_TRUE(p.options.empty());
}
