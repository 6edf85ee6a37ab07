//===- GemvFormTest.cpp - the GEMM chains' decode form --------------------===//
//
// Plans with state run GEMM chains of a few rows (decode steps, the last
// chunk of a prompt) as warp dot products: the kernel's own code is the
// decode form over a grid of every output column, and the tiles are an
// alternate from the row after it. Prefill-only plans, and the option
// gemm-decode-rows=0, keep the tiles as their own code. (The decode form's
// numbers are checked on the H200 by test/device/state_run.sh.)
//
//===----------------------------------------------------------------------===//
#include "codegen/gemm/GemvForm.h"
#include "codegen/KernelEmitter.h"
#include "codegen/Options.h"
#include "runtime/format/Plan.h"

#include <gtest/gtest.h>

#include <tuple>

using namespace strata;

namespace {

/// x [T, K] (bf16) -> matmul(x, w [N, K] of \p type) -> y [T, N], with one
/// state (a generation plan) where \p withState.
format::Plan matmulPlan(const std::string &target, format::GgmlType type,
                        bool withState, int64_t n = 200, int64_t k = 256) {
  format::Plan p;
  p.model = p.arch = "m";
  p.target = target;
  p.maxTokens = 64;
  const format::PlanDim t{1, 0, 1};
  using D = format::PlanDType;
  const uint64_t xBytes = 64 * k * 2, yBytes = 64 * n * 2;
  p.buffers.push_back({"tok", D::I32, {t}, 0, 256});
  p.buffers.push_back({"x", D::BF16, {t, {0, k, 1}}, 256, xBytes});
  p.buffers.push_back({"y", D::BF16, {t, {0, n, 1}}, 256 + xBytes, yBytes});
  p.arenaBytes = 256 + xBytes + yBytes;
  p.weights.push_back({"w", type, {uint64_t(k), uint64_t(n)}});
  if (withState) {
    p.version = 3;
    p.states.push_back({"blk.0.k_cache", D::F32, {1, 32, 2, 16}, 4096});
  }
  format::PlanKernel kn;
  kn.recipe = format::Recipe::Matmul;
  kn.inputs = {{false, 1}, {true, 0}};
  kn.outputs = {2};
  p.kernels.push_back(kn);
  p.inputs = {0};
  p.outputs = {2};
  return p;
}

codegen::EmittedKernel emit(const format::Plan &p) {
  codegen::EmittedKernel out;
  std::string error;
  EXPECT_TRUE(codegen::emitKernel(p, 0, p.target, out, error)) << error;
  return out;
}

} // namespace

TEST(GemvForm, GenerationPlansDecodeFewRowsAndTileTheRest) {
  for (const char *target : {"sm_90", "gfx1151"})
    for (format::GgmlType type :
         {format::GgmlType::Q4_K, format::GgmlType::IQ3_S,
          format::GgmlType::Q8_0, format::GgmlType::F16,
          format::GgmlType::F32}) {
      SCOPED_TRACE(std::string(target) + " " +
                   format::ggmlTypeInfo(type).irName);
      codegen::EmittedKernel k = emit(matmulPlan(target, type, true));
      // Eight warps a block, a warp per column (K = 256: one slice; 200
      // columns too few to give a warp two): 25 blocks whatever T is.
      ASSERT_EQ(k.grid.size(), 3u);
      EXPECT_EQ(k.grid[0].coef, 0);
      EXPECT_EQ(k.grid[0].constant, 25);
      EXPECT_EQ(k.block[0], 256);
      // Its own code is the one-row form (a sequence's decode step); up to
      // 16 rows (the default gemm-decode-rows) the form of 8 accumulators
      // a column, from 2 rows, then from 9 (gemm-decode-mma) the
      // matrix-unit form on sm_90 (bf16 activations, weights not f32) or
      // else the form of 16 accumulators; the tiles from 17 rows on.
      EXPECT_NE(k.body.find("float acc0[1][1] = {};"), std::string::npos);
      ASSERT_EQ(k.alternates.size(), 3u);
      EXPECT_EQ(k.alternates[0].minTokens, 2);
      EXPECT_EQ(k.alternates[0].symbol, k.symbol + "_rows");
      EXPECT_EQ(k.alternates[0].grid[0].constant, 25);
      EXPECT_NE(k.body.find("float acc0[1][8] = {};"), std::string::npos);
      EXPECT_EQ(k.alternates[1].minTokens, 9);
      const bool mma =
          std::string(target) == "sm_90" && type != format::GgmlType::F32;
      EXPECT_EQ(k.alternates[1].symbol, k.symbol + (mma ? "_mma" : "_rows16"));
      EXPECT_EQ(k.body.find("float acc0[1][16] = {};") != std::string::npos,
                !mma);
      EXPECT_EQ(k.alternates[2].minTokens, 17);
      // f32 and 16-bit weights: the row-block form from there (the tiles
      // would fill the GPU only from thousands of rows, and pay from
      // 64,000 / 200 = 320 for F16: both past this plan's 64).
      const bool rows =
          type == format::GgmlType::F32 || type == format::GgmlType::F16;
      EXPECT_EQ(k.alternates[2].symbol,
                k.symbol + (rows ? "_rowblk" : "_tile"));
      EXPECT_NE(k.alternates[2].grid[0].coef + k.alternates[2].grid[1].coef, 0)
          << "the tiles' (or row blocks') grid follows T";
    }
}

