//===- GemvForm.cpp - the GEMM decode forms' choice of shape --------------===//
#include "codegen/gemm/GemvForm.h"

#include "codegen/Limits.h"

#include <algorithm>

namespace strata::codegen {

GemvForm selectGemv(const GemvProblem &p) {
  const int64_t target = decodeWarpSlots();
  GemvForm f;
  if (p.rowBlocks) {
    while (f.slices < kGemvWarps && p.k / (f.slices * 2) >= 512)
      f.slices *= 2;
    while (f.cols * 2 * p.cost <= p.maxCols && p.rows * f.cols * 2 <= 32)
      f.cols *= 2;
    f.unroll = std::max<int64_t>(1, p.pieces / (p.cost * f.cols));
    return f;
  }
  while (f.slices < kGemvWarps && p.columns * f.slices < target &&
         p.k / (f.slices * 2) >= 512)
    f.slices *= 2;
  while (f.cols * 2 * p.cost <= p.maxCols && p.rows * f.cols * 2 <= 32 &&
         p.k * f.cols / f.slices < 2048 &&
         p.columns * f.slices / (f.cols * 2) >= target / 2)
    f.cols *= 2;
  f.unroll = std::max<int64_t>(1, p.pieces / (p.cost * f.cols));
  return f;
}

int64_t gemvLaunchBlocks(int64_t groups, int64_t maxBlocks) {
  return maxBlocks <= 0 ? groups : std::min(groups, maxBlocks);
}

GemvMmaForm selectGemvMma(const GemvMmaProblem &p) {
  const int64_t target = decodeWarpSlots();
  const int64_t groups = (p.n + 15) / 16, chunks = p.k / 32;
  GemvMmaForm f;
  while (f.slices < kGemvWarps && groups * f.slices < target &&
         chunks / (f.slices * 2) >= 4)
    f.slices *= 2;
  f.unroll = std::clamp<int64_t>(chunks / f.slices, 1, 4);
  return f;
}

} // namespace strata::codegen
