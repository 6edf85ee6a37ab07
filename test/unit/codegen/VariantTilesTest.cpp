//===- VariantTilesTest.cpp - emitted tiles are their variant's rows ------===//
//
// KernelVariants.def is the truth select-expert-kernels costs with: every
// matmul variant of each GPU target, emitted for a GEMM that takes the
// row's tile unchanged (N a multiple of 128, one weight), must get exactly
// the row's tile rows x columns.
//
//===----------------------------------------------------------------------===//
#include "codegen/KernelEmitter.h"
#include "ir/Target.h"
#include "runtime/format/Plan.h"

#include <gtest/gtest.h>

using namespace strata;

namespace {

/// x [T, 256] -> matmul(x, w [128, 256] of \p type) -> y [T, 128], in
/// bf16 (the GPU policy) or f32 (the f32 policy, whose GEMMs take the
/// vector f32 variants).
format::Plan matmulPlan(const std::string &target, format::GgmlType type,
                        const std::string &variant, bool f32) {
  const format::PlanDType act =
      f32 ? format::PlanDType::F32 : format::PlanDType::BF16;
  const uint64_t es = f32 ? 4 : 2;
  format::Plan p;
  p.model = "m";
  p.arch = "m";
  p.target = target;
  p.maxTokens = 64;
  const format::PlanDim t{1, 0, 1};
  p.buffers.push_back({"tok", format::PlanDType::I32, {t}, 0, 256});
  p.buffers.push_back({"x", act, {t, {0, 256, 1}}, 256, 64 * 256 * es});
  p.buffers.push_back(
      {"y", act, {t, {0, 128, 1}}, 256 + 64 * 256 * es, 64 * 128 * es});
  p.arenaBytes = 256 + 64 * 256 * es + 64 * 128 * es;
  p.weights.push_back({"w", type, {256, 128}});
  format::PlanKernel k;
  k.recipe = format::Recipe::Matmul;
  k.inputs = {{false, 1}, {true, 0}};
  k.outputs = {2};
  k.variant = variant;
  p.kernels.push_back(k);
  p.inputs = {0};
  p.outputs = {2};
  return p;
}

} // namespace

TEST(VariantTiles, EveryEmittedTileIsItsVariantsRow) {
  int checked = 0;
  for (const ir::Target &target : ir::allTargets()) {
    if (!target.gpu)
      continue;
    for (const ir::KernelVariant *v : ir::variantsOf(target)) {
      SCOPED_TRACE(std::string(target.name) + " " + v->name);
      // A weight type the variant decodes (f32 for the vector paths).
      format::GgmlType type = v->path == ir::MatrixPath::F32
                                  ? format::GgmlType::F32
                                  : format::GgmlType::Q8_0;
      ASSERT_TRUE(v->decodes(type));
      format::Plan p = matmulPlan(target.name, type, v->name,
                                  v->path == ir::MatrixPath::F32);
      codegen::EmittedKernel out;
      std::string error;
      ASSERT_TRUE(codegen::emitKernel(p, 0, target.name, out, error)) << error;
      ASSERT_EQ(out.gemmTiles.size(), 1u);
      EXPECT_EQ(out.gemmTiles[0].variant, v->name);
      EXPECT_EQ(out.gemmTiles[0].rows, v->tileM);
      EXPECT_EQ(out.gemmTiles[0].cols, v->tileN);
      ++checked;
    }
  }
  // gfx1151: three WMMA tiles and the vector f32 one; sm_90: three
  // mma.sync tiles and the FFMA one.
  EXPECT_EQ(checked, 8);
}
