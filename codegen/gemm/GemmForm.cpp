//===- GemmForm.cpp - the GEMM chains' forms by rows ----------------------===//
#include "codegen/gemm/GemmForm.h"
#include "codegen/Options.h"
#include "codegen/gemm/GemmEmitter.h"
#include "ir/Target.h"

#include <algorithm>
#include <cmath>

namespace strata::codegen {

using detail::gemm::kF32RowBlockWork;
using detail::gemm::kF32RowPass;
using detail::gemm::kRowBlockWork16PerK;
using detail::gemm::kSkinnyN;
using detail::gemm::kTmaMinTokens;

int64_t dequantOnceTiles(const ir::Target &t) {
  const double ratio =
      4.0 * t.vecF32Tflops * 1e3 / (kDecodeOpsPerWeight * t.memGBs);
  return 1 + static_cast<int64_t>(std::ceil(ratio));
}

int64_t dequantOnceFrom(const std::string &target, int64_t h200Rows) {
  const ir::Target *t = ir::lookupTarget(target);
  const ir::Target *h200 = ir::lookupTarget("sm_90");
  if (!t || !h200)
    return h200Rows;
  const int64_t tiles = dequantOnceTiles(*t), base = dequantOnceTiles(*h200);
  return (h200Rows * tiles + base - 1) / base;
}

GemmForm::Kind GemmForm::at(int64_t tokens) const {
  if (tmaFrom > 0 && tokens >= tmaFrom)
    return Kind::Tma;
  if (dequantFrom > 0 && tokens >= dequantFrom)
    return Kind::Dequant;
  if (tokens <= decodeRows)
    return Kind::Decode;
  if (rowBlockFrom > 0 && tokens >= rowBlockFrom && tokens < tileFrom)
    return Kind::RowBlock;
  return Kind::Tile;
}

bool gemvFits(const std::vector<GemmChainShape> &chains, int64_t rows) {
  for (const GemmChainShape &c : chains) {
    if (c.weights != 1 || c.k % 8 != 0 || rows * c.mPer > 32 ||
        (c.quant && c.blockSize % 8 != 0))
      return false;
    // The stream mean: a warp per hidden column takes every stream's gate
    // column over the whole K (its sum needs no second warp).
    if (c.streamMean && (c.mPer != 1 || c.k >= kGemvStreamK || c.quant))
      return false;
  }
  return true;
}

int64_t f32TileRows(const GemmProblem &p, const format::Plan &plan) {
  if (option(plan, Opt::GemmF32Rows) != 0 || !gemvFits(p.chains, kF32RowPass))
    return 0;
  const ir::Target *t = ir::lookupTarget(p.target);
  if (!t || p.chains.empty())
    return 0;
  // 16-bit weights, skinny f32 chains beside them.
  const bool half = std::any_of(
      p.chains.begin(), p.chains.end(),
      [](const GemmChainShape &c) { return !c.f32Weights && !c.quant; });
  if (half) {
    int64_t bm = INT64_MAX, colTiles = 0, columns = 0;
    for (const GemmChainShape &c : p.chains) {
      const bool skinny = c.skinny || c.n <= kSkinnyN;
      if (c.streamMean || c.mPer != 1 || c.quant || c.weights != 1 ||
          (c.f32Weights && !skinny))
        return 0;
      if (skinny)
        continue; // warp dot products in every form
      if (c.bm <= 0 || c.bn <= 0)
        return 0;
      bm = std::min<int64_t>(bm, c.bm);
      colTiles += (c.n + c.bn - 1) / c.bn;
      columns += c.n;
    }
    if (colTiles == 0)
      return 0;
    return std::min(bm * ((t->units + colTiles - 1) / colTiles),
                    std::max<int64_t>(1, kRowBlockWork16PerK / columns));
  }
  int64_t bm = INT64_MAX, colTiles = 0, work = 0;
  for (const GemmChainShape &c : p.chains) {
    // A few columns (kSkinnyN) already take warp dot products (and merge
    // into a neighbour's tile, K2's injection logits).
    if (c.streamMean || c.mPer != 1 || !c.f32Weights || c.skinny ||
        c.n <= kSkinnyN || c.bm <= 0 || c.bn <= 0)
      return 0;
    bm = std::min<int64_t>(bm, c.bm);
    colTiles += (c.n + c.bn - 1) / c.bn;
    work += c.n * c.k;
  }
  // Or earlier, where the row-block form's work passes one wave of tiles.
  return std::min(bm * ((t->units + colTiles - 1) / colTiles),
                  std::max<int64_t>(1, kF32RowBlockWork / work));
}

GemmForm selectGemm(const GemmProblem &p, const format::Plan &plan) {
  GemmForm f;
  // Plans with state decode: runs of a few rows take the decode form (the
  // kernel's own code) and the tiles become an alternate from the row
  // after it. Prefill-only plans keep the tiles as their own code.
  const int64_t decodeRows = option(plan, Opt::GemmDecodeRows);
  if (p.state && decodeRows > 0 && gemvFits(p.chains, decodeRows))
    f.decodeRows = decodeRows;
  // Chains of f32 weights: the row-block form until the tiles fill the
  // target, from the decode forms' last row on.
  const int64_t f32From = f32TileRows(p, plan);
  const int64_t blockFrom = f.decodeRows + 1;
  if (f32From > blockFrom && p.maxTokens >= blockFrom)
    f.rowBlockFrom = blockFrom;
  f.tileFrom = std::max(blockFrom, f32From);
  // The TMA tile from kTmaMinTokens, where a chain takes it: its
  // pre-launch converts 16-bit (and quantised) weights into the workspace,
  // a cost per call that pays off over enough rows, and its 128-row tiles
  // leave short prompts few blocks.
  const bool portable =
      p.target == "gfx1151" || option(plan, Opt::PortableForms) != 0;
  if (!portable && p.maxTokens >= kTmaMinTokens &&
      std::any_of(p.chains.begin(), p.chains.end(),
                  [](const GemmChainShape &c) { return c.tma; }))
    f.tmaFrom = kTmaMinTokens;
  // The portable counterpart (gfx1151, and sm_90 under portable-forms):
  // the weights decoded once by a pre-launch, as the TMA tile's are, then
  // the variant's tile over 16-bit weights, from the rows where that pays
  // on the target (dequantOnceFrom: 512 on sm_90, 2,112 on gfx1151).
  const int64_t dequantFrom = dequantOnceFrom(p.target, kTmaMinTokens);
  if (portable && option(plan, Opt::GemmDequantOnce) == 0 &&
      p.maxTokens >= dequantFrom &&
      std::any_of(p.chains.begin(), p.chains.end(),
                  [](const GemmChainShape &c) { return c.dequant; }))
    f.dequantFrom = dequantFrom;
  return f;
}

} // namespace strata::codegen
