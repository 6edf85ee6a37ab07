//===- GemvForm.h - the GEMM decode forms' choice of shape ------*- C++ -*-===//
//
// Select, then emit, for the decode forms of the GEMM chains and the
// grouped experts (as for attention and the delta rule:
// codegen/attention/AttentionForm.h, codegen/delta/DeltaForm.h). A decode
// form runs a few rows of T as warp dot products: a warp walks K in pieces
// of 256 (32 lanes x 8 values), decoding each weight piece once for every
// row. Its shape says how the weight matrix maps onto warps; GemmEmitter
// prints it (gemvBody).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>

namespace strata::codegen {

/// What selection needs of a decode-form GEMM.
struct GemvProblem {
  /// Output columns over every warp of the kernel: N, or the routed slots
  /// times N for the grouped form.
  int64_t columns = 0;
  int64_t k = 0;    ///< the reduction length
  int64_t rows = 1; ///< accumulator rows a column (the form's rows x mPer)
  /// What decoding one piece of every matrix of a pass costs, in plain
  /// block-type pieces (IQ3_S counts two: grid lookups and signs).
  int64_t cost = 1;
  int64_t maxCols = 4; ///< option gemm-decode-cols
  /// The row-block form (f32 chains at up to thousands of rows): every
  /// block re-reads A's rows, so a warp takes as many columns as its
  /// accumulators allow (each row of A loaded once for all of them), and
  /// K splits while a slice keeps 512 elements; the grid's row blocks,
  /// not the columns, fill the GPU.
  bool rowBlocks = false;
  int64_t pieces = 4; ///< option gemm-decode-pieces
};

/// The shape of a decode form.
struct GemvForm {
  /// Warps that share one column, each a slice of K (a power of two).
  int slices = 1;
  /// Columns one warp takes at once (a power of two).
  int cols = 1;
  /// Pieces a warp's K loop unrolls (its loads in flight): pieces / (cost x
  /// cols), at least one.
  int64_t unroll = 1;
};

/// Warps of a block in the decode forms.
constexpr int kGemvWarps = 8;
/// Bytes of shared memory a stream-mean chain's decode form may hold the
/// pass's rows of A in (16 rows of K = 320 bf16: 10 KB).
constexpr int64_t kGemvStageA = 16384;

/// The shape for \p p: K split into slices while the columns alone leave the
/// GPU short of warps (decodeWarpSlots()) and each slice keeps two pieces;
/// then, while rows are short (under 8 pieces) and warps plentiful, a warp
/// takes more columns, costlier pieces fewer, a warp's columns times rows
/// within its 32 lanes (the epilogue's). A warp whose few pieces each wait a
/// round trip to memory left the H200's decode GEMVs at 300-500 GB/s
/// (bench/results/decode-20261203T133312Z.txt); at two columns of the two
/// IQ3_S matrices the grouped gate/up held 113 registers and ran at 315
/// GB/s, at one column 53 and 400 GB/s (bench/results/gemv-shapes-
/// 20261203.txt).
GemvForm selectGemv(const GemvProblem &p);

/// Blocks a GEMM chain's decode form launches for its \p groups column
/// groups (a block's worth of warps each): a block a group where
/// \p maxBlocks is 0 (option gemm-decode-grid) or the groups fit; else
/// \p maxBlocks, each block then looping over groups. A block quantises A
/// into shared memory (a pass over K and two barriers) before its first
/// weight load: Qwen4-Exp's LM head, 31,040 blocks of one group, paid that
/// 31,040 times for 2,100 bytes a warp.
int64_t gemvLaunchBlocks(int64_t groups, int64_t maxBlocks);

/// What selection needs of a GEMM chain's matrix-unit decode form
/// (codegen/gemm/GemmDecodeMma.cpp): a warp takes 16 columns, K in chunks
/// of 32.
struct GemvMmaProblem {
  int64_t n = 0; ///< output columns
  int64_t k = 0; ///< the reduction length (a multiple of 32)
};

/// The shape of the matrix-unit decode form.
struct GemvMmaForm {
  /// Warps of a block that share 16 columns, each a slice of K's chunks
  /// (a power of two, at most kGemvWarps).
  int slices = 1;
  /// Chunks a warp's K loop unrolls (loads in flight), 1 to 4.
  int64_t unroll = 1;
};

/// The shape for \p p: K split into slices while the column groups alone
/// leave the GPU short of warps (decodeWarpSlots()) and each slice keeps
/// four chunks; the slice's chunks unrolled up to four.
GemvMmaForm selectGemvMma(const GemvMmaProblem &p);

} // namespace strata::codegen
