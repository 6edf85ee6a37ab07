//===- Quants.cpp - ggml block formats: dequantise and quantise -----------===//
//
// Dequantisation is BlockDecode.h's 8-element decoders run over whole rows:
// the same text the GPU kernels decode their tiles with, so the CPU reference
// and the kernels cannot drift apart. Its formulas follow
// shared/reference/gguf-and-quants.md section 2 and gguf-py's numpy
// dequantisers (the test oracle). The quantisers must not contract products
// into FMAs (Q4_0's x*id + 8.5 matches gguf-py only unfused): the build
// compiles this file with -ffp-contract=off, and clang is told the same below.
//
//===----------------------------------------------------------------------===//
#include "runtime/format/Quants.h"

#include "runtime/format/BlockDecodeHost.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#ifdef __clang__
// Belt and braces for -ffp-contract=off: a fused x*id + 8.5 rounds Q4_0
// differently from the oracle.
#pragma clang fp contract(off)
#endif

namespace strata::format {

//===----------------------------------------------------------------------===//
// fp16 / bf16
//===----------------------------------------------------------------------===//

static uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float fp16ToFp32(uint16_t h) { return strata_f16_to_f32(h); }

uint16_t fp32ToFp16(float f) { return strata_f32_to_f16(f); }

float bf16ToFp32(uint16_t b) { return strata_bf16_to_f32(b); }

uint16_t fp32ToBf16(float f) {
  uint32_t x = floatBits(f);
  if ((x & 0x7fffffff) > 0x7f800000) // NaN: force quiet.
    return static_cast<uint16_t>((x >> 16) | 64);
  return static_cast<uint16_t>(
      (static_cast<uint64_t>(x) + 0x7fff + ((x >> 16) & 1)) >> 16);
}

//===----------------------------------------------------------------------===//
// Little-endian stores (blocks are unaligned byte streams)
//===----------------------------------------------------------------------===//

namespace {

constexpr int kQK = 256; // QK_K: elements per K-quant / i-quant super-block.

void storeU16(uint8_t *p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}

//===----------------------------------------------------------------------===//
// Dequantisation: BlockDecode.h's decoders over whole blocks.
//===----------------------------------------------------------------------===//

/// A strata_dq8_* decoder: elements i0..i0+7 of the block at its first
/// argument.
using Decode8Fn = void (*)(const uint8_t *, int, float *);

/// Elements and bytes per block of \p type, at compile time.
constexpr int blockSizeOf(GgmlType type) {
  switch (type) {
#define GGML_TYPE(Name, Id, BlockSize, TypeSize, IrName, Loadable)             \
  case GgmlType::Name:                                                         \
    return BlockSize;
#include "runtime/format/GgmlTypes.def"
  }
  return 0;
}
constexpr int typeSizeOf(GgmlType type) {
  switch (type) {
#define GGML_TYPE(Name, Id, BlockSize, TypeSize, IrName, Loadable)             \
  case GgmlType::Name:                                                         \
    return TypeSize;
#include "runtime/format/GgmlTypes.def"
  }
  return 0;
}

/// Dequantises the \p n elements (whole blocks) of block type \p Type at
/// \p x. A template, so that the decoder inlines into a fully unrolled block
/// loop with constant i0, and restrict, so that the compiler need not assume
/// stores to \p y change the block and re-decode its scales for every group:
/// together they keep this as fast as hand-written whole-block loops.
template <GgmlType Type, Decode8Fn Decode8>
void dequantBlocks(const uint8_t *__restrict x, float *__restrict y,
                   int64_t n) {
  constexpr int kBlock = blockSizeOf(Type), kBytes = typeSizeOf(Type);
  static_assert(kBlock % 8 == 0);
  for (int64_t i = 0; i < n; i += kBlock, x += kBytes)
#pragma clang loop unroll(full)
    for (int i0 = 0; i0 < kBlock; i0 += 8)
      Decode8(x, i0, y + i + i0);
}

/// The same for the scalar types (F32, F16, BF16; block size 1): whole groups
/// of 8 in place, a last partial group through a zero-padded copy.
template <GgmlType Type, Decode8Fn Decode8>
void dequantScalars(const uint8_t *__restrict x, float *__restrict y,
                    int64_t n) {
  constexpr int kBytes = typeSizeOf(Type);
  static_assert(blockSizeOf(Type) == 1);
  int64_t whole = n - n % 8;
  for (int64_t i = 0; i < whole; i += 8)
    Decode8(x + i * kBytes, 0, y + i);
  if (whole == n)
    return;
  size_t rest = static_cast<size_t>(n - whole);
  uint8_t padded[8 * kBytes] = {};
  std::memcpy(padded, x + whole * kBytes, rest * kBytes);
  float out[8];
  Decode8(padded, 0, out);
  std::memcpy(y + whole, out, rest * sizeof(float));
}

//===----------------------------------------------------------------------===//
// Quantisation helpers
//===----------------------------------------------------------------------===//

/// round(v) (halfway away from zero) clamped to [lo, hi]; NaN gives lo
/// instead of undefined behaviour.
int clampRound(float v, int lo, int hi) {
  if (!(v >= static_cast<float>(lo)))
    return lo;
  if (v >= static_cast<float>(hi))
    return hi;
  return static_cast<int>(std::round(v));
}

/// Index of the element with the largest magnitude (first one on ties).
int argMaxAbs(const float *x, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (std::fabs(x[i]) > std::fabs(x[best]))
      best = i;
  return best;
}

/// Least-squares fit of x ~ a*q - m (a >= 0, m >= 0, q in [0, nmax]) for one
/// K-quant sub-block: sweeps the grid step around (max - min) / nmax and
/// refits a and m to each rounding.
void fitAffine(const float *x, int n, int nmax, float &scale, float &minOut) {
  float xmin = x[0], xmax = x[0];
  for (int i = 1; i < n; ++i) {
    xmin = std::min(xmin, x[i]);
    xmax = std::max(xmax, x[i]);
  }
  // The stored min is subtracted, so the lowest representable value is <= 0.
  xmin = std::min(xmin, 0.0f);
  if (!(xmax > xmin)) {
    scale = 0;
    minOut = -xmin;
    return;
  }
  auto errorOf = [&](float a, float c) {
    double err = 0;
    for (int i = 0; i < n; ++i) {
      float q = static_cast<float>(clampRound((x[i] - c) / a, 0, nmax));
      double diff = static_cast<double>(a) * q + c - x[i];
      err += diff * diff;
    }
    return err;
  };
  float bestA = (xmax - xmin) / static_cast<float>(nmax), bestC = xmin;
  double bestErr = errorOf(bestA, bestC);
  int q[kQK];
  for (int step = -10; step <= 10; ++step) {
    float iscale =
        (static_cast<float>(nmax) + 0.1f * static_cast<float>(step)) /
        (xmax - xmin);
    double sq = 0, sqq = 0, sx = 0, sqx = 0;
    for (int i = 0; i < n; ++i) {
      q[i] = clampRound((x[i] - xmin) * iscale, 0, nmax);
      sq += q[i];
      sqq += static_cast<double>(q[i]) * q[i];
      sx += x[i];
      sqx += static_cast<double>(q[i]) * x[i];
    }
    double det = n * sqq - sq * sq;
    if (det <= 0)
      continue;
    double a = (n * sqx - sq * sx) / det;
    double c = (sqq * sx - sq * sqx) / det;
    if (c > 0) { // The offset may only pull values down.
      c = 0;
      a = sqx / sqq;
    }
    if (!(a > 0))
      continue;
    double err = errorOf(static_cast<float>(a), static_cast<float>(c));
    if (err < bestErr) {
      bestErr = err;
      bestA = static_cast<float>(a);
      bestC = static_cast<float>(c);
    }
  }
  scale = bestA;
  minOut = -bestC;
}

/// Least-squares symmetric fit x ~ a*q, q in [-nlo, nhi], for one sub-block:
/// maps the largest magnitude to either end of the range at a few stretches
/// and keeps the scale with the smallest squared error.
float fitSymmetric(const float *x, int n, int nlo, int nhi) {
  float amax = x[argMaxAbs(x, n)];
  if (amax == 0)
    return 0;
  double bestScore = -1;
  float bestA = 0;
  for (int end : {-nlo, nhi}) {
    for (int step = -8; step <= 8; ++step) {
      float iscale =
          (static_cast<float>(end) + 0.1f * static_cast<float>(step)) / amax;
      double sxq = 0, sqq = 0;
      for (int i = 0; i < n; ++i) {
        int q = clampRound(x[i] * iscale, -nlo, nhi);
        sxq += static_cast<double>(x[i]) * q;
        sqq += static_cast<double>(q) * q;
      }
      if (sqq <= 0)
        continue;
      // err = sum x^2 - sxq^2 / sqq at the optimal a = sxq / sqq.
      double score = sxq * sxq / sqq;
      if (score > bestScore) {
        bestScore = score;
        bestA = static_cast<float>(sxq / sqq);
      }
    }
  }
  return bestA;
}

/// Index of the IQ4_NL codebook value nearest to \p v.
int nearestKvalue(float v) {
  int best = 0;
  float bestDist = std::fabs(v - strata_kvalues_iq4nl[0]);
  for (int k = 1; k < 16; ++k) {
    float dist = std::fabs(v - static_cast<float>(strata_kvalues_iq4nl[k]));
    if (dist < bestDist) {
      bestDist = dist;
      best = k;
    }
  }
  return best;
}

/// Squared error of coding \p x with scale \p d on the IQ4_NL codebook.
double iq4Error(const float *x, int n, float d) {
  double err = 0;
  for (int i = 0; i < n; ++i) {
    float v = d != 0 ? x[i] / d : 0.0f;
    double diff =
        static_cast<double>(d) *
            static_cast<float>(strata_kvalues_iq4nl[nearestKvalue(v)]) -
        x[i];
    err += diff * diff;
  }
  return err;
}

/// Best signed scale d for x ~ d * kvalues_iq4nl[idx]: the largest magnitude
/// is mapped near either end of the (asymmetric) codebook, then d is refit by
/// least squares to the chosen indices.
float fitIq4(const float *x, int n) {
  float amax = x[argMaxAbs(x, n)];
  if (amax == 0)
    return 0;
  double bestScore = -1;
  float bestD = 0;
  for (int end : {-127, 113}) {
    for (int step = 0; step <= 15; ++step) {
      float d = amax / (static_cast<float>(end) *
                        (0.8f + 0.02f * static_cast<float>(step)));
      double sxk = 0, skk = 0;
      for (int i = 0; i < n; ++i) {
        float k = strata_kvalues_iq4nl[nearestKvalue(x[i] / d)];
        sxk += static_cast<double>(x[i]) * k;
        skk += static_cast<double>(k) * k;
      }
      double score = sxk * sxk / skk;
      if (score > bestScore) {
        bestScore = score;
        bestD = static_cast<float>(sxk / skk);
      }
    }
  }
  return bestD;
}

/// Writes the 16 nibbles of one 32-element IQ4 group (low nibbles = first
/// half) for scale \p d.
void packIq4(const float *x, float d, uint8_t *qs) {
  for (int j = 0; j < 16; ++j) {
    int lo = nearestKvalue(d != 0 ? x[j] / d : 0.0f);
    int hi = nearestKvalue(d != 0 ? x[j + 16] / d : 0.0f);
    qs[j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

/// The IQ3_S grid as float columns plus squared norms, for brute-force
/// nearest-neighbour search, and a map from each of the 8^4 points of the full
/// magnitude lattice to its grid index (-1 if the point is not on the grid).
struct Iq3sSearchGrid {
  float g[4][512];
  float norm[512];
  int16_t onGrid[4096];
  Iq3sSearchGrid() {
    std::fill(std::begin(onGrid), std::end(onGrid), int16_t(-1));
    for (int i = 0; i < 512; ++i) {
      norm[i] = 0;
      int key = 0;
      for (int k = 0; k < 4; ++k) {
        uint32_t mag = (strata_iq3s_grid[i] >> (8 * k)) & 0xff;
        g[k][i] = static_cast<float>(mag);
        norm[i] += g[k][i] * g[k][i];
        key |= static_cast<int>((mag - 1) / 2) << (3 * k);
      }
      onGrid[key] = static_cast<int16_t>(i);
    }
  }
};

const Iq3sSearchGrid &iq3sSearchGrid() {
  static const Iq3sSearchGrid grid;
  return grid;
}

/// Index of the IQ3_S grid entry nearest (L2) to the magnitudes \p t.
int nearestIq3s(const float *t) {
  const Iq3sSearchGrid &s = iq3sSearchGrid();
  // The distance is a sum over coordinates, so if the per-coordinate nearest
  // odd magnitudes form a grid entry, that entry is the answer.
  int key = 0;
  for (int k = 0; k < 4; ++k)
    key |= clampRound((t[k] - 1.0f) * 0.5f, 0, 7) << (3 * k);
  if (s.onGrid[key] >= 0)
    return s.onGrid[key];
  // Otherwise brute force: |t - g|^2 = |t|^2 + |g|^2 - 2 t.g, where |t|^2 is
  // common to all entries. Two loops so the first one vectorises.
  float score[512];
  for (int i = 0; i < 512; ++i)
    score[i] = s.norm[i] - 2.0f * (t[0] * s.g[0][i] + t[1] * s.g[1][i] +
                                   t[2] * s.g[2][i] + t[3] * s.g[3][i]);
  int best = 0;
  for (int i = 1; i < 512; ++i)
    if (score[i] < score[best])
      best = i;
  return best;
}

/// Grid indices for the 8 quads of 32 magnitudes \p ax at scale \p db.
void iq3sAssign(const float *ax, float db, int *idx) {
  for (int quad = 0; quad < 8; ++quad) {
    float t[4];
    for (int k = 0; k < 4; ++k)
      t[k] = db > 0 ? ax[4 * quad + k] / db : 0.0f;
    idx[quad] = nearestIq3s(t);
  }
}

/// Squared error of magnitudes \p ax coded as db * grid[idx].
double iq3sError(const float *ax, float db, const int *idx) {
  double err = 0;
  for (int quad = 0; quad < 8; ++quad)
    for (int k = 0; k < 4; ++k) {
      double diff = static_cast<double>(db) * iq3sSearchGrid().g[k][idx[quad]] -
                    ax[4 * quad + k];
      err += diff * diff;
    }
  return err;
}

/// Best float sub-block scale for 32 magnitudes: the largest magnitude is
/// mapped to the levels 9, 11, ..., 17 (the top grid level is 15; above it
/// the largest values clip), then the scale is refit by least squares to the
/// chosen grid entries.
float fitIq3s(const float *ax) {
  float amax = *std::max_element(ax, ax + 32);
  if (amax == 0)
    return 0;
  double bestScore = -1;
  float bestDb = amax / 15.0f;
  int idx[8];
  for (int top = 9; top <= 17; top += 2) {
    iq3sAssign(ax, amax / static_cast<float>(top), idx);
    double sag = 0, sgg = 0;
    for (int quad = 0; quad < 8; ++quad)
      for (int k = 0; k < 4; ++k) {
        float g = iq3sSearchGrid().g[k][idx[quad]];
        sag += static_cast<double>(ax[4 * quad + k]) * g;
        sgg += static_cast<double>(g) * g;
      }
    double score = sag * sag / sgg;
    if (score > bestScore) {
      bestScore = score;
      bestDb = static_cast<float>(sag / sgg);
    }
  }
  return bestDb;
}

//===----------------------------------------------------------------------===//
// Quantisation, one function per format; each handles nb blocks.
//===----------------------------------------------------------------------===//

void quantF32(const float *x, uint8_t *y, int64_t nb) {
  std::memcpy(y, x, static_cast<size_t>(nb) * sizeof(float));
}

void quantF16(const float *x, uint8_t *y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i)
    storeU16(y + 2 * i, fp32ToFp16(x[i]));
}

void quantBF16(const float *x, uint8_t *y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i)
    storeU16(y + 2 * i, fp32ToBf16(x[i]));
}

// Same arithmetic as ggml's quantize_row_q8_0_ref / gguf-py's Q8_0.
void quantQ8_0(const float *x, uint8_t *y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32, y += 34) {
    float amax = 0;
    for (int j = 0; j < 32; ++j)
      amax = std::max(amax, std::fabs(x[j]));
    float d = amax / 127;
    float id = d != 0 ? 1.0f / d : 0.0f;
    storeU16(y, fp32ToFp16(d));
    for (int j = 0; j < 32; ++j)
      y[2 + j] = static_cast<uint8_t>(
          static_cast<int8_t>(clampRound(x[j] * id, -127, 127)));
  }
}

// Same arithmetic as ggml's quantize_row_q4_0_ref / gguf-py's Q4_0 (the
// unfused x*id + 8.5 is what makes it match).
void quantQ4_0(const float *x, uint8_t *y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32, y += 18) {
    float max = x[argMaxAbs(x, 32)];
    float d = max / -8;
    float id = d != 0 ? 1.0f / d : 0.0f;
    storeU16(y, fp32ToFp16(d));
    uint8_t q[32];
    for (int j = 0; j < 32; ++j) {
      float v = x[j] * id + 8.5f;
      q[j] = static_cast<uint8_t>(v >= 0 ? std::min(std::trunc(v), 15.0f) : 0);
    }
    for (int j = 0; j < 16; ++j)
      y[2 + j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));
  }
}