TEST(GemvForm, ShapeFollowsColumnsAndK) {
  // Many short columns: two a warp (16,384 x 2 warps would leave the
  // H200's 8,448 warp slots less than half full). The grid uncapped
  // (gemm-decode-grid=0) shows the groups.
  std::string error;
  format::Plan widePlan =
      matmulPlan("sm_90", format::GgmlType::Q4_K, true, 16384, 256);
  ASSERT_TRUE(codegen::setOption(widePlan, "gemm-decode-grid=0", error))
      << error;
  codegen::EmittedKernel wide = emit(widePlan);
  EXPECT_EQ(wide.grid[0].constant, 16384 / (8 * 2));
  EXPECT_NE(wide.body.find("wrow0_1"), std::string::npos);
  EXPECT_EQ(wide.body.find("wrow0_2"), std::string::npos);
  EXPECT_EQ(wide.body.find("red[0][wave + j][lane]"), std::string::npos)
      << "one slice: no reduction over warps";
  // Few long columns: K split over all eight warps of a block, a column a
  // block, the slices summed through LDS.
  codegen::EmittedKernel tall =
      emit(matmulPlan("gfx1151", format::GgmlType::Q8_0, true, 256, 8192));
  EXPECT_EQ(tall.grid[0].constant, 256);
  EXPECT_NE(tall.body.find("red[0][wave + j][lane]"), std::string::npos);
  EXPECT_EQ(tall.body.find("wrow0_1"), std::string::npos);
  // The option caps the columns a warp takes.
  format::Plan one = widePlan;
  ASSERT_TRUE(codegen::setOption(one, "gemm-decode-cols=1", error)) << error;
  EXPECT_EQ(emit(one).grid[0].constant, 16384 / 8);
}

