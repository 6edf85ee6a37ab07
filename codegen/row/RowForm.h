//===- RowForm.h - the row family's choice of form --------------*- C++ -*-===//
//
// Select, then emit, for the row family (codegen/row/RowEmitter.cpp): a
// kernel's body of row ops takes one of two forms:
//   ConvRows - conv1d_causal alone or followed by silu: blocks of 32 rows x
//              4 x threads channels, the weights loaded once a block
//              (conv1d_rows)
//   Rows     - a block a row of the outputs' leading dim, the body's ops in
//              order with a barrier between; shared memory for the
//              reductions, the routes' logits and qsa_select's sort
//              (QsaForm.h), then the stored temporaries' rows where they
//              fit the static budget, else the temporaries in the kernel's
//              workspace, a row a block
// (hc_write + its norm, K1, is a pass inside Rows: RowEmitter::writeNorm.)
//
//===----------------------------------------------------------------------===//
#pragma once

#include "codegen/qsa/QsaForm.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace strata::codegen {

/// What selection needs of a row kernel.
struct RowProblem {
  /// conv1d_causal alone or followed by silu over its result, over rows
  /// aligned with the outputs of `channels` channels (a multiple of 4).
  bool convBody = false;
  int64_t channels = 0;
  /// The experts of each moe_route of the body (its logits in shared
  /// memory).
  std::vector<int64_t> routeExperts;
  /// The body's qsa_select, if any.
  std::optional<QsaSelectProblem> qsa;
  /// Bytes of a row of the stored temporaries.
  int64_t tempBytes = 0;
  int threads = 256;
};

/// The form of a row kernel.
struct RowForm {
  enum class Kind { ConvRows, Rows } kind = Kind::Rows;
  int64_t rowsPerBlock = 1;     ///< ConvRows: 32
  int64_t channelsPerBlock = 0; ///< ConvRows: 4 x threads
  /// Rows: qsa_select's layout (blocks 0: none).
  QsaSelectForm qsa;
  /// Rows: shared memory for the reductions (256 bytes), the routes'
  /// logits and qsa_select.
  int64_t fixedBytes = 0;
  /// Rows: the temporaries live in the workspace (they do not fit beside
  /// fixedBytes).
  bool tempsInWorkspace = false;
  /// Rows: fixedBytes fits the static budget (else the kernel is refused,
  /// naming the longest plan qsa_select fits).
  bool fits = true;
};

/// Rows per ConvRows block.
constexpr int64_t kConvRowsPerBlock = 32;

/// The form of \p p under the static shared-memory budget (Limits.h).
RowForm selectRow(const RowProblem &p);

} // namespace strata::codegen