/// Shared Q4_K / Q5_K quantiser: 8 affine sub-blocks of 32 with 6-bit scales
/// and mins under two f16 super-scales. Writes d, dmin, scales[12] at \p y and
/// the quants (0..nmax) to \p q.
void quantKAffine(const float *x, uint8_t *y, int nmax, uint8_t *q) {
  float a[8], m[8];
  for (int j = 0; j < 8; ++j)
    fitAffine(x + 32 * j, 32, nmax, a[j], m[j]);
  float maxA = *std::max_element(a, a + 8);
  float maxM = *std::max_element(m, m + 8);
  uint16_t dBits = fp32ToFp16(maxA / 63);
  uint16_t dminBits = fp32ToFp16(maxM / 63);
  float d = fp16ToFp32(dBits), dmin = fp16ToFp32(dminBits);
  uint8_t sc[8], mn[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>(d > 0 ? clampRound(a[j] / d, 0, 63) : 0);
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
  // Requantise against the scales the decoder will actually see.
  for (int j = 0; j < 8; ++j) {
    float ds = d * static_cast<float>(sc[j]);
    float dm = dmin * static_cast<float>(mn[j]);
    for (int l = 0; l < 32; ++l)
      q[32 * j + l] = static_cast<uint8_t>(
          ds > 0 ? clampRound((x[32 * j + l] + dm) / ds, 0, nmax) : 0);
  }
}

void quantQ4_K(const float *x, uint8_t *y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK, y += 144) {
    uint8_t q[kQK];
    quantKAffine(x, y, 15, q);
    uint8_t *qs = y + 16;
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l)
        qs[32 * c + l] =
            static_cast<uint8_t>(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
  }
}