TEST(GemvForm, PrefillPlansAndTheOptionKeepTheTiles) {
  codegen::EmittedKernel prefill =
      emit(matmulPlan("sm_90", format::GgmlType::Q4_K, false));
  EXPECT_TRUE(prefill.alternates.empty());
  EXPECT_NE(prefill.grid[0].coef + prefill.grid[1].coef, 0);
  EXPECT_EQ(prefill.body.find("float red["), std::string::npos);

  format::Plan off = matmulPlan("sm_90", format::GgmlType::Q4_K, true);
  std::string error;
  ASSERT_TRUE(codegen::setOption(off, "gemm-decode-rows=0", error)) << error;
  codegen::EmittedKernel tiles = emit(off);
  EXPECT_TRUE(tiles.alternates.empty());
  EXPECT_EQ(tiles.body,
            emit(matmulPlan("sm_90", format::GgmlType::Q4_K, false)).body);

  // Fewer decode rows: the tiles start earlier, the accumulators follow.
  format::Plan narrow = matmulPlan("gfx1151", format::GgmlType::Q8_0, true);
  ASSERT_TRUE(codegen::setOption(narrow, "gemm-decode-rows=6", error)) << error;
  codegen::EmittedKernel k = emit(narrow);
  ASSERT_EQ(k.alternates.size(), 2u);
  EXPECT_EQ(k.alternates[1].minTokens, 7);
  EXPECT_NE(k.body.find("float acc0[1][6] = {};"), std::string::npos);
  EXPECT_EQ(k.body.find("float acc0[1][8] = {};"), std::string::npos);
  // More: a form of each capacity 8, 16, 32 (to the rows asked), each from
  // the row after the last.
  format::Plan wide = matmulPlan("gfx1151", format::GgmlType::Q8_0, true);
  ASSERT_TRUE(codegen::setOption(wide, "gemm-decode-rows=24", error)) << error;
  k = emit(wide);
  ASSERT_EQ(k.alternates.size(), 4u);
  EXPECT_EQ(k.alternates[1].minTokens, 9);
  EXPECT_EQ(k.alternates[2].minTokens, 17);
  EXPECT_EQ(k.alternates[2].symbol, k.symbol + "_rows32");
  EXPECT_NE(k.body.find("float acc0[1][24] = {};"), std::string::npos);
  EXPECT_EQ(k.alternates[3].minTokens, 25);
}

TEST(GemvForm, SelectAtTheFullModelsDecodeShapes) {
  // selectGemv alone, without printing: the full Qwen4-Exp's decode GEMMs
  // at one row, the defaults (gemm-decode-cols 4, gemm-decode-pieces 4),
  // against the 8,448 warp slots of the larger GPU target (the H200).
  auto at = [](int64_t columns, int64_t k, int64_t rows, int64_t cost) {
    codegen::GemvProblem p;
    p.columns = columns;
    p.k = k;
    p.rows = rows;
    p.cost = cost;
    return codegen::selectGemv(p);
  };
  // attn_qkv (N 10,240, K 2,560, Q4_K): columns enough, rows long enough.
  codegen::GemvForm qkv = at(10240, 2560, 1, 1);
  EXPECT_EQ(qkv.slices, 1);
  EXPECT_EQ(qkv.cols, 1);
  EXPECT_EQ(qkv.unroll, 4);
  // The shared expert's up (N 640, K 2,560): too few columns, K in four
  // slices (each still two pieces).
  codegen::GemvForm shexp = at(640, 2560, 1, 1);
  EXPECT_EQ(shexp.slices, 4);
  EXPECT_EQ(shexp.cols, 1);
  // The routed experts' down (10 slots x N 2,560, K 640, IQ4_NL): short
  // rows, plentiful columns: four a warp, one piece unrolled each.
  codegen::GemvForm down = at(10 * 2560, 640, 1, 1);
  EXPECT_EQ(down.slices, 1);
  EXPECT_EQ(down.cols, 4);
  EXPECT_EQ(down.unroll, 1);
  // Their gate and up (10 x N 640, K 2,560, two IQ3_S matrices: cost 4):
  // K in two slices, one column a warp, one piece unrolled.
  codegen::GemvForm gateUp = at(10 * 640, 2560, 1, 4);
  EXPECT_EQ(gateUp.slices, 2);
  EXPECT_EQ(gateUp.cols, 1);
  EXPECT_EQ(gateUp.unroll, 1);
  // The output projection (N 248,320, K 2,560): a column a warp.
  EXPECT_EQ(at(248320, 2560, 1, 1).slices, 1);
  // Eight rows: a warp's columns times rows within its 32 lanes.
  codegen::GemvForm rows8 = at(10 * 2560, 640, 8, 1);
  EXPECT_LE(rows8.cols * 8, 32);
  EXPECT_EQ(rows8.cols, 4);
  EXPECT_EQ(at(10 * 2560, 640, 16, 1).cols, 2);
  // The options: columns capped, unrolled pieces follow.
  codegen::GemvProblem capped;
  capped.columns = 10 * 2560;
  capped.k = 640;
  capped.maxCols = 1;
  capped.pieces = 8;
  codegen::GemvForm c = codegen::selectGemv(capped);
  EXPECT_EQ(c.cols, 1);
  EXPECT_EQ(c.unroll, 8);
}

