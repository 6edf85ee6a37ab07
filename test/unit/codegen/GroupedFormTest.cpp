//===- GroupedFormTest.cpp - the grouped expert GEMMs' choice of form -----===//
//
// selectGrouped alone: which form a launch of T = 1, 64, 600 and 16,384
// rows takes, on both targets, for the full Qwen4-Exp's experts (512
// experts, top 10, hidden 2,560, expert width 640; IQ3_S gate/up, IQ4_NL
// down), in plans with state and prefill-only. (The emitter prints what it
// chose: the sources are byte-identical to the build before the
// extraction, test/codegen/identity.py --full; the forms' numbers are
// checked on the H200 by --check.)
//
//===----------------------------------------------------------------------===//
#include "codegen/grouped/GroupedForm.h"
#include "codegen/Options.h"
#include "runtime/format/Plan.h"

#include <gtest/gtest.h>

using namespace strata;
using codegen::GroupedForm;
using Kind = GroupedForm::Kind;

namespace {

codegen::GroupedProblem experts(const std::string &target, bool swiglu,
                                bool state) {
  codegen::GroupedProblem p;
  p.target = target;
  p.experts = 512;
  p.slotsPerToken = 10;
  p.swiglu = swiglu;
  p.n = swiglu ? 640 : 2560;
  p.k = swiglu ? 2560 : 640;
  p.mma = true;
  p.aBf16 = true;
  p.wQuant = true;
  p.blockSize = swiglu ? 256 : 32; // IQ3_S, IQ4_NL
  p.state = state;
  p.maxTokens = 16384;
  return p;
}

} // namespace

TEST(GroupedForm, FormsByTokensOnEachTarget) {
  format::Plan plan;
  for (bool swiglu : {true, false}) {
    SCOPED_TRACE(swiglu ? "gate/up" : "down");
    // sm_90, a plan with state: the decode forms up to 16 rows, the tiles,
    // then the TMA form from the rows where each expert gets 192 slots
    // (512 x 192 / 10).
    GroupedForm f =
        codegen::selectGrouped(experts("sm_90", swiglu, true), plan);
    EXPECT_EQ(f.decodeRows, 16);
    EXPECT_EQ(f.tileFrom, 17);
    EXPECT_EQ(f.tmaFrom, 9831);
    EXPECT_EQ(f.at(1), Kind::Decode);
    EXPECT_EQ(f.at(64), Kind::Tile);
    EXPECT_EQ(f.at(600), Kind::Tile);
    EXPECT_EQ(f.at(16384), Kind::Tma);
    // The TMA tile: gate and up 128 columns each (640 = 5 x 128), down
    // the widest tile that covers 2,560 (256).
    EXPECT_EQ(f.bn, 256);
    EXPECT_EQ(f.nw, swiglu ? 5 * 256 : 2560);
    EXPECT_GE(f.stages, 2);
    // Prefill-only: the tiles from one row.
    GroupedForm pre =
        codegen::selectGrouped(experts("sm_90", swiglu, false), plan);
    EXPECT_EQ(pre.decodeRows, 0);
    EXPECT_EQ(pre.at(1), Kind::Tile);
    EXPECT_EQ(pre.at(16384), Kind::Tma);
    // gfx1151: no TMA form; the decode forms and tiles as on sm_90. The
    // dequantise-once tiles (every expert decoded once by a pre-launch,
    // the plain tile over 16-bit weights) pay from 792 rows an expert
    // there (dequantOnceFrom), 40,551 rows of T: past this plan.
    GroupedForm amd =
        codegen::selectGrouped(experts("gfx1151", swiglu, true), plan);
    EXPECT_EQ(amd.tmaFrom, 0);
    EXPECT_EQ(amd.dequantFrom, 0);
    EXPECT_EQ(amd.at(1), Kind::Decode);
    EXPECT_EQ(amd.at(64), Kind::Tile);
    EXPECT_EQ(amd.at(600), Kind::Tile);
    EXPECT_EQ(amd.at(16384), Kind::Tile);
    codegen::GroupedProblem longer = experts("gfx1151", swiglu, true);
    longer.maxTokens = 65536;
    EXPECT_EQ(codegen::selectGrouped(longer, plan).dequantFrom, 40551);
    // sm_90 under portable-forms: gfx1151's forms, from the H200's rows
    // (192 an expert, as the TMA form's).
    format::Plan portable;
    portable.options[codegen::optionKey(codegen::Opt::PortableForms)] = 1;
    GroupedForm port =
        codegen::selectGrouped(experts("sm_90", swiglu, true), portable);
    EXPECT_EQ(port.tmaFrom, 0);
    EXPECT_EQ(port.dequantFrom, 9831);
    EXPECT_EQ(port.at(16384), Kind::Dequant);
    // gemm-dequant-once=off: the tiles.
    format::Plan off;
    off.options[codegen::optionKey(codegen::Opt::GemmDequantOnce)] = 1;
    EXPECT_EQ(codegen::selectGrouped(longer, off).at(65536), Kind::Tile);
  }
}