void quantQ5_K(const float *x, uint8_t *y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK, y += 176) {
    uint8_t q[kQK];
    quantKAffine(x, y, 31, q);
    uint8_t *qh = y + 16;
    uint8_t *qs = y + 48;
    std::memset(qh, 0, 32);
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) {
        uint8_t lo = q[64 * c + l], hi = q[64 * c + 32 + l];
        qs[32 * c + l] = static_cast<uint8_t>((lo & 0xf) | ((hi & 0xf) << 4));
        qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) |
                                      ((hi >> 4) << (2 * c + 1)));
      }
  }
}

void quantQ6_K(const float *x, uint8_t *y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK, y += 210) {
    float a[16];
    for (int j = 0; j < 16; ++j)
      a[j] = fitSymmetric(x + 16 * j, 16, 32, 31);
    float maxA = std::fabs(a[argMaxAbs(a, 16)]);
    uint16_t dBits = fp32ToFp16(maxA / 127);
    float d = fp16ToFp32(dBits);
    int8_t sc[16];
    uint8_t q[kQK]; // biased by 32: 0..63
    for (int j = 0; j < 16; ++j) {
      sc[j] = static_cast<int8_t>(d > 0 ? clampRound(a[j] / d, -127, 127) : 0);
      float ds = d * static_cast<float>(sc[j]);
      for (int l = 0; l < 16; ++l)
        q[16 * j + l] = static_cast<uint8_t>(
            (ds != 0 ? clampRound(x[16 * j + l] / ds, -32, 31) : 0) + 32);
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
}

void quantIQ4_NL(const float *x, uint8_t *y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32, y += 18) {
    uint16_t dBits = fp32ToFp16(fitIq4(x, 32));
    storeU16(y, dBits);
    packIq4(x, fp16ToFp32(dBits), y + 2);
  }
}

