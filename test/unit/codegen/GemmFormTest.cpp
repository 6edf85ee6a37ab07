//===- GemmFormTest.cpp - the GEMM chains' forms by rows ------------------===//
//
// selectGemm alone (which form runs at T = 1, 64, 600 and 16,384: decode,
// row block, tile, TMA), then the emitted kernels of plans against the
// selection on both GPU targets: the own code and each alternate's first
// row are the form's. The forms' numbers are checked on the H200 by
// --check (test/device/diffsuite.py, test/device/state_run.sh).
//
//===----------------------------------------------------------------------===//
#include "codegen/gemm/GemmForm.h"
#include "codegen/KernelEmitter.h"
#include "codegen/Options.h"
#include "runtime/format/Plan.h"

#include <gtest/gtest.h>

#include <algorithm>

using namespace strata;
using codegen::GemmForm;
using Kind = GemmForm::Kind;

namespace {

/// x [T, K] -> matmul(x, w [N, K] of \p type) -> y [T, N] in bf16, a plan
/// of \p maxTokens rows; with \p state one cache state (a generation plan:
/// the decode forms).
format::Plan matmulPlan(const std::string &target, format::GgmlType type,
                        int64_t n, int64_t k, int64_t maxTokens, bool state) {
  format::Plan p;
  p.model = p.arch = "m";
  p.target = target;
  p.maxTokens = maxTokens;
  const format::PlanDim t{1, 0, 1};
  using D = format::PlanDType;
  const uint64_t r = static_cast<uint64_t>(maxTokens), xB = r * k * 2,
                 yB = r * n * 2;
  p.buffers.push_back({"x", D::BF16, {t, {0, k, 1}}, 0, xB});
  p.buffers.push_back({"y", D::BF16, {t, {0, n, 1}}, xB, yB});
  p.arenaBytes = xB + yB;
  p.weights.push_back(
      {"w", type, {static_cast<uint64_t>(k), static_cast<uint64_t>(n)}});
  if (state) {
    p.version = 3;
    p.states.push_back({"blk.0.k_cache", D::F32, {1, 32, 2, 16}, 4096});
  }
  format::PlanKernel kn;
  kn.recipe = format::Recipe::Matmul;
  kn.inputs = {{false, 0}, {true, 0}};
  kn.outputs = {1};
  kn.variant = target == "sm_90" ? "mma_bf16_m64" : "wmma_f16_m64";
  p.kernels.push_back(kn);
  p.inputs = {0};
  p.outputs = {1};
  return p;
}

/// The form each alternate of \p k runs, by its suffix; the own code is
/// \p own.
Kind formOfSuffix(const std::string &suffix) {
  if (suffix == "_big")
    return Kind::Tma;
  if (suffix == "_dq")
    return Kind::Dequant;
  if (suffix == "_tile")
    return Kind::Tile;
  if (suffix == "_rowblk")
    return Kind::RowBlock;
  return Kind::Decode; // the decode forms' own alternates (rows from 2)
}

/// The form a launch of \p tokens rows of \p k runs: the alternate with the
/// largest first row <= tokens, else the own code \p own.
Kind emittedAt(const codegen::EmittedKernel &k, Kind own, int64_t tokens) {
  int64_t best = 0;
  Kind at = own;
  for (const codegen::EmittedKernel &a : k.alternates)
    if (a.minTokens <= tokens && a.minTokens > best)
      best = a.minTokens, at = formOfSuffix(a.suffix);
  return at;
}

codegen::GemmProblem quantTrunk(const std::string &target, bool state,
                                bool tma) {
  codegen::GemmProblem p;
  p.target = target;
  p.state = state;
  p.maxTokens = 16384;
  codegen::GemmChainShape c;
  c.n = 4096;
  c.k = 2560;
  c.quant = true;
  c.blockSize = 256;
  c.bm = 64;
  c.bn = 64;
  c.tma = tma;
  c.dequant = true;
  p.chains.push_back(c);
  return p;
}

} // namespace

