//===- GemmForm.h - the GEMM chains' forms by rows ---------------*- C++
//-*-===//
//
// Select, then emit, for the matmul chains of a kernel (as for the grouped
// experts: codegen/grouped/GroupedForm.h). A kernel's GEMM chains take one
// of four forms by the rows of T a launch runs, the kernel's own code and
// its alternates (PlanCode::alternates, each from its first row):
//   Decode   - warp dot products that read each weight once for every row
//              (GemvForm.h), the own code of plans with state up to
//              gemm-decode-rows rows
//   RowBlock - the same over grid y's blocks of rows, for chains of f32
//              weights until the tiles fill the target
//   Tile     - the variant's tile (KernelVariants.def), through LDS
//   Tma      - sm_90 from kTmaMinTokens rows: the TMA/wgmma tile (FORM
//              row tma_wgmma) where a chain takes it
//   Dequant  - gfx1151 (sm_90 under portable-forms) from as many rows: the
//              quantised weights decoded once into the workspace by a
//              pre-launch (the matrix units' 16-bit type), then the plain
//              tile over them (gemm-dequant-once)
// selectGemm decides which runs from which row; GemmEmitter prints them.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata::format {
struct Plan;
}
namespace strata::ir {
struct Target;
}

namespace strata::codegen {

/// One chain of a GEMM kernel as selection sees it.
struct GemmChainShape {
  int64_t n = 0, k = 0; ///< W's columns (N) and reduction length (K)
  int64_t mPer = 1;     ///< output rows a row of T (mPer x N a row)
  int weights = 1;      ///< matrices (2: gate and up side by side)
  bool quant = false;   ///< a quantised block type
  int64_t blockSize = 1;
  bool f32Weights = false; ///< W stored in f32
  bool streamMean = false; ///< the chain ends in a stream mean (K3)
  bool skinny = false;     ///< the skinny form's warp dot products (N <= 8)
  int bm = 0, bn = 0;      ///< its tile (pickTile)
  bool tma = false;        ///< the TMA tile takes it (pickTma)
  /// The dequantise-once form can take it: one quantised weight on the
  /// matrix units (not split, not skinny), bf16 rows of A, K of whole
  /// 8-element pieces, no stream mean, rows that grow with T.
  bool dequant = false;
};

/// What selection needs of a GEMM kernel.
struct GemmProblem {
  std::string target;
  std::vector<GemmChainShape> chains;
  bool state = false;    ///< the plan has state (decodes)
  int64_t maxTokens = 1; ///< the plan's largest run
};

/// The forms of a GEMM kernel and the rows each runs.
struct GemmForm {
  enum class Kind { Decode, RowBlock, Tile, Tma, Dequant };
  /// Decode forms (the own code) up to this many rows; 0: none.
  int64_t decodeRows = 0;
  /// The row-block form from this row (to tileFrom); 0: none.
  int64_t rowBlockFrom = 0;
  /// The tiles from this row (past maxTokens: none).
  int64_t tileFrom = 1;
  /// The TMA tile from this row; 0: none.
  int64_t tmaFrom = 0;
  /// The dequantise-once form from this row; 0: none.
  int64_t dequantFrom = 0;
  /// The form a launch of \p tokens rows runs.
  Kind at(int64_t tokens) const;
};

/// The stream-mean decode form takes a chain's K in one warp: below it.
constexpr int64_t kGemvStreamK = 1024;

/// Whether every chain can take the decode form at \p rows rows of T (one
/// weight, K of whole 8-element pieces, at most 32 accumulator rows: one
/// per lane for the epilogue; a stream mean's K in one warp).
bool gemvFits(const std::vector<GemmChainShape> &chains, int64_t rows);

/// The row from which chains of f32 weights take the tiles, below which
/// they take the row-block form: where the tiles fill \p target (a tile's
/// rows x units / column tiles), or earlier where the row-block form's
/// work passes a wave of tiles' time (kF32RowBlockWork). The f32 tiles'
/// blocks each walk all of K (the MoE router of K 2048, N 128 at T = 512:
/// 4 tiles of 128 rows, 183 us on the H200; the delta rule's gates, N 48:
/// 154 us), while warp dot products split K over warps and spread the
/// columns over the whole GPU. Chains of 16-bit weights (with skinny f32
/// ones beside them: K2's down projection and injection logits) likewise,
/// their matrix-unit tiles' wave costing less a K element
/// (kRowBlockWork16PerK). 0: no row-block form (quantised weights, a
/// stream mean, option gemm-f32-rows=off).
int64_t f32TileRows(const GemmProblem &p, const format::Plan &plan);

/// Vector operations one quantised weight element's decode costs in a
/// tile's K loop, as the dequantise-once rule below plans with: the value
/// with which the rule reproduces the H200's measured break-even of its
/// decode-once pre-launch (kTmaMinTokens, 512 rows of 64-row tiles;
/// test/device/results/experiments/ab-tmaq-20261201T231133Z.txt).
constexpr double kDecodeOpsPerWeight = 9.0;

/// Tiles of rows a GEMM must span before decoding its weights once pays on
/// \p t: a tile that decodes in its K loop decodes every weight element once
/// per tile of rows (kDecodeOpsPerWeight vector operations), decoding once
/// costs one decode plus writing and reading back 2 bytes an element, so
/// once wins from 1 + 4 B x VecF32 / (ops x MemGBs) tiles (Targets.def:
/// 8 on sm_90, 33 on gfx1151, whose 212 GB/s make the round trip dear).
int64_t dequantOnceTiles(const ir::Target &t);

/// The first row at which the dequantise-once form takes a GEMM on
/// \p target, given \p h200Rows, the row at which the H200 measured it
/// paying: scaled by the target's dequantOnceTiles against sm_90's.
int64_t dequantOnceFrom(const std::string &target, int64_t h200Rows);

/// The forms of \p p under \p plan's options (gemm-decode-rows,
/// gemm-f32-rows, gemm-dequant-once, portable-forms; the TMA options are
/// in each chain's tma flag).
GemmForm selectGemm(const GemmProblem &p, const format::Plan &plan);

} // namespace strata::codegen
