//===- QsaForm.h - qsa_select's choice of form ------------------*- C++ -*-===//
//
// Select, then emit, for QSA block selection in prefill (qsa_select: a
// block a query row, printed as a row special by codegen/row/RowEmitter.cpp;
// the device code is codegen/device/qsa/Select.h). Per row the block
// scores every visible compressed key, then keeps the top blocks: rows
// whose visible blocks fit the top take a bitonic sort of (score, id)
// pairs, longer rows a radix select over the scores (256 threads, a top)
// that knows a block by its index. What the form fixes is the shared
// memory: the sort size (a power of two >= the most visible blocks of the
// plan), the ids kept beside the scores (all of them, or past the static
// limit only the bitonic sort's), the query row and the selection's
// compacted top, histogram and scan words.
//
// The decode step's selection (qsa_select_cached) is its own form
// (codegen/qsa/QsaCached.cpp): a pre-launch scores blocks a warp each, the
// kernel ranks them by counting.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>

namespace strata::codegen {

/// What selection needs of a qsa_select op.
struct QsaSelectProblem {
  int64_t maxTokens = 1; ///< the plan's largest run (visible keys a row)
  int64_t block = 1;     ///< keys a block (the compress ratio)
  int64_t heads = 1;     ///< indexer heads
  int64_t dims = 1;      ///< indexer dims a head
  int64_t top = 0;       ///< blocks kept a row
  int threads = 256;     ///< the row kernel's block
};

/// The shared-memory layout of a qsa_select row (bytes from the sizes).
struct QsaSelectForm {
  int64_t blocks = 0; ///< the sort size: a power of two >= the most blocks
  int64_t ids = 0;    ///< block ids kept: blocks, or the top's power of two
  int64_t query = 0;  ///< the query row (heads x dims floats)
  int64_t select = 0; ///< qsa_top_select's compacted top, histogram, scan
  int64_t block = 1;  ///< keys a block (for diagnostics)
  /// Ids for every block (true), or only for the rows the bitonic sort
  /// takes (past the static limit).
  bool allIds() const { return ids == blocks; }
  /// The row's qsa_select bytes of shared memory.
  int64_t sharedBytes() const {
    return 4 * blocks + 4 * ids + 4 * query + select;
  }
  /// The longest plan (tokens) whose row fits \p budget beside \p other
  /// bytes of the row kernel's other shared memory: the sort size halved
  /// until it does (the rest does not depend on the plan's length).
  int64_t longestFitting(int64_t other, int64_t budget) const;
};

/// The form of \p p under the static shared-memory budget of the GPU
/// targets (Limits.h; the same on both: one source serves them).
QsaSelectForm selectQsaSelect(const QsaSelectProblem &p);

} // namespace strata::codegen