void quantIQ4_XS(const float *x, uint8_t *y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK, y += 136) {
    float a[8];
    for (int ib = 0; ib < 8; ++ib)
      a[ib] = fitIq4(x + 32 * ib, 32);
    // The 6-bit signed sub-scale spans -32..31; put the largest at -32.
    uint16_t dBits = fp32ToFp16(a[argMaxAbs(a, 8)] / -32);
    float d = fp16ToFp32(dBits);
    uint16_t scalesH = 0;
    uint8_t *scalesL = y + 4;
    std::memset(scalesL, 0, 4);
    for (int ib = 0; ib < 8; ++ib) {
      const float *xb = x + 32 * ib;
      int ls = d != 0 ? clampRound(a[ib] / d, -32, 31) : 0;
      // Rounding the sub-scale to 6 bits can make a neighbour better.
      double bestErr = iq4Error(xb, 32, d * static_cast<float>(ls));
      for (int cand : {ls - 1, ls + 1}) {
        if (cand < -32 || cand > 31 || d == 0)
          continue;
        double err = iq4Error(xb, 32, d * static_cast<float>(cand));
        if (err < bestErr) {
          bestErr = err;
          ls = cand;
        }
      }
      packIq4(xb, d * static_cast<float>(ls), y + 8 + 16 * ib);
      unsigned biased = static_cast<unsigned>(ls + 32);
      scalesL[ib / 2] |= static_cast<uint8_t>((biased & 0xf) << (4 * (ib % 2)));
      scalesH |= static_cast<uint16_t>((biased >> 4) << (2 * ib));
    }
    storeU16(y, dBits);
    storeU16(y + 2, scalesH);
  }
}

