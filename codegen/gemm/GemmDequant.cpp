//===- GemmDequant.cpp - the dequantise-once GEMM form --------------------===//
//
// The portable counterpart of sm_90's TMA tile for quantised weights
// (gfx1151's form; sm_90's under portable-forms): a pre-launch decodes each
// quantised weight once into the workspace as the matrix units' 16-bit
// type (bf16 on sm_90, f16 on gfx1151: pack8_mma), then the variant's
// tile reads those rows as it reads any 16-bit weight. The decode then
// costs once per call instead of once per row tile, and the tile's inner
// loop is the 16-bit one (no block decode between its loads and the
// matrix ops). From 512 rows (GemmForm.h), where the conversion's
// write and read of n x k x 2 bytes is small beside the tiles' work.
//
//===----------------------------------------------------------------------===//
#include "codegen/gemm/GemmEmitter.h"

namespace strata::codegen::detail::gemm {

void GemmEmitter::emitDequantOnce(const std::vector<Chain> &chains,
                                  std::vector<Gemm> gemms,
                                  const GemmProblem &shapes,
                                  const std::string &sym) {
  sym_ = sym;
  // The workspace: each converted weight, n x k 16-bit values, 256-byte
  // aligned (the TMA tile's layout).
  int64_t ws = 0, conv = 0;
  std::vector<size_t> convIdx, all;
  for (size_t ci = 0; ci < gemms.size(); ++ci) {
    all.push_back(ci);
    if (!shapes.chains[ci].dequant)
      continue;
    Gemm &g = gemms[ci];
    g.wsOff = ws;
    ws += (g.n * g.k * 2 + 255) / 256 * 256;
    conv += g.n * g.k;
    convIdx.push_back(ci);
  }
  if (convIdx.empty())
    throw Unsupported("the dequantise-once form without a quantised weight");
  e.workspace = true;
  e.out.workspace = {0, ws, 1};
  const std::string params = e.params();
  // The pre-launch: conversion blocks only (no chain's rows), as the TMA
  // tile's.
  const int64_t convBlocks = std::min<int64_t>(256, (conv + 2047) / 2048);
  ChainLaunch pl =
      emitChains(chains, gemms, {}, params, sym + "_prep", convBlocks, convIdx);
  format::PlanPreLaunch pre;
  pre.grid = pl.grid;
  pre.block = pl.block;
  pre.sharedBytes = pl.sharedBytes;
  // The tiles: a converted chain's W is the workspace's rows.
  const bool f16 = e.target == "gfx1151";
  std::vector<Gemm> tiles = gemms;
  for (size_t ci : convIdx) {
    Gemm &g = tiles[ci];
    Tensor &w = g.w[0];
    w.ctype = f16 ? "f16" : "bf16";
    w.ggml = f16 ? format::GgmlType::F16 : format::GgmlType::BF16;
    w.ptr = fmt::format("((const {} *)(ws + {}L))", w.ctype, g.wsOff);
    w.input = -1;
    w.blockSize = 1;
    w.blockBytes = 2;
    g.wsOff = -1;
  }
  ChainLaunch l = emitChains(chains, tiles, all, params, sym, 0);
  e.out.grid = l.grid;
  e.out.block = l.block;
  e.out.sharedBytes = l.sharedBytes;
  e.out.pre = std::move(pre);
}

} // namespace strata::codegen::detail::gemm
