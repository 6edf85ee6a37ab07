//===- VariantTilesTest.cpp - emitted tiles are their variant's rows ------===//
//
// KernelVariants.def is the truth select-expert-kernels costs with: every
// matmul variant of each GPU target, emitted for a GEMM that takes the
// row's tile unchanged (N a multiple of 128, one weight), must get exactly
// the row's tile rows x columns. Its FORM rows (the tiles taken by rule:
// skinny, split-bf16, TMA, grouped TMA) likewise: each emitted for a shape
// that takes it, with the tile's rows exactly and its columns within the
// row's widest; every tile a kernel records names a row.
//
//===----------------------------------------------------------------------===//
#include "codegen/KernelEmitter.h"
#include "codegen/Options.h"
#include "ir/Target.h"
#include "runtime/format/Plan.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>

using namespace strata;

namespace {

/// x [T, 256] -> matmul(x, w [128, 256] of \p type) -> y [T, 128], in
/// bf16 (the GPU policy) or f32 (the f32 policy, whose GEMMs take the
/// vector f32 variants).
format::Plan matmulPlan(const std::string &target, format::GgmlType type,
                        const std::string &variant, bool f32, int64_t n = 128,
                        int64_t maxTokens = 64) {
  const format::PlanDType act =
      f32 ? format::PlanDType::F32 : format::PlanDType::BF16;
  const uint64_t es = f32 ? 4 : 2;
  format::Plan p;
  p.model = "m";
  p.arch = "m";
  p.target = target;
  p.maxTokens = maxTokens;
  const format::PlanDim t{1, 0, 1};
  const uint64_t rows = static_cast<uint64_t>(maxTokens),
                 xBytes = rows * 256 * es, yBytes = rows * n * es;
  p.buffers.push_back({"tok", format::PlanDType::I32, {t}, 0, 4 * rows});
  p.buffers.push_back({"x", act, {t, {0, 256, 1}}, 4 * rows, xBytes});
  p.buffers.push_back({"y", act, {t, {0, n, 1}}, 4 * rows + xBytes, yBytes});
  p.arenaBytes = 4 * rows + xBytes + yBytes;
  p.weights.push_back({"w", type, {256, static_cast<uint64_t>(n)}});
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

namespace {

/// The tiles \p p's kernel 0 records on \p target.
std::vector<codegen::EmittedKernel::GemmTile>
tilesOf(const format::Plan &p, const std::string &target) {
  codegen::EmittedKernel out;
  std::string error;
  EXPECT_TRUE(codegen::emitKernel(p, 0, target, out, error)) << error;
  return out.gemmTiles;
}

/// The recorded tile named \p name, checked against its FORM row: rows
/// exactly, columns a multiple of 16 (or the skinny form's N) within the
/// widest.
void expectFormTile(const std::vector<codegen::EmittedKernel::GemmTile> &got,
                    const ir::KernelForm &f, int cols) {
  auto it = std::find_if(got.begin(), got.end(),
                         [&](const auto &t) { return t.variant == f.name; });
  ASSERT_NE(it, got.end()) << "no tile of form " << f.name;
  EXPECT_EQ(it->rows, f.tileM);
  EXPECT_LE(it->cols, f.tileN);
  EXPECT_EQ(it->cols, cols);
}

/// y [T, k x 512] <- moe_grouped_swiglu over E = 16 experts (K 256, N 512)
/// of \p type, bf16 rows, a plan of \p maxTokens rows (sm_90's TMA form
/// from E x 192 / k = 768 tokens).
format::Plan groupedPlan(format::GgmlType type, int64_t maxTokens) {
  format::Plan p;
  p.model = p.arch = "m";
  p.target = "sm_90";
  p.maxTokens = maxTokens;
  const format::PlanDim t{1, 0, 1}, t4{4, 0, 1};
  using D = format::PlanDType;
  const uint64_t r = static_cast<uint64_t>(maxTokens);
  const uint64_t aB = r * 256 * 2, permB = 4 * r * 4, offB = 17 * 4,
                 yB = 4 * r * 512 * 2;
  p.buffers.push_back({"a", D::BF16, {t, {0, 256, 1}}, 0, aB});
  p.buffers.push_back({"perm", D::I32, {t4}, aB, permB});
  p.buffers.push_back({"off", D::I32, {{0, 17, 1}}, aB + permB, offB});
  p.buffers.push_back({"y", D::BF16, {t4, {0, 512, 1}}, aB + permB + 256, yB});
  p.arenaBytes = aB + permB + 256 + yB;
  p.weights.push_back({"gate", type, {256, 512, 16}});
  p.weights.push_back({"up", type, {256, 512, 16}});
  format::PlanKernel k;
  k.recipe = format::Recipe::MoeGroupedSwiglu;
  k.inputs = {{false, 0}, {false, 1}, {false, 2}, {true, 0}, {true, 1}};
  k.outputs = {3};
  k.variant = "mma_bf16_m64";
  p.kernels.push_back(k);
  p.inputs = {0, 1, 2};
  p.outputs = {3};
  return p;
}

} // namespace

TEST(VariantTiles, EveryFormRowIsWhatTheEmitterTakes) {
  const ir::Target &gfx = *ir::lookupTarget("gfx1151"),
                   &sm90 = *ir::lookupTarget("sm_90");
  // A few columns of f32 weights (N = 4): the skinny form on both targets.
  for (const ir::Target *t : {&gfx, &sm90}) {
    SCOPED_TRACE(t->name);
    const std::string f32 = t == &gfx ? "valu_f32" : "ffma_f32";
    expectFormTile(
        tilesOf(matmulPlan(t->name, format::GgmlType::F32, f32, false, 4),
                t->name),
        ir::formRow(*t, f32 + "_skinny"), 4);
  }
  // sm_90, f32 weights under bf16 activations: the split-bf16 tile (64
  // columns at N <= 64, the row's 128 past it).
  expectFormTile(tilesOf(matmulPlan("sm_90", format::GgmlType::F32,
                                    "mma_bf16_m64", false, 48),
                         "sm_90"),
                 ir::formRow(sm90, "mma_bf16_split3"), 64);
  expectFormTile(tilesOf(matmulPlan("sm_90", format::GgmlType::F32,
                                    "mma_bf16_m64", false, 512),
                         "sm_90"),
                 ir::formRow(sm90, "mma_bf16_split3"), 128);
  // The portable split (gfx1151's f16 terms; sm_90's counterpart under
  // portable-forms): the 64 x 64 tile at every N, scaled terms and the
  // accumulators rescaled between them, never wgmma.
  for (const char *name : {"gfx1151", "sm_90"}) {
    SCOPED_TRACE(name);
    const bool gfx = std::string(name) == "gfx1151";
    for (int64_t n : {48, 512}) {
      format::Plan p =
          matmulPlan(name, format::GgmlType::F32,
                     gfx ? "wmma_f16_m64" : "mma_bf16_m64", false, n, 16384);
      if (!gfx)
        p.options[codegen::optionKey(codegen::Opt::PortableForms)] = 1;
      codegen::EmittedKernel out;
      std::string error;
      ASSERT_TRUE(codegen::emitKernel(p, 0, name, out, error)) << error;
      expectFormTile(out.gemmTiles,
                     ir::formRow(*ir::lookupTarget(name),
                                 gfx ? "wmma_f16_split3" : "mma_bf16_split3p"),
                     64);
      // Each code object names the tile it prints (what --report prices):
      // at 16,384 rows the own code is the row-block form (no tile), the
      // tile an alternate.
      EXPECT_TRUE(out.codeTiles.empty());
      auto tile = std::find_if(
          out.alternates.begin(), out.alternates.end(),
          [](const codegen::EmittedKernel &a) { return a.suffix == "_tile"; });
      ASSERT_NE(tile, out.alternates.end());
      ASSERT_EQ(tile->codeTiles.size(), 1u);
      EXPECT_EQ(tile->codeTiles[0].variant,
                gfx ? "wmma_f16_split3" : "mma_bf16_split3p");
      // The tile (the own code, or the alternate after the row-block form).
      std::string code = out.body;
      for (const codegen::EmittedKernel &alt : out.alternates)
        code += alt.body;
      EXPECT_NE(code.find("strata_split_terms(v, (int)(k0 / 256L))"),
                std::string::npos);
      EXPECT_NE(code.find("*= STRATA_MMA_TERM_SCALE"), std::string::npos);
      EXPECT_EQ(code.find("wgmma_m64n"), std::string::npos);
    }
  }
  // sm_90 from 512 rows: the TMA tile as an alternate beside the
  // variant's (bf16 and quantised weights; N 256 takes 256 columns, N 320
  // the widest with the fewest columns past it: 2 x 160).
  for (format::GgmlType w : {format::GgmlType::BF16, format::GgmlType::Q8_0}) {
    std::vector<codegen::EmittedKernel::GemmTile> got = tilesOf(
        matmulPlan("sm_90", w, "mma_bf16_m64", false, 256, 1024), "sm_90");
    expectFormTile(got, ir::formRow(sm90, "tma_wgmma"), 256);
    EXPECT_EQ(got.front().variant, "mma_bf16_m64");
  }
  expectFormTile(tilesOf(matmulPlan("sm_90", format::GgmlType::BF16,
                                    "mma_bf16_m64", false, 320, 1024),
                         "sm_90"),
                 ir::formRow(sm90, "tma_wgmma"), 160);
  // Grouped experts past E x 192 / k rows: gate and up halves of 128
  // columns (N 512) side by side.
  expectFormTile(tilesOf(groupedPlan(format::GgmlType::IQ4_NL, 1024), "sm_90"),
                 ir::formRow(sm90, "tma_wgmma_grouped"), 256);
  // Both TMA rows run the one ring of kTmaARows rows in 288 threads.
  EXPECT_EQ(ir::formRow(sm90, "tma_wgmma").threads,
            ir::formRow(sm90, "tma_wgmma_grouped").threads);
}

TEST(VariantTiles, EveryRecordedTileNamesARow) {
  // Whatever the shape, a recorded tile is a variant or form row of its
  // target (or, with no variant, the 64 x 64 default).
  for (const char *name : {"gfx1151", "sm_90"}) {
    const ir::Target &t = *ir::lookupTarget(name);
    for (int64_t n : {4, 48, 128, 320})
      for (int64_t tokens : {64, 1024})
        for (format::GgmlType w :
             {format::GgmlType::F32, format::GgmlType::BF16,
              format::GgmlType::Q4_K}) {
          SCOPED_TRACE(fmt::format("{} N {} T {} {}", name, n, tokens,
                                   format::ggmlTypeInfo(w).irName));
          const std::string v =
              std::string(name) == "sm_90" ? "mma_bf16_m64" : "wmma_f16_m64";
          for (const auto &tile :
               tilesOf(matmulPlan(name, w, v, false, n, tokens), name)) {
            bool known = ir::lookupVariant(t, tile.variant) != nullptr;
            for (const ir::KernelForm *f : ir::formsOf(t))
              known |= tile.variant == f->name;
            EXPECT_TRUE(known) << tile.variant;
          }
        }
  }
}