TEST(GemmForm, QuantisedTrunkByTokens) {
  format::Plan plan; // defaults: gemm-decode-rows 16
  // Prefill plan on gfx1151: the tiles, from 2,112 rows dequantised once
  // (dequantOnceFrom: the H200's 512 rows x 33 tiles / 8, its 212 GB/s
  // make the round trip through memory dear).
  GemmForm g = codegen::selectGemm(quantTrunk("gfx1151", false, false), plan);
  EXPECT_EQ(g.dequantFrom, 2112);
  EXPECT_EQ(g.at(1), Kind::Tile);
  EXPECT_EQ(g.at(64), Kind::Tile);
  EXPECT_EQ(g.at(600), Kind::Tile);
  EXPECT_EQ(g.at(16384), Kind::Dequant);
  // gemm-dequant-once=off: the tiles at every T.
  format::Plan off;
  off.options[codegen::optionKey(codegen::Opt::GemmDequantOnce)] = 1;
  g = codegen::selectGemm(quantTrunk("gfx1151", false, false), off);
  for (int64_t t : {1, 64, 600, 16384})
    EXPECT_EQ(g.at(t), Kind::Tile) << t;
  // A generation plan: the decode forms up to 16 rows, then the tiles,
  // and from 2,112 rows the dequantise-once tiles.
  g = codegen::selectGemm(quantTrunk("gfx1151", true, false), plan);
  EXPECT_EQ(g.decodeRows, 16);
  EXPECT_EQ(g.at(1), Kind::Decode);
  EXPECT_EQ(g.at(16), Kind::Decode);
  EXPECT_EQ(g.at(17), Kind::Tile);
  EXPECT_EQ(g.at(64), Kind::Tile);
  EXPECT_EQ(g.at(600), Kind::Tile);
  EXPECT_EQ(g.at(16384), Kind::Dequant);
  // sm_90 where the TMA tile takes the chain: from 512 rows.
  g = codegen::selectGemm(quantTrunk("sm_90", true, true), plan);
  EXPECT_EQ(g.at(1), Kind::Decode);
  EXPECT_EQ(g.at(64), Kind::Tile);
  EXPECT_EQ(g.at(600), Kind::Tma);
  EXPECT_EQ(g.at(16384), Kind::Tma);
  // portable-forms: sm_90 runs gfx1151's form instead of the TMA tile.
  format::Plan portable;
  portable.options[codegen::optionKey(codegen::Opt::PortableForms)] = 1;
  g = codegen::selectGemm(quantTrunk("sm_90", true, true), portable);
  EXPECT_EQ(g.tmaFrom, 0);
  EXPECT_EQ(g.dequantFrom, 512);
  EXPECT_EQ(g.at(600), Kind::Dequant);
  EXPECT_EQ(g.at(16384), Kind::Dequant);
  // A plan of 256 rows never reaches the TMA tile.
  codegen::GemmProblem shortPlan = quantTrunk("sm_90", true, true);
  shortPlan.maxTokens = 256;
  EXPECT_EQ(codegen::selectGemm(shortPlan, plan).tmaFrom, 0);
}

TEST(GemmForm, F32WeightsTakeRowBlocksUntilTheTilesFill) {
  // An f32-weight GEMM (K 2560, N 256, 128 x 128 tiles) on the H200: the
  // row blocks until the tiles fill the target (128 rows x ceil(132 units
  // / 2 column tiles) = 8,448) or, first here, until the row blocks' work
  // passes a wave of tiles (850M / (256 x 2560), floored: 1,296 rows).
  format::Plan plan;
  codegen::GemmProblem p;
  p.target = "sm_90";
  p.maxTokens = 16384;
  codegen::GemmChainShape c;
  c.n = 256;
  c.k = 2560;
  c.f32Weights = true;
  c.bm = 128;
  c.bn = 128;
  p.chains.push_back(c);
  GemmForm g = codegen::selectGemm(p, plan);
  EXPECT_EQ(g.decodeRows, 0);
  EXPECT_EQ(g.rowBlockFrom, 1);
  EXPECT_EQ(codegen::f32TileRows(p, plan), 1296);
  EXPECT_EQ(g.tileFrom, 1296);
  EXPECT_EQ(g.at(1), Kind::RowBlock);
  EXPECT_EQ(g.at(64), Kind::RowBlock);
  EXPECT_EQ(g.at(16384), Kind::Tile);
  // With state: decode to 16 rows, the row blocks from 17.
  p.state = true;
  g = codegen::selectGemm(p, plan);
  EXPECT_EQ(g.at(1), Kind::Decode);
  EXPECT_EQ(g.rowBlockFrom, 17);
  EXPECT_EQ(g.at(17), Kind::RowBlock);
  // gemm-f32-rows=off: the tiles at once.
  plan.options[codegen::optionKey(codegen::Opt::GemmF32Rows)] = 1;
  EXPECT_EQ(codegen::selectGemm(p, plan).rowBlockFrom, 0);
}