void quantIQ3_S(const float *x, uint8_t *y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK, y += 110) {
    float ax[kQK];
    for (int j = 0; j < kQK; ++j)
      ax[j] = std::fabs(x[j]);
    float db[8];
    for (int ib = 0; ib < 8; ++ib)
      db[ib] = fitIq3s(ax + 32 * ib);
    // Sub-block multipliers are 1 + 2s = 1..31.
    uint16_t dBits = fp32ToFp16(*std::max_element(db, db + 8) / 31);
    float d = fp16ToFp32(dBits);
    std::memset(y, 0, 110);
    storeU16(y, dBits);
    uint8_t *qs = y + 2, *qh = y + 66, *signs = y + 74, *scales = y + 106;
    for (int ib = 0; ib < 8; ++ib) {
      const float *axb = ax + 32 * ib;
      int s = d > 0 ? clampRound((db[ib] / d - 1) / 2, 0, 15) : 0;
      int idx[8];
      iq3sAssign(axb, d * static_cast<float>(1 + 2 * s), idx);
      double bestErr = iq3sError(axb, d * static_cast<float>(1 + 2 * s), idx);
      // The 4-bit odd multiplier is coarse; a neighbour may fit better.
      for (int cand : {s - 1, s + 1}) {
        if (cand < 0 || cand > 15 || d == 0)
          continue;
        float dbq = d * static_cast<float>(1 + 2 * cand);
        int candIdx[8];
        iq3sAssign(axb, dbq, candIdx);
        double err = iq3sError(axb, dbq, candIdx);
        if (err < bestErr) {
          bestErr = err;
          s = cand;
          std::copy(candIdx, candIdx + 8, idx);
        }
      }
      scales[ib / 2] |= static_cast<uint8_t>(s << (4 * (ib % 2)));
      for (int quad = 0; quad < 8; ++quad) {
        qs[8 * ib + quad] = static_cast<uint8_t>(idx[quad] & 0xff);
        qh[ib] |= static_cast<uint8_t>((idx[quad] >> 8) << quad);
      }
      // Signs are free bits in IQ3_S (no parity constraint).
      for (int l = 0; l < 4; ++l)
        for (int k = 0; k < 8; ++k)
          if (x[32 * ib + 8 * l + k] < 0)
            signs[4 * ib + l] |= static_cast<uint8_t>(1u << k);
    }
  }
}

