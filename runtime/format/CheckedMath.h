//===- CheckedMath.h - overflow-checked size arithmetic ---------*- C++ -*-===//
//
// Sizes, offsets, counts and indices read from files are untrusted: every sum
// or product of them goes through these helpers, which report overflow
// instead of wrapping.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <optional>

namespace strata::format {

/// \p a + \p b, or nullopt if it does not fit in 64 bits.
[[nodiscard]] inline std::optional<uint64_t> checkedAdd(uint64_t a,
                                                        uint64_t b) {
  uint64_t r = 0;
  if (__builtin_add_overflow(a, b, &r))
    return std::nullopt;
  return r;
}

/// \p a * \p b, or nullopt if it does not fit in 64 bits.
[[nodiscard]] inline std::optional<uint64_t> checkedMul(uint64_t a,
                                                        uint64_t b) {
  uint64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r))
    return std::nullopt;
  return r;
}

/// \p x rounded up to a multiple of \p alignment (nonzero), or nullopt if
/// that does not fit in 64 bits.
[[nodiscard]] inline std::optional<uint64_t>
checkedAlignUp(uint64_t x, uint64_t alignment) {
  return checkedAdd(x, (alignment - x % alignment) % alignment);
}

/// True if the \p length bytes at \p offset lie inside [0, \p size), without
/// computing a sum that could wrap.
[[nodiscard]] inline bool inBounds(uint64_t offset, uint64_t length,
                                   uint64_t size) {
  return offset <= size && length <= size - offset;
}

} // namespace strata::format