TEST(GemvForm, F32ChainsTakeRowBlocksUntilTheTilesFillTheTarget) {
  // A prefill plan of f32 weights (q4x's MoE router: N 512, K 2,560): the
  // row-block form (grid y: blocks of 32 rows) as its own code; the tiles
  // from where the row blocks' work passes a wave of tiles (8.5e8 products
  // / (N K): 648 rows), before a tile's 128 rows x ceil(132 SMs / 4
  // column tiles) = 4,224 fill the H200.
  format::Plan router =
      matmulPlan("sm_90", format::GgmlType::F32, false, 512, 2560);
  router.maxTokens = 16384;
  codegen::EmittedKernel k = emit(router);
  EXPECT_NE(k.body.find("bid_y() * 32L"), std::string::npos);
  EXPECT_EQ(k.grid[1].coef, 1);
  EXPECT_EQ(k.grid[1].div, 32);
  // Four columns a warp: each row of A loaded once for all of them.
  EXPECT_NE(k.body.find("float acc0[4][8] = {};"), std::string::npos);
  ASSERT_EQ(k.alternates.size(), 1u);
  EXPECT_EQ(k.alternates[0].symbol, k.symbol + "_tile");
  EXPECT_EQ(k.alternates[0].minTokens, 648);
  // The delta rule's gates (N 48): one column tile, which would fill the
  // GPU only from 16,896 rows; the work bound gives the tiles 6,917 on.
  format::Plan gates =
      matmulPlan("sm_90", format::GgmlType::F32, false, 48, 2560);
  gates.maxTokens = 16384;
  codegen::EmittedKernel g = emit(gates);
  ASSERT_EQ(g.alternates.size(), 1u);
  EXPECT_EQ(g.alternates[0].minTokens, 850000000 / (48 * 2560));
  // Where the plan ends before either, row blocks at every T.
  gates.maxTokens = 4096;
  EXPECT_TRUE(emit(gates).alternates.empty());
  // Quantised weights keep the tiles; so does the option.
  EXPECT_EQ(emit(matmulPlan("sm_90", format::GgmlType::Q4_K, false, 512, 2560))
                .body.find("bid_y() * 32L"),
            std::string::npos);
  std::string error;
  ASSERT_TRUE(codegen::setOption(router, "gemm-f32-rows=off", error)) << error;
  codegen::EmittedKernel tiles = emit(router);
  EXPECT_EQ(tiles.body.find("bid_y() * 32L"), std::string::npos);
  EXPECT_TRUE(tiles.alternates.empty());
}

TEST(GemvForm, SelectTheRowBlockForm) {
  // Row blocks: columns a warp as the accumulators allow (8 rows: 4), K
  // split while a slice keeps 512 elements, whatever the column count.
  codegen::GemvProblem p;
  p.rowBlocks = true;
  p.rows = 8;
  p.k = 2560;
  for (int64_t columns : {48, 512, 16384}) {
    p.columns = columns;
    codegen::GemvForm f = codegen::selectGemv(p);
    EXPECT_EQ(f.cols, 4) << columns;
    EXPECT_EQ(f.slices, 4) << columns;
    EXPECT_EQ(f.unroll, 1) << columns;
  }
  p.k = 512;
  EXPECT_EQ(codegen::selectGemv(p).slices, 1);
}

