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
#include "codegen/KernelEmitter.h"
#include "codegen/Options.h"
#include "runtime/format/Plan.h"

#include <gtest/gtest.h>

using namespace strata;

namespace {

/// x [T, 256] (bf16) -> matmul(x, w [200, 256] of \p type) -> y [T, 200],
/// with one state (a generation plan) where \p withState.
format::Plan matmulPlan(const std::string &target, format::GgmlType type,
                        bool withState) {
  format::Plan p;
  p.model = p.arch = "m";
  p.target = target;
  p.maxTokens = 64;
  const format::PlanDim t{1, 0, 1};
  using D = format::PlanDType;
  p.buffers.push_back({"tok", D::I32, {t}, 0, 256});
  p.buffers.push_back({"x", D::BF16, {t, {0, 256, 1}}, 256, 64 * 256 * 2});
  p.buffers.push_back(
      {"y", D::BF16, {t, {0, 200, 1}}, 256 + 64 * 256 * 2, 64 * 200 * 2});
  p.arenaBytes = 256 + 64 * 256 * 2 + 64 * 200 * 2;
  p.weights.push_back({"w", type, {256, 200}});
  if (withState) {
    p.version = 3;
    p.states.push_back({"blk.0.k_cache", D::F32, {1, 32, 2, 16}, 4096});
  }
  format::PlanKernel k;
  k.recipe = format::Recipe::Matmul;
  k.inputs = {{false, 1}, {true, 0}};
  k.outputs = {2};
  p.kernels.push_back(k);
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
      // Eight warps a block, a warp per column (K = 256: one slice): 200
      // columns in 25 blocks whatever T is.
      ASSERT_EQ(k.grid.size(), 3u);
      EXPECT_EQ(k.grid[0].coef, 0);
      EXPECT_EQ(k.grid[0].constant, 25);
      EXPECT_EQ(k.block[0], 256);
      // The tiles from 9 rows on (the default gemm-decode-rows is 8).
      ASSERT_EQ(k.alternates.size(), 1u);
      EXPECT_EQ(k.alternates[0].minTokens, 9);
      EXPECT_EQ(k.alternates[0].symbol, k.symbol + "_tile");
      EXPECT_NE(k.alternates[0].grid[0].coef + k.alternates[0].grid[1].coef, 0)
          << "the tiles' grid follows T";
      // Every weight byte once for up to 8 rows: one accumulator a row.
      EXPECT_NE(k.body.find("float acc0[8] = {};"), std::string::npos);
    }
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

  // More decode rows: the tiles start later, the accumulators follow.
  format::Plan wide = matmulPlan("gfx1151", format::GgmlType::Q8_0, true);
  ASSERT_TRUE(codegen::setOption(wide, "gemm-decode-rows=16", error)) << error;
  codegen::EmittedKernel k = emit(wide);
  ASSERT_EQ(k.alternates.size(), 1u);
  EXPECT_EQ(k.alternates[0].minTokens, 17);
  EXPECT_NE(k.body.find("float acc0[16] = {};"), std::string::npos);
}
