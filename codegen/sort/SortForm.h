//===- SortForm.h - moe_sort's choice of form -------------------*- C++ -*-===//
//
// Select, then emit, for moe_sort (codegen/sort/SortEmitter.cpp; device
// code codegen/device/sort/MoeSort.h): two launches over slices of slots,
// a pre-launch counting each slice's experts into the workspace, the
// kernel scanning the counts and ranking its slice stably. The form is the
// block (512 threads, half the rounds of 256, where the per-wave counts of
// every expert fit shared memory) and the slice.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>

namespace strata::codegen {

/// The form of a moe_sort kernel.
struct SortForm {
  int threads = 256; ///< 512 or 256
  int64_t slice = 0; ///< slots a block counts and ranks
  bool fits = false; ///< the counts of every expert fit one block
  /// The one-launch form (moe_sort_one) fits too: one more row of counts.
  bool oneFits = false;
  /// Runs of fewer than twoLaunchTokens(k) tokens take the one-launch form
  /// (the kernel's own code), the two launches an alternate.
  bool one = false;
  /// Blocks of a launch of \p slots slots (T x k): slots / slice + 1.
  int64_t blocks(int64_t slots) const { return slots / slice + 1; }
  /// The first T whose T x \p k slots fill a slice: runs from there take
  /// the two launches (the one-launch form covers S < slice).
  int64_t twoLaunchTokens(int64_t k) const { return (slice - 1) / k + 1; }
};

/// Slots a moe_sort block takes: one block took 0.64 ms a layer at
/// T = 16,384 (163,840 slots) on the H200; slices of 2,048 spread them.
constexpr int64_t kSortSlice = 2048;

/// The form of moe_sort over \p experts experts, under the static
/// shared-memory budget (Limits.h; the same on both GPU targets).
SortForm selectSort(int64_t experts);

/// What choosing moe_sort's launches needs beyond the experts' count.
struct SortProblem {
  int64_t experts = 0;
  bool state = false;     ///< the plan has state (decode steps)
  bool oneOption = false; ///< option moe-sort-one
  /// The ids' rows are the run's tokens (T, no constant part), so a run's
  /// slots are T x k.
  bool rowsAreTokens = false;
};

/// selectSort(p.experts), one launch (SortForm::one) where the option asks
/// for it in a plan with state and the one-launch form fits.
SortForm selectSort(const SortProblem &p);

} // namespace strata::codegen