TEST(GemmForm, HalfWeightsTakeRowBlocksUntilTheirTilesPay) {
  // K2 of the full Qwen4-Exp: the down projection (f16, N 320, K 10,240,
  // 64 x 64 tiles) and the injection logits (f32, N 4: skinny) in a plan
  // with state. Its 5 column tiles fill the H200 from 64 x 27 = 1,728 rows,
  // but the row blocks pass a wave of tiles earlier: 64,000 / 320 = 200.
  format::Plan plan;
  codegen::GemmProblem p;
  p.target = "sm_90";
  p.maxTokens = 16384;
  p.state = true;
  codegen::GemmChainShape down;
  down.n = 320;
  down.k = 10240;
  down.bm = 64;
  down.bn = 64;
  codegen::GemmChainShape inject;
  inject.n = 4;
  inject.k = 10240;
  inject.f32Weights = true;
  inject.skinny = true;
  p.chains = {down, inject};
  EXPECT_EQ(codegen::f32TileRows(p, plan), 200);
  GemmForm g = codegen::selectGemm(p, plan);
  EXPECT_EQ(g.at(1), Kind::Decode);
  EXPECT_EQ(g.at(64), Kind::RowBlock);
  EXPECT_EQ(g.at(199), Kind::RowBlock);
  EXPECT_EQ(g.at(200), Kind::Tile);
  // A quantised chain keeps the tiles; so does a stream mean (K3).
  codegen::GemmProblem q = p;
  q.chains[0].quant = true;
  q.chains[0].blockSize = 256;
  EXPECT_EQ(codegen::f32TileRows(q, plan), 0);
  q = p;
  q.chains[0].streamMean = true;
  EXPECT_EQ(codegen::f32TileRows(q, plan), 0);
  // A non-skinny f32 chain beside a 16-bit one: neither rule's tiles.
  q = p;
  q.chains[1].n = 48;
  q.chains[1].skinny = false;
  q.chains[1].bm = 64;
  q.chains[1].bn = 64;
  EXPECT_EQ(codegen::f32TileRows(q, plan), 0);
  // gemm-f32-rows=off: the tiles after the decode forms.
  plan.options[codegen::optionKey(codegen::Opt::GemmF32Rows)] = 1;
  EXPECT_EQ(codegen::selectGemm(p, plan).rowBlockFrom, 0);
}

TEST(GemmForm, DecodeNeedsOneWeightAndWholePieces) {
  format::Plan plan;
  codegen::GemmProblem p = quantTrunk("gfx1151", true, false);
  p.chains[0].weights = 2; // gate and up side by side
  EXPECT_EQ(codegen::selectGemm(p, plan).decodeRows, 0);
  p = quantTrunk("gfx1151", true, false);
  p.chains[0].k = 2564; // K not of whole 8-element pieces
  EXPECT_EQ(codegen::selectGemm(p, plan).decodeRows, 0);
  p = quantTrunk("gfx1151", true, false);
  p.chains[0].mPer = 8; // 8 rows x 8 accumulator rows > 32 lanes
  EXPECT_EQ(codegen::selectGemm(p, plan).decodeRows, 0);
  plan.options[codegen::optionKey(codegen::Opt::GemmDecodeRows)] = 4;
  EXPECT_EQ(codegen::selectGemm(p, plan).decodeRows, 4);
}