TEST(GemvForm, Int8ActivationsUnderTheBf16PolicyForBlockTypesWithIntForms) {
  for (const char *target : {"sm_90", "gfx1151"}) {
    SCOPED_TRACE(target);
    // auto: only plans that store bf16 activations; the f32 policy keeps
    // float activations.
    format::Plan f32 = matmulPlan(target, format::GgmlType::Q4_K, true);
    codegen::EmittedKernel plain = emit(f32);
    EXPECT_FALSE(plain.int8Decode);
    EXPECT_EQ(plain.body.find("strata_di8_"), std::string::npos);
    format::Plan bf16 = f32;
    bf16.options["bf16_activations"] = 1;
    codegen::EmittedKernel k = emit(bf16);
    EXPECT_TRUE(k.int8Decode);
    // A quantised once a block into shared memory, the Q4_K pieces' wide
    // integer form (gemm-decode-wide) with its min terms, both the one-row
    // and 8-row forms; the eight-value pieces with the option off.
    EXPECT_NE(k.body.find("strata_qa8(av, q, &s, &t);"), std::string::npos);
    EXPECT_NE(k.body.find("strata_di8w_q4_k("), std::string::npos);
    EXPECT_NE(k.body.find("acc0[c][r] -= wm0[c][1] * thi.y;"),
              std::string::npos);
    EXPECT_NE(k.body.find("aligned(16))) aq8_t aq8[32];"), std::string::npos);
    EXPECT_NE(k.body.find("aligned(16))) aq8_t aq8[256];"), std::string::npos);
    format::Plan narrow = bf16;
    std::string why;
    ASSERT_TRUE(codegen::setOption(narrow, "gemm-decode-wide=0", why)) << why;
    codegen::EmittedKernel n8 = emit(narrow);
    EXPECT_EQ(n8.body.find("strata_di8w_q4_k("), std::string::npos);
    EXPECT_NE(n8.body.find("strata_di8_q4_k("), std::string::npos);
    EXPECT_NE(n8.body.find("acc0[c][r] -= wm0[c] * at;"), std::string::npos);
    EXPECT_NE(n8.body.find("aq8_t aq8[32];"), std::string::npos);
    // Forced on under f32; off under bf16.
    std::string error;
    ASSERT_TRUE(codegen::setOption(f32, "gemm-decode-int8=on", error)) << error;
    EXPECT_TRUE(emit(f32).int8Decode);
    ASSERT_TRUE(codegen::setOption(bf16, "gemm-decode-int8=off", error))
        << error;
    codegen::EmittedKernel off = emit(bf16);
    EXPECT_FALSE(off.int8Decode);
    EXPECT_EQ(off.body, plain.body);
    // Block types without an integer form (and 16-bit weights) keep the
    // float decode.
    for (format::GgmlType type :
         {format::GgmlType::F16, format::GgmlType::IQ3_XXS}) {
      format::Plan p = matmulPlan(target, type, true);
      p.options["bf16_activations"] = 1;
      EXPECT_FALSE(emit(p).int8Decode) << format::ggmlTypeInfo(type).irName;
    }
  }
}

