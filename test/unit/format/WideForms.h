//===- WideForms.h - the wide integer forms against the pieces -*- C++ -*-===//
//
// The decode GEMVs' wide integer forms (strata_di8w_<type>: a lane's 32
// values, two halves of 16 some values apart) must hold exactly the
// eight-element forms' bytes and scales (strata_di8_<type>), so the wide
// GEMV sums the same products. One check for every type, host-compiled and
// aligned-loads builds alike (BlockDecodeTest, BlockDecodeAlignedTest).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/format/GgmlType.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

namespace strata::format::widecheck {

/// strata_di8w_<type>'s signature: block, i0, lo[4], hi[4], d[2], dm[2].
using WideForm = void (*)(const uint8_t *, int, uint32_t *, uint32_t *, float *,
                          float *);
/// strata_di8_<type>'s signature: block, i0, q[2], d, dm.
using PieceForm = void (*)(const uint8_t *, int, uint32_t *, float *, float *);

/// A wide form, its eight-element form, the distance between its halves
/// and whether the type has a min.
struct WideCase {
  GgmlType type;
  WideForm wide;
  PieceForm piece;
  int span;
  bool min;
};

inline uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

/// Every lane of \p wide over one 256-value \p block against \p piece:
/// lane i0 (a multiple of 16 in the low half of each 2 x \p span values)
/// holds elements i0 .. i0 + 15 in lo and i0 + span .. + 15 in hi, with
/// the pieces' scales (and their mins where \p min); a NaN scale (random
/// f16 bits) is not compared. Failures name \p where.
inline void expectWideIsPieces(WideForm wide, PieceForm piece, int span,
                               bool min, const uint8_t *block,
                               const std::string &where) {
  for (int i0 = 0; i0 < 256; i0 += 16) {
    if (i0 % (2 * span) >= span)
      continue; // the high half of the lane at i0 - span
    uint32_t lo[4], hi[4];
    float d[2], dm[2] = {0, 0};
    wide(block, i0, lo, hi, d, dm);
    for (int p = 0; p < 4; ++p) {
      const int s = p / 2, at = i0 + span * s + 8 * (p % 2);
      uint32_t q[2];
      float d8 = 0, dm8 = 0;
      piece(block, at, q, &d8, &dm8);
      const uint32_t *w = s == 0 ? lo : hi;
      EXPECT_EQ(w[2 * (p % 2)], q[0]) << where << " at " << at;
      EXPECT_EQ(w[2 * (p % 2) + 1], q[1]) << where << " at " << at;
      if (!std::isnan(d8))
        EXPECT_EQ(floatBits(d[s]), floatBits(d8)) << where << " at " << at;
      if (min && !std::isnan(dm8))
        EXPECT_EQ(floatBits(dm[s]), floatBits(dm8)) << where << " at " << at;
    }
  }
}

} // namespace strata::format::widecheck
