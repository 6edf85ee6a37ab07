//===- Liveness.h - live ranges of arena values -----------------*- C++ -*-===//
//
// Liveness is computed separately from packing (DESIGN.md): plan-memory packs,
// the plan writer and tests re-derive the lower bound and check overlaps.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/Module.h"
#include "runtime/format/Liveness.h"

#include <cstdint>
#include <string>
#include <vector>

namespace strata::ir {

/// A set of values sharing storage (a value and the reshapes that view it),
/// live over the op positions [start, end].
struct LiveSet {
  std::vector<Value *> values; ///< values[0] is the storage owner
  size_t start = 0, end = 0;
  uint64_t bytes = 0; ///< at T = maxTokens
};

/// Bytes of a tensor type at T = \p maxTokens; 0 if a dim is not `c*T + d`.
uint64_t bytesAt(const Type &t, int64_t maxTokens, std::string *why);

/// Live sets of a flat @main: parameters are live from position 0, returned
/// values to the end; a reshape joins its operand's set.
std::vector<LiveSet> computeLiveness(const Func &main, int64_t maxTokens,
                                     std::string &error);

/// Max over positions of the bytes of live sets: no packing can do better.
uint64_t liveLowerBound(const std::vector<LiveSet> &sets);

/// Checks that no two sets live at the same time overlap in the arena
/// (offsets from Value::offset). Returns "" or a description of a clash.
std::string checkNoOverlap(const std::vector<LiveSet> &sets);

} // namespace strata::ir