TEST(GemvForm, MatrixUnitDecodeFormFromTheOptionsRows) {
  // gemm-decode-mma=8 with 16 decode rows: the warp dot products from 2
  // rows, the matrix-unit form from 8, the tiles from 17 (sm_90, bf16 A).
  format::Plan p = matmulPlan("sm_90", format::GgmlType::Q4_K, true);
  std::string error;
  ASSERT_TRUE(codegen::setOption(p, "gemm-decode-rows=16", error)) << error;
  ASSERT_TRUE(codegen::setOption(p, "gemm-decode-mma=8", error)) << error;
  codegen::EmittedKernel k = emit(p);
  ASSERT_EQ(k.alternates.size(), 3u);
  EXPECT_EQ(k.alternates[0].symbol, k.symbol + "_rows");
  EXPECT_EQ(k.alternates[1].symbol, k.symbol + "_mma");
  EXPECT_EQ(k.alternates[1].minTokens, 8);
  EXPECT_EQ(k.alternates[2].minTokens, 17);
  // K = 256 is eight chunks: two slices of four; 16 columns a warp group,
  // four groups a block: 200 columns in 4 blocks.
  EXPECT_EQ(k.alternates[1].grid[0].constant, 4);
  EXPECT_EQ(k.alternates[1].block[0], 256);
  EXPECT_NE(k.body.find("mma_16x16x16_f(acc0, fa"), std::string::npos);
  EXPECT_NE(k.body.find("red[0 * 8 + i][wave + j][lane]"), std::string::npos);
  // From 2 rows it replaces the warp dot products' rows form; from 1 it is
  // the own code, so a row's sums do not depend on the step's other rows.
  ASSERT_TRUE(codegen::setOption(p, "gemm-decode-mma=2", error)) << error;
  codegen::EmittedKernel two = emit(p);
  ASSERT_EQ(two.alternates.size(), 2u);
  EXPECT_EQ(two.alternates[0].symbol, two.symbol + "_mma");
  EXPECT_EQ(two.alternates[0].minTokens, 2);
  ASSERT_TRUE(codegen::setOption(p, "gemm-decode-mma=1", error)) << error;
  codegen::EmittedKernel one = emit(p);
  ASSERT_EQ(one.alternates.size(), 1u);
  EXPECT_EQ(one.alternates[0].symbol, one.symbol + "_tile");
  EXPECT_NE(one.body.find("mma_16x16x16_f(acc0, fa"), std::string::npos);
  EXPECT_EQ(one.grid[0].constant, 4);
  // gfx1151 (WMMA fragments hold whole rows of k) and f32 weights keep the
  // warp dot products; so do plans whose decode rows end before it.
  for (auto [target, type, option] :
       {std::tuple{"gfx1151", format::GgmlType::Q4_K, "gemm-decode-mma=8"},
        std::tuple{"sm_90", format::GgmlType::F32, "gemm-decode-mma=8"},
        std::tuple{"sm_90", format::GgmlType::Q4_K, "gemm-decode-mma=17"}}) {
    SCOPED_TRACE(std::string(target) + " " + option);
    format::Plan q = matmulPlan(target, type, true);
    ASSERT_TRUE(codegen::setOption(q, "gemm-decode-rows=16", error)) << error;
    ASSERT_TRUE(codegen::setOption(q, option, error)) << error;
    for (const codegen::EmittedKernel &a : emit(q).alternates)
      EXPECT_EQ(a.symbol.find("_mma"), std::string::npos) << a.symbol;
  }
}

TEST(GemvForm, SelectTheMatrixUnitDecodeForm) {
  // The full Qwen4-Exp's trunk at 16 rows, the H200's 8,448 warp slots:
  // attn_qkv (N 10,240, K 2,560): 640 column groups, K in 8 slices of 10
  // chunks, four unrolled.
  codegen::GemvMmaProblem p;
  p.n = 10240;
  p.k = 2560;
  codegen::GemvMmaForm f = codegen::selectGemvMma(p);
  EXPECT_EQ(f.slices, 8);
  EXPECT_EQ(f.unroll, 4);
  // The output projection (N 248,320): columns alone fill the GPU.
  p.n = 248320;
  EXPECT_EQ(codegen::selectGemvMma(p).slices, 1);
  // The experts' down K (640, 20 chunks): slices keep four chunks each.
  p.n = 2560;
  p.k = 640;
  f = codegen::selectGemvMma(p);
  EXPECT_EQ(f.slices, 4);
  EXPECT_EQ(f.unroll, 4);
  // A short K: one slice, its chunks all unrolled.
  p.k = 64;
  f = codegen::selectGemvMma(p);
  EXPECT_EQ(f.slices, 1);
  EXPECT_EQ(f.unroll, 2);
}

TEST(GemvForm, LaunchBlocksCapTheGridAtTheOption) {
  EXPECT_EQ(codegen::gemvLaunchBlocks(31040, 0), 31040);
  EXPECT_EQ(codegen::gemvLaunchBlocks(31040, 528), 528);
  EXPECT_EQ(codegen::gemvLaunchBlocks(25, 528), 25);
}