TEST(GemmForm, EmittedKernelsRunTheSelectedForms) {
  // A Q8_0 trunk GEMM (N 512, K 512) in a generation plan of 4,096 rows:
  // decode to 8 rows, then the tiles, and from 512 rows sm_90's TMA tile
  // (its dequantise-once tiles under portable-forms), from 2,112 rows
  // gfx1151's dequantise-once tiles.
  for (const char *target : {"gfx1151", "sm_90", "sm_90 portable"}) {
    SCOPED_TRACE(target);
    const bool portable = std::string(target) == "sm_90 portable";
    const std::string t = portable ? "sm_90" : target;
    format::Plan p =
        matmulPlan(t, format::GgmlType::Q8_0, 512, 512, 4096, true);
    if (portable)
      p.options[codegen::optionKey(codegen::Opt::PortableForms)] = 1;
    codegen::EmittedKernel k;
    std::string error;
    ASSERT_TRUE(codegen::emitKernel(p, 0, t, k, error)) << error;
    const Kind longRuns = t == "sm_90" && !portable ? Kind::Tma : Kind::Dequant;
    const int64_t from = t == "gfx1151" ? 2112 : 512;
    for (int64_t rows : {1, 64, 600, 1024, 2112, 4096}) {
      Kind want = rows <= 8 ? Kind::Decode : Kind::Tile;
      if (rows >= from)
        want = longRuns;
      EXPECT_EQ(emittedAt(k, Kind::Decode, rows), want) << rows;
    }
    if (longRuns != Kind::Dequant)
      continue;
    // The dequantise-once alternate: a pre-launch of conversion blocks,
    // the workspace of W as 16-bit values (512 x 512 x 2 bytes), the tile
    // reading W from it.
    auto dq = std::find_if(k.alternates.begin(), k.alternates.end(),
                           [](const auto &a) { return a.suffix == "_dq"; });
    ASSERT_NE(dq, k.alternates.end());
    EXPECT_EQ(dq->minTokens, from);
    ASSERT_TRUE(dq->pre.has_value());
    EXPECT_EQ(dq->workspace.constant, 512 * 512 * 2);
    EXPECT_NE(k.body.find(t == "gfx1151" ? "((const f16 *)(ws + 0L))"
                                         : "((const bf16 *)(ws + 0L))"),
              std::string::npos);
  }
  // A prefill plan of 64 rows: the tiles as the own code, no alternate.
  format::Plan p =
      matmulPlan("sm_90", format::GgmlType::Q8_0, 512, 512, 64, false);
  codegen::EmittedKernel k;
  std::string error;
  ASSERT_TRUE(codegen::emitKernel(p, 0, "sm_90", k, error)) << error;
  EXPECT_TRUE(k.alternates.empty());
}

TEST(GemmForm, DecodePrefetchOptionOnlyOnSm90) {
  // gemm-decode-prefetch: the decode forms ask L2 for their weight rows
  // before A's quantisation (sm_90's prefetch.global.L2); gfx1151 has no
  // such hint and prints none (on is the default); off prints none
  // anywhere.
  for (const char *target : {"sm_90", "gfx1151"})
    for (int on : {0, 1}) {
      SCOPED_TRACE(std::string(target) + (on ? " on" : " off"));
      format::Plan p =
          matmulPlan(target, format::GgmlType::Q8_0, 512, 512, 64, true);
      p.options[codegen::optionKey(codegen::Opt::GemmDecodePrefetch)] = on;
      codegen::EmittedKernel k;
      std::string error;
      ASSERT_TRUE(codegen::emitKernel(p, 0, target, k, error)) << error;
      const bool want = on && std::string(target) == "sm_90";
      EXPECT_EQ(k.body.find("prefetch.global.L2") != std::string::npos, want);
    }
}