/// Dequantises n elements, a whole number of blocks.
using DequantFn = void (*)(const uint8_t *, float *, int64_t);
using QuantFn = void (*)(const float *, uint8_t *, int64_t);

struct Codec {
  GgmlType type;
  DequantFn dequant;
  QuantFn quant; // null: dequantisation only
};

constexpr Codec kCodecs[] = {
    {GgmlType::F32, dequantScalars<GgmlType::F32, strata_dq8_f32>, quantF32},
    {GgmlType::F16, dequantScalars<GgmlType::F16, strata_dq8_f16>, quantF16},
    {GgmlType::BF16, dequantScalars<GgmlType::BF16, strata_dq8_bf16>,
     quantBF16},
    {GgmlType::Q8_0, dequantBlocks<GgmlType::Q8_0, strata_dq8_q8_0>, quantQ8_0},
    {GgmlType::Q4_0, dequantBlocks<GgmlType::Q4_0, strata_dq8_q4_0>, quantQ4_0},
    {GgmlType::Q4_K, dequantBlocks<GgmlType::Q4_K, strata_dq8_q4_k>, quantQ4_K},
    {GgmlType::Q5_K, dequantBlocks<GgmlType::Q5_K, strata_dq8_q5_k>, quantQ5_K},
    {GgmlType::Q6_K, dequantBlocks<GgmlType::Q6_K, strata_dq8_q6_k>, quantQ6_K},
    {GgmlType::IQ4_NL, dequantBlocks<GgmlType::IQ4_NL, strata_dq8_iq4_nl>,
     quantIQ4_NL},
    {GgmlType::IQ4_XS, dequantBlocks<GgmlType::IQ4_XS, strata_dq8_iq4_xs>,
     quantIQ4_XS},
    {GgmlType::IQ3_S, dequantBlocks<GgmlType::IQ3_S, strata_dq8_iq3_s>,
     quantIQ3_S},
    {GgmlType::IQ3_XXS, dequantBlocks<GgmlType::IQ3_XXS, strata_dq8_iq3_xxs>,
     nullptr},
    {GgmlType::IQ2_XXS, dequantBlocks<GgmlType::IQ2_XXS, strata_dq8_iq2_xxs>,
     nullptr},
};