TEST(GemvForm, CappedGridLoopsTheBlocksOverColumnGroups) {
  for (const char *target : {"sm_90", "gfx1151"}) {
    SCOPED_TRACE(target);
    // N = 200, K = 256: a warp a column, 8 columns a block, 25 groups.
    format::Plan p = matmulPlan(target, format::GgmlType::Q6_K, true);
    p.options["bf16_activations"] = 1;
    codegen::EmittedKernel plain = emit(p);
    EXPECT_EQ(plain.grid[0].constant, 25);
    EXPECT_EQ(plain.body.find("for (long cg"), std::string::npos);
    // gemm-decode-grid=4: 4 blocks, each over groups b, b + 4, ... after A's
    // quantisation (the row forms too); the columns' sums as before.
    format::Plan capped = p;
    std::string why;
    ASSERT_TRUE(codegen::setOption(capped, "gemm-decode-grid=4", why)) << why;
    codegen::EmittedKernel k = emit(capped);
    EXPECT_EQ(k.grid[0].constant, 4);
    const size_t quant = k.body.find("strata_qa8(av, q, &s, &t);");
    const size_t loop = k.body.find(
        "for (long cg = (long)(bid_x() - base); cg < 25L; cg += 4L) {");
    ASSERT_NE(quant, std::string::npos);
    ASSERT_NE(loop, std::string::npos);
    EXPECT_LT(quant, loop);
    // The 2-to-8-row form (an alternate in the same source) loops too.
    ASSERT_FALSE(k.alternates.empty());
    EXPECT_EQ(k.alternates[0].grid[0].constant, 4);
    EXPECT_NE(k.body.find("cg += 4L", loop + 1), std::string::npos);
    // A cap of at least the groups keeps the kernel's text.
    format::Plan wide = p;
    ASSERT_TRUE(codegen::setOption(wide, "gemm-decode-grid=25", why)) << why;
    EXPECT_EQ(emit(wide).body, plain.body);
    // With gemm-decode-prefetch (sm_90) each warp asks L2 for its next
    // group's rows, 4 groups of 8 columns on.
    format::Plan pre = capped;
    ASSERT_TRUE(codegen::setOption(pre, "gemm-decode-prefetch=1", why)) << why;
    const std::string body = emit(pre).body;
    EXPECT_EQ(body.find("const long p0 = n0 + 32L;") != std::string::npos,
              std::string(target) == "sm_90");
  }
}

TEST(GemvForm, Q6KChainsTakeTheWidePiecesAtWideTwo) {
  for (const char *target : {"sm_90", "gfx1151"}) {
    SCOPED_TRACE(target);
    format::Plan p = matmulPlan(target, format::GgmlType::Q6_K, true);
    p.options["bf16_activations"] = 1;
    // 1: Q4_K chains only; Q6_K's eight-value pieces.
    format::Plan narrowPlan = p;
    std::string why;
    ASSERT_TRUE(codegen::setOption(narrowPlan, "gemm-decode-wide=1", why))
        << why;
    codegen::EmittedKernel narrow = emit(narrowPlan);
    EXPECT_NE(narrow.body.find("strata_di8_q6_k("), std::string::npos);
    EXPECT_EQ(narrow.body.find("strata_di8w_q6_k("), std::string::npos);
    // 2 (the default): a lane's 32 values (halves 64 apart: A's pieces 8
    // on), no min.
    codegen::EmittedKernel k = emit(p);
    EXPECT_NE(k.body.find("strata_di8w_q6_k("), std::string::npos);
    EXPECT_EQ(k.body.find("strata_di8_q6_k("), std::string::npos);
    EXPECT_NE(k.body.find("ahi = *(const aq16_t *)&aq8[ap + 8];"),
              std::string::npos);
    EXPECT_NE(k.body.find("((lane >> 2) & 1) * 128L + ((lane >> 1) & 1) * "
                          "32L + (lane & 1) * 16L"),
              std::string::npos);
    EXPECT_EQ(k.body.find("-= wm0"), std::string::npos);
    // Q4_K chains keep their form at 2.
    format::Plan q4wide = matmulPlan(target, format::GgmlType::Q4_K, true);
    q4wide.options["bf16_activations"] = 1;
    format::Plan q4 = q4wide;
    ASSERT_TRUE(codegen::setOption(q4, "gemm-decode-wide=1", why)) << why;
    EXPECT_EQ(emit(q4wide).body, emit(q4).body);
  }
}
