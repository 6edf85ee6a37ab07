//===- Liveness.h - live ranges of storage over a list of steps -*- C++ -*-===//
//
// The one liveness of arena storage. plan-memory (passes/) computes it over
// the IR's kernels to place buffers; the plan validator computes it over a
// loaded plan's kernels to prove the placement safe. Both describe their
// program the same way: values (by index) defined at a position, read at
// positions, viewed under another shape (same storage) or overwritten in
// place by a later value (a tied output). A storage set is a value with its
// views and in-place successors, live from its first definition to its last
// read; two sets live at the same position must not share a byte.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace strata::format {

/// Values sharing storage, live over the positions [start, end].
struct LiveSet {
  std::vector<uint32_t> values; ///< values[0] defined the storage
  size_t start = 0, end = 0;
  uint64_t bytes = 0;
};

/// A value read after a later value was written over it in place.
struct StaleRead {
  uint32_t value = 0;       ///< the value read
  uint32_t overwriter = 0;  ///< the value written over it
  size_t overwrittenAt = 0; ///< the position of that write
  size_t readAt = 0;        ///< a later position that reads \p value
};

/// Builds live sets from a program's events, given in position order.
class LivenessBuilder {
public:
  explicit LivenessBuilder(size_t numValues);

  /// \p v gets storage of its own, \p bytes long, at \p pos.
  void define(uint32_t v, size_t pos, uint64_t bytes);
  /// \p v is a view of \p base (defined or a view itself): same storage.
  void alias(uint32_t v, uint32_t base);
  /// \p v is written over \p base's storage in place at \p pos; every value
  /// in that storage is dead from then on.
  void overwrite(uint32_t v, uint32_t base, size_t pos);
  /// \p v is read at \p pos.
  void use(uint32_t v, size_t pos);

  /// True once \p v was defined, aliased or written in place.
  bool known(uint32_t v) const { return setOf_[v] != kNone; }

  /// The first value (in overwrite order) read after an in-place overwrite.
  std::optional<StaleRead> staleRead() const;
  /// The storage sets, in order of definition.
  const std::vector<LiveSet> &sets() const { return sets_; }
  /// The set \p v belongs to (it must be known).
  size_t setOf(uint32_t v) const { return setOf_[v]; }

private:
  static constexpr size_t kNone = SIZE_MAX;
  struct Overwrite {
    std::vector<uint32_t> values; ///< the storage's values before the write
    uint32_t by = 0;
    size_t pos = 0;
  };
  std::vector<size_t> setOf_;
  std::vector<size_t> lastUse_;
  std::vector<bool> used_;
  std::vector<LiveSet> sets_;
  std::vector<Overwrite> overwrites_;
};

/// Max over positions of the bytes of live sets: no packing can do better.
uint64_t liveLowerBound(const std::vector<LiveSet> &sets);

/// Two sets live at one position whose bytes overlap: `first` starts no
/// later than `second`.
struct LiveClash {
  size_t first = 0, second = 0;
};

/// The first clash of \p sets placed at \p offsets (one per set), or none.
/// Sets of zero bytes clash with nothing.
std::optional<LiveClash> findLiveClash(const std::vector<LiveSet> &sets,
                                       const std::vector<uint64_t> &offsets);

} // namespace strata::format