const Codec *findCodec(GgmlType type) {
  for (const Codec &c : kCodecs)
    if (c.type == type)
      return &c;
  return nullptr;
}

/// Number of blocks in \p n elements, or -1 if \p n is not a whole number of
/// blocks.
int64_t blockCount(GgmlType type, int64_t n) {
  int64_t bs = ggmlTypeInfo(type).blockSize;
  if (n < 0 || n % bs != 0)
    return -1;
  return n / bs;
}

} // namespace

bool canDequantize(GgmlType type) { return findCodec(type) != nullptr; }

bool canQuantize(GgmlType type) {
  const Codec *c = findCodec(type);
  return c && c->quant;
}

int64_t rowSizeInBytes(GgmlType type, int64_t n) {
  int64_t nb = blockCount(type, n);
  return nb < 0 ? -1 : nb * ggmlTypeInfo(type).typeSize;
}

bool dequantizeRow(GgmlType type, const uint8_t *src, float *dst, int64_t n) {
  const Codec *c = findCodec(type);
  int64_t nb = blockCount(type, n);
  if (!c || nb < 0)
    return false;
  c->dequant(src, dst, n);
  return true;
}

bool quantizeRow(GgmlType type, const float *src, uint8_t *dst, int64_t n) {
  const Codec *c = findCodec(type);
  int64_t nb = blockCount(type, n);
  if (!c || !c->quant || nb < 0)
    return false;
  c->quant(src, dst, nb);
  return true;
}

} // namespace strata::format