TEST(GroupedForm, OptionsAndShapesChangeTheForms) {
  std::string error;
  // The defaults: the experts' decode form to 16 rows (in passes of two
  // rows, grouped-decode-pass), their tiles from 17 (grouped-decode-rows
  // apart from the GEMM chains' rows; H100, 12-layer Qwen4-Exp: see the
  // option's help); 8 as before.
  format::Plan defaults;
  GroupedForm g =
      codegen::selectGrouped(experts("sm_90", true, true), defaults);
  EXPECT_EQ(g.decodeRows, 16);
  EXPECT_EQ(g.at(16), Kind::Decode);
  EXPECT_EQ(g.at(17), Kind::Tile);
  format::Plan eight;
  ASSERT_TRUE(codegen::setOption(eight, "grouped-decode-rows=8", error));
  GroupedForm e8 = codegen::selectGrouped(experts("sm_90", true, true), eight);
  EXPECT_EQ(e8.at(8), Kind::Decode);
  EXPECT_EQ(e8.at(9), Kind::Tile);
  // -1: follow gemm-decode-rows; 0: tiles from 1 row.
  format::Plan decode16;
  ASSERT_TRUE(codegen::setOption(decode16, "grouped-decode-rows=-1", error));
  GroupedForm f =
      codegen::selectGrouped(experts("sm_90", true, true), decode16);
  EXPECT_EQ(f.at(16), Kind::Decode);
  EXPECT_EQ(f.at(17), Kind::Tile);
  format::Plan own = decode16;
  ASSERT_TRUE(codegen::setOption(own, "grouped-decode-rows=0", error));
  EXPECT_EQ(codegen::selectGrouped(experts("sm_90", true, true), own).at(1),
            Kind::Tile);
  EXPECT_FALSE(codegen::setOption(own, "grouped-decode-rows=-2", error));
  format::Plan noTma;
  ASSERT_TRUE(codegen::setOption(noTma, "gemm-tma-grouped=0", error));
  EXPECT_EQ(
      codegen::selectGrouped(experts("sm_90", true, true), noTma).at(16384),
      Kind::Tile);
  format::Plan pair;
  ASSERT_TRUE(codegen::setOption(pair, "gemm-tma-pair=1", error));
  GroupedForm paired =
      codegen::selectGrouped(experts("sm_90", true, true), pair);
  EXPECT_EQ(paired.blocks, 2);
  EXPECT_EQ(paired.bn, 128); // gate and up 64 columns each
  // A plan whose longest run is below the TMA form's start has none; f32
  // tiles (no matrix units) and mixed weight types neither.
  format::Plan plan;
  codegen::GroupedProblem short_ = experts("sm_90", true, true);
  short_.maxTokens = 4096;
  EXPECT_EQ(codegen::selectGrouped(short_, plan).tmaFrom, 0);
  codegen::GroupedProblem fma = experts("sm_90", true, true);
  fma.mma = false;
  EXPECT_EQ(codegen::selectGrouped(fma, plan).tmaFrom, 0);
  codegen::GroupedProblem mixed = experts("sm_90", true, true);
  mixed.sameTypes = false;
  EXPECT_EQ(codegen::selectGrouped(mixed, plan).tmaFrom, 0);
  // K not a multiple of 8: no decode form (its lanes take 8 values).
  codegen::GroupedProblem odd = experts("gfx1151", false, true);
  odd.k = 644;
  odd.wQuant = false;
  EXPECT_EQ(codegen::selectGrouped(odd, plan).decodeRows, 0);
}
