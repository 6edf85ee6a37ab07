//===- FastQuant.cpp - one-pass quantisers for real-size synth ------------===//
//
// The block layouts are runtime/format/Quants.cpp's (and ggml's); only the
// choice of scales differs: each sub-block's scale comes from its range in
// one step, where Quants.cpp sweeps 17-21 candidate scales and keeps the one
// of least squared error.
//
//===----------------------------------------------------------------------===//
#include "tools/strata-gguf/FastQuant.h"

#include "runtime/format/BlockDecodeHost.h"
#include "runtime/format/Quants.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

using namespace strata::format;

namespace strata::tools {

namespace {

constexpr int kQK = 256;

/// round(v) clamped to [lo, hi]; NaN gives lo.
int clampRound(float v, int lo, int hi) {
  if (!(v >= static_cast<float>(lo)))
    return lo;
  if (v >= static_cast<float>(hi))
    return hi;
  return static_cast<int>(std::lround(v));
}

void storeU16(uint8_t *p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}

/// The element of largest magnitude, with its sign.
float signedMax(const float *x, int n) {
  float best = x[0];
  for (int i = 1; i < n; ++i)
    if (std::fabs(x[i]) > std::fabs(best))
      best = x[i];
  return best;
}

/// Q4_K: 8 affine sub-blocks of 32, x ~ a q - m with q in 0..15, a spanning
/// the sub-block's range (its minimum at most 0); 6-bit scales and mins
/// under two f16 super-scales. Packed as Quants.cpp's quantKAffine.
void fastQ4_K(const float *x, uint8_t *y) {
  float a[8], m[8];
  for (int j = 0; j < 8; ++j) {
    const float *xs = x + 32 * j;
    float lo = std::min(0.0f, *std::min_element(xs, xs + 32));
    float hi = *std::max_element(xs, xs + 32);
    a[j] = hi > lo ? (hi - lo) / 15 : 0;
    m[j] = -lo;
  }
  uint16_t dBits = fp32ToFp16(*std::max_element(a, a + 8) / 63);
  uint16_t dminBits = fp32ToFp16(*std::max_element(m, m + 8) / 63);
  float d = fp16ToFp32(dBits), dmin = fp16ToFp32(dminBits);
  uint8_t sc[8], mn[8];
  for (int j = 0; j < 8; ++j) {
    // Round the scale up so the sub-block's top still fits in 15 steps.
    sc[j] = static_cast<uint8_t>(
        d > 0 ? std::clamp(static_cast<int>(std::ceil(a[j] / d)), 0, 63) : 0);
    mn[j] = static_cast<uint8_t>(dmin > 0 ? clampRound(m[j] / dmin, 0, 63) : 0);
  }
  storeU16(y, dBits);
  storeU16(y + 2, dminBits);
  uint8_t *scales = y + 4;
  for (int j = 0; j < 4; ++j) {
    scales[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    scales[j + 4] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
    scales[j + 8] =
        static_cast<uint8_t>((sc[j + 4] & 0xf) | ((mn[j + 4] & 0xf) << 4));
  }
  uint8_t q[kQK];
  for (int j = 0; j < 8; ++j) {
    float ds = d * static_cast<float>(sc[j]);
    float dm = dmin * static_cast<float>(mn[j]);
    float ids = ds > 0 ? 1.0f / ds : 0.0f;
    for (int l = 0; l < 32; ++l)
      q[32 * j + l] =
          static_cast<uint8_t>(clampRound((x[32 * j + l] + dm) * ids, 0, 15));
  }
  uint8_t *qs = y + 16;
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l)
      qs[32 * c + l] =
          static_cast<uint8_t>(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
}

/// Q6_K: 16 symmetric sub-blocks of 16, the largest magnitude at -32 (as
/// ggml's reference), 8-bit signed scales under one f16 super-scale.
void fastQ6_K(const float *x, uint8_t *y) {
  float a[16];
  for (int j = 0; j < 16; ++j)
    a[j] = signedMax(x + 16 * j, 16) / -32;
  uint16_t dBits = fp32ToFp16(std::fabs(signedMax(a, 16)) / 127);
  float d = fp16ToFp32(dBits);
  int8_t sc[16];
  uint8_t q[kQK]; // biased by 32: 0..63
  for (int j = 0; j < 16; ++j) {
    sc[j] = static_cast<int8_t>(d > 0 ? clampRound(a[j] / d, -127, 127) : 0);
    float ds = d * static_cast<float>(sc[j]);
    float ids = ds != 0 ? 1.0f / ds : 0.0f;
    for (int l = 0; l < 16; ++l)
      q[16 * j + l] =
          static_cast<uint8_t>(clampRound(x[16 * j + l] * ids, -32, 31) + 32);
  }
  uint8_t *ql = y, *qh = y + 128;
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const uint8_t *qq = q + 128 * h;
      uint8_t q0 = qq[l], q1 = qq[l + 32], q2 = qq[l + 64], q3 = qq[l + 96];
      ql[64 * h + l] = static_cast<uint8_t>((q0 & 0xf) | ((q2 & 0xf) << 4));
      ql[64 * h + l + 32] =
          static_cast<uint8_t>((q1 & 0xf) | ((q3 & 0xf) << 4));
      qh[32 * h + l] = static_cast<uint8_t>(
          (q0 >> 4) | ((q1 >> 4) << 2) | ((q2 >> 4) << 4) | ((q3 >> 4) << 6));
    }
  std::memcpy(y + 192, sc, 16);
  storeU16(y + 208, dBits);
}

/// Index of the IQ4_NL codebook value nearest to \p v (the codebook is
/// increasing: the first midpoint above v).
int nearestKvalue(float v) {
  int k = 0;
  while (k < 15 && v > 0.5f * (static_cast<float>(strata_kvalues_iq4nl[k]) +
                               static_cast<float>(strata_kvalues_iq4nl[k + 1])))
    ++k;
  return k;
}

/// IQ4_NL: one f16 scale per 32, the largest magnitude at the codebook's
/// -127 end (ggml's starting point).
void fastIQ4_NL(const float *x, uint8_t *y) {
  uint16_t dBits = fp32ToFp16(signedMax(x, 32) / -127);
  float d = fp16ToFp32(dBits);
  float id = d != 0 ? 1.0f / d : 0.0f;
  storeU16(y, dBits);
  for (int j = 0; j < 16; ++j)
    y[2 + j] = static_cast<uint8_t>(nearestKvalue(x[j] * id) |
                                    (nearestKvalue(x[j + 16] * id) << 4));
}

/// For each point of the odd magnitude lattice {1, 3, ..., 15}^4 (3 bits a
/// coordinate), the IQ3_S grid entry nearest to it (L2, lowest index on
/// ties): a quad is coded by rounding to the lattice and one lookup.
const std::array<int16_t, 4096> &iq3sNearest() {
  static const std::array<int16_t, 4096> table = [] {
    std::array<int16_t, 4096> t{};
    for (int key = 0; key < 4096; ++key) {
      int best = 0, bestDist = 1 << 30;
      for (int i = 0; i < 512; ++i) {
        int dist = 0;
        for (int k = 0; k < 4; ++k) {
          int mag = static_cast<int>((strata_iq3s_grid[i] >> (8 * k)) & 0xff);
          int want = 1 + 2 * ((key >> (3 * k)) & 7);
          dist += (mag - want) * (mag - want);
        }
        if (dist < bestDist) {
          bestDist = dist;
          best = i;
        }
      }
      t[key] = static_cast<int16_t>(best);
    }
    return t;
  }();
  return table;
}

/// IQ3_S: per sub-block of 32 the largest magnitude at the grid's top level
/// 15, the 4-bit odd multiplier rounded up from it; each quad of magnitudes
/// to its lattice point's nearest grid entry; signs free.
void fastIQ3_S(const float *x, uint8_t *y) {
  const std::array<int16_t, 4096> &nearest = iq3sNearest();
  float db[8];
  for (int ib = 0; ib < 8; ++ib) {
    float amax = 0;
    for (int l = 0; l < 32; ++l)
      amax = std::max(amax, std::fabs(x[32 * ib + l]));
    db[ib] = amax / 15;
  }
  uint16_t dBits = fp32ToFp16(*std::max_element(db, db + 8) / 31);
  float d = fp16ToFp32(dBits);
  std::memset(y, 0, 110);
  storeU16(y, dBits);
  uint8_t *qs = y + 2, *qh = y + 66, *signs = y + 74, *scales = y + 106;
  for (int ib = 0; ib < 8; ++ib) {
    int s = d > 0 ? clampRound((db[ib] / d - 1) / 2, 0, 15) : 0;
    float dbq = d * static_cast<float>(1 + 2 * s);
    float idb = dbq > 0 ? 1.0f / dbq : 0.0f;
    scales[ib / 2] |= static_cast<uint8_t>(s << (4 * (ib % 2)));
    for (int quad = 0; quad < 8; ++quad) {
      int key = 0;
      for (int k = 0; k < 4; ++k) {
        float t = std::fabs(x[32 * ib + 4 * quad + k]) * idb;
        key |= clampRound((t - 1.0f) * 0.5f, 0, 7) << (3 * k);
      }
      int idx = nearest[key];
      qs[8 * ib + quad] = static_cast<uint8_t>(idx & 0xff);
      qh[ib] |= static_cast<uint8_t>((idx >> 8) << quad);
    }
    for (int l = 0; l < 4; ++l)
      for (int k = 0; k < 8; ++k)
        if (x[32 * ib + 8 * l + k] < 0)
          signs[4 * ib + l] |= static_cast<uint8_t>(1u << k);
  }
}

} // namespace

bool quantizeRowFast(GgmlType type, const float *src, uint8_t *dst, int64_t n) {
  struct Fast {
    GgmlType type;
    int block, bytes;
    void (*fn)(const float *, uint8_t *);
  };
  static constexpr Fast kFast[] = {
      {GgmlType::Q4_K, kQK, 144, fastQ4_K},
      {GgmlType::Q6_K, kQK, 210, fastQ6_K},
      {GgmlType::IQ4_NL, 32, 18, fastIQ4_NL},
      {GgmlType::IQ3_S, kQK, 110, fastIQ3_S},
  };
  for (const Fast &f : kFast) {
    if (f.type != type)
      continue;
    if (n < 0 || n % f.block != 0)
      return false;
    for (int64_t b = 0; b < n / f.block; ++b)
      f.fn(src + b * f.block, dst + b * f.bytes);
    return true;
  }
  return quantizeRow(type, src, dst, n);
}

} // namespace strata::tools
