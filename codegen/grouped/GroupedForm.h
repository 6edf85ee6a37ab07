//===- GroupedForm.h - the grouped expert GEMMs' choice of form -*- C++ -*-===//
//
// Select, then emit, for the grouped expert GEMMs (moe_grouped_swiglu,
// moe_grouped_down; as for attention, the delta rule, the GEMM decode
// forms and moe_route). By the rows T of a run (each T x k routed slots):
//   Decode - plans with state, up to gemm-decode-rows rows: warp dot
//            products over the routed experts only (the own code at one
//            row, the `_rows` alternate from two; GemvForm.h's shape)
//   Tile   - the matrix-unit tiles over each expert's slots (the own code
//            of prefill-only plans; `_tile` after the decode forms)
//   Tma    - sm_90a: every expert's weights dequantised once into the
//            workspace by a pre-launch, then the TMA/wgmma tile (`_big`),
//            from the rows where each expert gets kGroupedTmaRows slots
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <string>

namespace strata::format {
struct Plan;
}

namespace strata::codegen {

/// What selection needs of a grouped expert GEMM.
struct GroupedProblem {
  std::string target;
  int64_t experts = 0, n = 0, k = 0;
  int64_t slotsPerToken = 1; ///< routed experts a token (k of top-k)
  bool swiglu = false;       ///< gate and up (two matrices), else down
  bool mma = false;          ///< the tiles run on the matrix units
  bool aBf16 = false;        ///< A stored in bf16
  bool w16 = false;          ///< weights in bf16 or f16
  bool wQuant = false;       ///< quantised weights
  int64_t blockSize = 1;     ///< their block's elements
  bool sameTypes = true;     ///< every matrix of one type
  bool state = false;        ///< the plan has state (decodes)
  int64_t maxTokens = 1;     ///< the plan's largest run
};

/// The forms a grouped GEMM kernel has and the rows each takes.
struct GroupedForm {
  enum class Kind { Decode, Tile, Tma, Dequant };
  /// Decode forms up to this many rows (0: none).
  int64_t decodeRows = 0;
  /// The tiles from this many rows (past maxTokens: none).
  int64_t tileFrom = 1;
  /// The TMA form from this many rows (0: none).
  int64_t tmaFrom = 0;
  /// The dequantise-once form from this many rows (gfx1151, and sm_90
  /// under portable-forms: every expert's quantised weights decoded once
  /// into the workspace, then the plain tile over 16-bit weights); 0: none.
  int64_t dequantFrom = 0;
  /// The TMA tile: gate/up halves' columns (bh, swiglu), tile columns,
  /// workspace rows an expert, ring stages, blocks an SM.
  int64_t bh = 0, bn = 0, nw = 0;
  int stages = 0, blocks = 1;
  /// Bytes of one ring stage (A's rows and the tile's W rows, 64 of K).
  int64_t stageBytes = 0;
  /// The form a launch of \p tokens rows runs.
  Kind at(int64_t tokens) const {
    if (tmaFrom > 0 && tokens >= tmaFrom)
      return Kind::Tma;
    if (dequantFrom > 0 && tokens >= dequantFrom)
      return Kind::Dequant;
    return tokens <= decodeRows ? Kind::Decode : Kind::Tile;
  }
};

/// The forms of \p p under \p plan's options (gemm-decode-rows, gemm-tma,
/// gemm-tma-grouped, gemm-tma-quant, gemm-tma-pair, gemm-dequant-once,
/// portable-forms).
GroupedForm selectGrouped(const GroupedProblem &p, const format::Plan &plan);

} // namespace strata::codegen
