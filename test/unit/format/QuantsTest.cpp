//===- QuantsTest.cpp - fp16/bf16 and ggml block codec tests --------------===//
//
// Bit-exactness against gguf-py is checked by test/golden/quants_oracle.py;
// these tests pin known values, hand-built blocks, the generated grids and
// the quantisers' error on Gaussian data without needing Python.
//
//===----------------------------------------------------------------------===//
#include "runtime/format/Quants.h"

#include "runtime/format/BlockDecodeHost.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <random>
#include <vector>

using namespace strata::format;

namespace {

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float floatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void putF16(std::vector<uint8_t> &b, size_t at, float v) {
  uint16_t h = fp32ToFp16(v);
  b[at] = static_cast<uint8_t>(h);
  b[at + 1] = static_cast<uint8_t>(h >> 8);
}

std::vector<float> dequant(GgmlType type, const std::vector<uint8_t> &bytes) {
  GgmlTypeInfo info = ggmlTypeInfo(type);
  int64_t n =
      static_cast<int64_t>(bytes.size() / info.typeSize) * info.blockSize;
  std::vector<float> out(static_cast<size_t>(n));
  EXPECT_TRUE(dequantizeRow(type, bytes.data(), out.data(), n));
  return out;
}

/// Deterministic standard normal samples (Box-Muller on mt19937, so the data
/// is the same with every standard library).
std::vector<float> gaussian(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; i += 2) {
    double u1 = (gen() + 1.0) / 4294967297.0;
    double u2 = gen() / 4294967296.0;
    double r = std::sqrt(-2.0 * std::log(u1));
    out[i] = static_cast<float>(r * std::cos(2 * std::numbers::pi * u2));
    if (i + 1 < n)
      out[i + 1] = static_cast<float>(r * std::sin(2 * std::numbers::pi * u2));
  }
  return out;
}

double nmse(const std::vector<float> &x, const std::vector<float> &y) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    err +=
        (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
    ref += static_cast<double>(x[i]) * x[i];
  }
  return err / ref;
}

std::vector<float> roundTrip(GgmlType type, const std::vector<float> &x) {
  int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> bytes(static_cast<size_t>(rowSizeInBytes(type, n)));
  EXPECT_TRUE(quantizeRow(type, x.data(), bytes.data(), n));
  std::vector<float> y(x.size());
  EXPECT_TRUE(dequantizeRow(type, bytes.data(), y.data(), n));
  return y;
}

//===----------------------------------------------------------------------===//
// fp16 / bf16
//===----------------------------------------------------------------------===//

TEST(Fp16, KnownValues) {
  EXPECT_EQ(fp16ToFp32(0x3c00), 1.0f);
  EXPECT_EQ(fp16ToFp32(0xc000), -2.0f);
  EXPECT_EQ(fp16ToFp32(0x7bff), 65504.0f);
  EXPECT_EQ(fp16ToFp32(0x0400), std::ldexp(1.0f, -14));
  EXPECT_EQ(fp16ToFp32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(fp16ToFp32(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(fp16ToFp32(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(bitsOf(fp16ToFp32(0x8000)), 0x80000000u);
  EXPECT_EQ(fp16ToFp32(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(fp16ToFp32(0xfc00), -std::numeric_limits<float>::infinity());
  // NaN payloads move up by 13 bits and signalling NaNs stay signalling.
  EXPECT_EQ(bitsOf(fp16ToFp32(0x7c01)), 0x7f802000u);
  EXPECT_EQ(bitsOf(fp16ToFp32(0xfe00)), 0xffc00000u);
}

TEST(Fp16, EveryPatternRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h)
    ASSERT_EQ(fp32ToFp16(fp16ToFp32(static_cast<uint16_t>(h))), h) << h;
}

TEST(Fp16, RoundsToNearestEven) {
  EXPECT_EQ(fp32ToFp16(1.0f), 0x3c00);
  EXPECT_EQ(fp32ToFp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00); // tie, even
  EXPECT_EQ(fp32ToFp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(fp32ToFp16(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)),
            0x3c01);
  EXPECT_EQ(fp32ToFp16(65504.0f), 0x7bff);
  EXPECT_EQ(fp32ToFp16(65519.99f), 0x7bff);
  EXPECT_EQ(fp32ToFp16(65520.0f), 0x7c00);
  EXPECT_EQ(fp32ToFp16(-1e10f), 0xfc00);
  EXPECT_EQ(fp32ToFp16(std::numeric_limits<float>::infinity()), 0x7c00);
  // Subnormal results and underflow.
  EXPECT_EQ(fp32ToFp16(std::ldexp(1.0f, -25)), 0x0000); // tie, even
  EXPECT_EQ(fp32ToFp16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(fp32ToFp16(std::ldexp(3.0f, -25)), 0x0002); // 1.5 ulp, even
  EXPECT_EQ(fp32ToFp16(std::ldexp(5.0f, -25)), 0x0002); // 2.5 ulp, even
  EXPECT_EQ(fp32ToFp16(-std::ldexp(1.0f, -24)), 0x8001);
  // The largest subnormal plus half an ulp carries into the smallest normal.
  EXPECT_EQ(fp32ToFp16(std::ldexp(2047.0f, -25)), 0x0400);
  EXPECT_EQ(fp32ToFp16(1e-30f), 0x0000);
  EXPECT_EQ(fp32ToFp16(-0.0f), 0x8000);
  // NaN stays NaN (payload truncated, never zero), sign kept.
  EXPECT_EQ(fp32ToFp16(floatOf(0x7fc00000)), 0x7e00);
  EXPECT_EQ(fp32ToFp16(floatOf(0x7f800001)), 0x7c01);
  EXPECT_EQ(fp32ToFp16(floatOf(0xffc00000)), 0xfe00);
}

#ifdef __FLT16_MAX__
// The compiler's _Float16 conversion is an independent, correctly rounded
// reference for every non-NaN input.
TEST(Fp16, MatchesCompilerConversion) {
  for (uint64_t u = 0; u <= 0xffffffffu; u += 251) {
    float f = floatOf(static_cast<uint32_t>(u));
    if (std::isnan(f))
      continue;
    _Float16 h = static_cast<_Float16>(f);
    uint16_t expected;
    std::memcpy(&expected, &h, 2);
    ASSERT_EQ(fp32ToFp16(f), expected) << std::hex << u;
  }
}
#endif

TEST(Bf16, Conversions) {
  EXPECT_EQ(fp32ToBf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16ToFp32(0x3f80), 1.0f);
  EXPECT_EQ(bf16ToFp32(0xc040), -3.0f);
  EXPECT_EQ(fp32ToBf16(floatOf(0x3f808000)), 0x3f80); // tie, even
  EXPECT_EQ(fp32ToBf16(floatOf(0x3f818000)), 0x3f82); // tie, even
  EXPECT_EQ(fp32ToBf16(floatOf(0x3f808001)), 0x3f81);
  EXPECT_EQ(fp32ToBf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(fp32ToBf16(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(fp32ToBf16(floatOf(0x00000001)), 0x0000);
  EXPECT_EQ(fp32ToBf16(floatOf(0x7f800001)), 0x7fc0); // quietened
  EXPECT_EQ(fp32ToBf16(floatOf(0xff812345)), 0xffc1);
  for (uint32_t b = 0; b < 0x10000; ++b) {
    if ((b & 0x7fff) > 0x7f80 && !(b & 0x40))
      continue; // signalling NaNs come back quiet
    ASSERT_EQ(fp32ToBf16(bf16ToFp32(static_cast<uint16_t>(b))), b) << b;
  }
}

//===----------------------------------------------------------------------===//
// Generated tables (values quoted in gguf-and-quants.md 2.7, 2.9-2.12)
//===----------------------------------------------------------------------===//

TEST(IqGrids, QuotedValues) {
  EXPECT_EQ(strata_iq3s_grid[0], 0x01010101u);
  EXPECT_EQ(strata_iq3s_grid[1], 0x01010103u);
  EXPECT_EQ(strata_iq3s_grid[4], 0x0101010fu);
  EXPECT_EQ(strata_iq3s_grid[511], 0x0f0f0101u);
  EXPECT_EQ(strata_iq3xxs_grid[0], 0x04040404u);
  EXPECT_EQ(strata_iq3xxs_grid[255], 0x3e341c04u);
  EXPECT_EQ(strata_iq2xxs_grid[0], 0x0808080808080808ull);
  EXPECT_EQ(strata_iq2xxs_grid[255], 0x2b2b2b1908081908ull);
  const int kv[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                      1,    13,   25,  38,  53,  69,  89,  113};
  for (int i = 0; i < 16; ++i)
    EXPECT_EQ(strata_kvalues_iq4nl[i], kv[i]);
  for (int i = 0; i < 128; ++i) {
    int parity = __builtin_popcount(static_cast<unsigned>(i)) & 1;
    EXPECT_EQ(strata_ksigns_iq2xs[i], i | (parity << 7)) << i;
  }
}

//===----------------------------------------------------------------------===//
// Dequantisation of hand-built blocks
//===----------------------------------------------------------------------===//

TEST(Dequantize, Q8_0) {
  std::vector<uint8_t> b(34);
  putF16(b, 0, 0.5f);
  for (int j = 0; j < 32; ++j)
    b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j - 16));
  std::vector<float> y = dequant(GgmlType::Q8_0, b);
  for (int j = 0; j < 32; ++j)
    EXPECT_EQ(y[j], 0.5f * (j - 16));
}

TEST(Dequantize, Q4_0) {
  std::vector<uint8_t> b(18);
  putF16(b, 0, 2.0f);
  for (int j = 0; j < 16; ++j)
    b[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  std::vector<float> y = dequant(GgmlType::Q4_0, b);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 2.0f * (j - 8));
    EXPECT_EQ(y[j + 16], 2.0f * (7 - j));
  }
}

/// Packs 6-bit (scale, min) pairs as in the Q4_K diagram of gguf-py.
void packScaleMin(const int sc[8], const int m[8], uint8_t *scales) {
  for (int j = 0; j < 4; ++j) {
    scales[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    scales[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    scales[j + 8] =
        static_cast<uint8_t>((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
  }
}

TEST(Dequantize, Q4_K) {
  std::vector<uint8_t> b(144);
  putF16(b, 0, 0.25f);
  putF16(b, 2, 0.5f);
  const int sc[8] = {1, 7, 20, 63, 33, 48, 5, 17};
  const int m[8] = {0, 63, 2, 16, 31, 40, 58, 9};
  packScaleMin(sc, m, &b[4]);
  for (int i = 0; i < 128; ++i)
    b[16 + i] = static_cast<uint8_t>((i * 7) & 0xff);
  std::vector<float> y = dequant(GgmlType::Q4_K, b);
  for (int e = 0; e < 256; ++e) {
    int sub = e / 32, chunk = e / 64, l = e % 32;
    uint8_t byte = b[16 + 32 * chunk + l];
    int q = (sub % 2) ? byte >> 4 : byte & 15;
    EXPECT_EQ(y[e], 0.25f * sc[sub] * q - 0.5f * m[sub]) << e;
  }
}

TEST(Dequantize, Q5_K) {
  std::vector<uint8_t> b(176);
  putF16(b, 0, 0.125f);
  putF16(b, 2, 1.0f);
  const int sc[8] = {3, 9, 27, 63, 1, 40, 12, 33};
  const int m[8] = {5, 0, 63, 8, 17, 2, 44, 21};
  packScaleMin(sc, m, &b[4]);
  for (int i = 0; i < 32; ++i)
    b[16 + i] = static_cast<uint8_t>(i * 37 + 11);
  for (int i = 0; i < 128; ++i)
    b[48 + i] = static_cast<uint8_t>(i * 13 + 5);
  std::vector<float> y = dequant(GgmlType::Q5_K, b);
  for (int e = 0; e < 256; ++e) {
    int sub = e / 32, chunk = e / 64, l = e % 32;
    uint8_t byte = b[48 + 32 * chunk + l];
    int q =
        ((sub % 2) ? byte >> 4 : byte & 15) | (((b[16 + l] >> sub) & 1) << 4);
    EXPECT_EQ(y[e], 0.125f * sc[sub] * q - 1.0f * m[sub]) << e;
  }
}

TEST(Dequantize, Q6_K) {
  std::vector<uint8_t> b(210);
  std::mt19937 gen(7);
  for (int i = 0; i < 208; ++i)
    b[i] = static_cast<uint8_t>(gen());
  putF16(b, 208, 0.0625f);
  std::vector<float> y = dequant(GgmlType::Q6_K, b);
  // Element-wise restatement of the layout: half h, quarter k, lane l.
  for (int e = 0; e < 256; ++e) {
    int h = e / 128, k = (e % 128) / 32, l = e % 32;
    int lo = (b[64 * h + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 15;
    int hi = (b[128 + 32 * h + l] >> (2 * k)) & 3;
    int scale = static_cast<int8_t>(b[192 + e / 16]);
    EXPECT_EQ(y[e], 0.0625f * scale * ((lo | (hi << 4)) - 32)) << e;
  }
}

TEST(Dequantize, IQ4_NLAndIQ4_XS) {
  std::vector<uint8_t> nl(18);
  putF16(nl, 0, 0.5f);
  for (int j = 0; j < 16; ++j)
    nl[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  std::vector<float> y = dequant(GgmlType::IQ4_NL, nl);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * strata_kvalues_iq4nl[j]);
    EXPECT_EQ(y[j + 16], 0.5f * strata_kvalues_iq4nl[15 - j]);
  }

  std::vector<uint8_t> xs(136);
  putF16(xs, 0, 0.25f);
  const int ls[8] = {0, 63, 32, 31, 17, 48, 1, 62}; // stored (biased) values
  uint16_t scalesH = 0;
  for (int ib = 0; ib < 8; ++ib) {
    xs[4 + ib / 2] |= static_cast<uint8_t>((ls[ib] & 15) << (4 * (ib % 2)));
    scalesH |= static_cast<uint16_t>((ls[ib] >> 4) << (2 * ib));
  }
  xs[2] = static_cast<uint8_t>(scalesH);
  xs[3] = static_cast<uint8_t>(scalesH >> 8);
  for (int i = 0; i < 128; ++i)
    xs[8 + i] = static_cast<uint8_t>(i * 29 + 3);
  y = dequant(GgmlType::IQ4_XS, xs);
  for (int e = 0; e < 256; ++e) {
    int ib = e / 32, j = e % 16;
    uint8_t byte = xs[8 + 16 * ib + j];
    int idx = (e % 32) < 16 ? byte & 15 : byte >> 4;
    EXPECT_EQ(y[e], 0.25f * (ls[ib] - 32) * strata_kvalues_iq4nl[idx]) << e;
  }
}

TEST(Dequantize, IQ3_S) {
  std::vector<uint8_t> b(110);
  std::mt19937 gen(11);
  for (auto &v : b)
    v = static_cast<uint8_t>(gen());
  putF16(b, 0, 0.75f);
  std::vector<float> y = dequant(GgmlType::IQ3_S, b);
  for (int e = 0; e < 256; ++e) {
    int ib = e / 32, quad = (e % 32) / 4, k = e % 4;
    int idx = b[2 + 8 * ib + quad] | (((b[66 + ib] >> quad) & 1) << 8);
    int mag = (strata_iq3s_grid[idx] >> (8 * k)) & 0xff;
    int s = (b[106 + ib / 2] >> (4 * (ib % 2))) & 15;
    bool neg = (b[74 + e / 8] >> (e % 8)) & 1;
    float expected = 0.75f * (1 + 2 * s) * mag;
    EXPECT_EQ(y[e], neg ? -expected : expected) << e;
  }
}

TEST(Dequantize, IQ3_XXSAndIQ2_XXS) {
  std::vector<uint8_t> b(98);
  std::mt19937 gen(13);
  for (auto &v : b)
    v = static_cast<uint8_t>(gen());
  putF16(b, 0, 1.5f);
  std::vector<float> y = dequant(GgmlType::IQ3_XXS, b);
  for (int e = 0; e < 256; ++e) {
    int ib = e / 32, l = (e % 32) / 8, k = e % 8;
    uint32_t a;
    std::memcpy(&a, &b[2 + 64 + 4 * ib], 4);
    int mag =
        (strata_iq3xxs_grid[b[2 + 8 * ib + 2 * l + k / 4]] >> (8 * (k % 4))) &
        0xff;
    bool neg = (strata_ksigns_iq2xs[(a >> (7 * l)) & 127] >> k) & 1;
    float expected = 1.5f * (0.5f + (a >> 28)) * 0.5f * mag;
    EXPECT_EQ(y[e], neg ? -expected : expected) << e;
  }

  std::vector<uint8_t> c(66);
  for (auto &v : c)
    v = static_cast<uint8_t>(gen());
  putF16(c, 0, 0.375f);
  y = dequant(GgmlType::IQ2_XXS, c);
  for (int e = 0; e < 256; ++e) {
    int ib = e / 32, l = (e % 32) / 8, j = e % 8;
    uint32_t a1;
    std::memcpy(&a1, &c[2 + 8 * ib + 4], 4);
    int mag = static_cast<int>(
        (strata_iq2xxs_grid[c[2 + 8 * ib + l]] >> (8 * j)) & 0xff);
    bool neg = (strata_ksigns_iq2xs[(a1 >> (7 * l)) & 127] >> j) & 1;
    float expected = 0.375f * (0.5f + (a1 >> 28)) * 0.25f * mag;
    EXPECT_EQ(y[e], neg ? -expected : expected) << e;
  }
}

TEST(Dequantize, ScalarTypes) {
  std::vector<uint8_t> f16 = {0x00, 0x3c, 0x00, 0xc0, 0x01, 0x00, 0x00, 0x7c};
  std::vector<float> y = dequant(GgmlType::F16, f16);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -2.0f);
  EXPECT_EQ(y[2], std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(y[3]));
  std::vector<uint8_t> bf16 = {0x80, 0x3f, 0x40, 0xc0};
  y = dequant(GgmlType::BF16, bf16);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -3.0f);
  std::vector<uint8_t> f32(8);
  float src[2] = {3.5f, -0.0f};
  std::memcpy(f32.data(), src, 8);
  y = dequant(GgmlType::F32, f32);
  EXPECT_EQ(y[0], 3.5f);
  EXPECT_EQ(bitsOf(y[1]), 0x80000000u);
}

TEST(Dequantize, RejectsUnsupportedAndPartialBlocks) {
  std::vector<uint8_t> bytes(1024);
  std::vector<float> out(512);
  EXPECT_FALSE(dequantizeRow(GgmlType::Q4_1, bytes.data(), out.data(), 32));
  EXPECT_FALSE(dequantizeRow(GgmlType::I32, bytes.data(), out.data(), 4));
  EXPECT_FALSE(dequantizeRow(GgmlType::Q4_K, bytes.data(), out.data(), 128));
  EXPECT_FALSE(dequantizeRow(GgmlType::Q8_0, bytes.data(), out.data(), -32));
  EXPECT_TRUE(dequantizeRow(GgmlType::Q8_0, bytes.data(), out.data(), 0));
  EXPECT_FALSE(quantizeRow(GgmlType::IQ2_XXS, out.data(), bytes.data(), 256));
  EXPECT_FALSE(quantizeRow(GgmlType::Q6_K, out.data(), bytes.data(), 255));
  EXPECT_TRUE(canDequantize(GgmlType::IQ2_XXS));
  EXPECT_FALSE(canQuantize(GgmlType::IQ3_XXS));
  EXPECT_EQ(rowSizeInBytes(GgmlType::Q4_K, 512), 288);
  EXPECT_EQ(rowSizeInBytes(GgmlType::F16, 3), 6);
  EXPECT_EQ(rowSizeInBytes(GgmlType::IQ4_NL, 48), -1);
}

//===----------------------------------------------------------------------===//
// Quantisers
//===----------------------------------------------------------------------===//

struct NmseBar {
  GgmlType type;
  double bar;
};

// Bars from the uniform-quantiser estimate step^2/12 relative to a unit
// variance, with headroom; quants_oracle.py prints the measured values.
constexpr NmseBar kBars[] = {
    {GgmlType::F16, 1e-6},   {GgmlType::BF16, 1e-4},   {GgmlType::Q8_0, 1e-4},
    {GgmlType::Q4_0, 2e-2},  {GgmlType::Q6_K, 1e-3},   {GgmlType::Q5_K, 4e-3},
    {GgmlType::Q4_K, 1e-2},  {GgmlType::IQ4_NL, 1e-2}, {GgmlType::IQ4_XS, 1e-2},
    {GgmlType::IQ3_S, 4e-2},
};

TEST(Quantize, GaussianNmseBelowBar) {
  std::vector<float> x = gaussian(64 * 256, 42);
  for (const NmseBar &b : kBars) {
    std::vector<float> y = roundTrip(b.type, x);
    double e = nmse(x, y);
    EXPECT_LT(e, b.bar) << ggmlTypeInfo(b.type).name;
    // Scale invariance: the same data 1000x smaller fits just as well.
    std::vector<float> small(x);
    for (float &v : small)
      v *= 1e-3f;
    EXPECT_LT(nmse(small, roundTrip(b.type, small)), b.bar)
        << ggmlTypeInfo(b.type).name;
  }
}

TEST(Quantize, ZerosConstantsAndOutliers) {
  for (const NmseBar &b : kBars) {
    const char *name = ggmlTypeInfo(b.type).name;
    std::vector<float> zeros(256, 0.0f);
    for (float v : roundTrip(b.type, zeros))
      EXPECT_EQ(v, 0.0f) << name;
    std::vector<float> ones(256, 1.0f);
    EXPECT_LT(nmse(ones, roundTrip(b.type, ones)), b.bar) << name;
    std::vector<float> negatives(256, -0.3f);
    EXPECT_LT(nmse(negatives, roundTrip(b.type, negatives)), b.bar) << name;
    // One huge outlier per block must not produce non-finite values.
    std::vector<float> x = gaussian(256, 5);
    x[100] = 1000.0f;
    for (float v : roundTrip(b.type, x))
      EXPECT_TRUE(std::isfinite(v)) << name;
  }
}

TEST(Quantize, Q8_0MatchesReferenceArithmetic) {
  std::vector<float> x = gaussian(32, 9);
  std::vector<uint8_t> b(34);
  ASSERT_TRUE(quantizeRow(GgmlType::Q8_0, x.data(), b.data(), 32));
  float amax = 0;
  for (float v : x)
    amax = std::max(amax, std::fabs(v));
  float d = amax / 127;
  EXPECT_EQ(b[0] | (b[1] << 8), fp32ToFp16(d));
  for (int j = 0; j < 32; ++j)
    EXPECT_EQ(static_cast<int8_t>(b[2 + j]), std::round(x[j] * (1.0f / d)));
}

TEST(Quantize, IQ3_SKeepsEverySign) {
  // Odd numbers of negatives per group of 8: IQ3_S signs are free bits.
  std::vector<float> x = gaussian(256, 17);
  for (int i = 0; i < 256; ++i)
    if (i % 8 == 3)
      x[i] = -std::fabs(x[i]) - 0.1f;
  std::vector<float> y = roundTrip(GgmlType::IQ3_S, x);
  for (int i = 0; i < 256; ++i)
    EXPECT_EQ(std::signbit(x[i]), std::signbit(y[i])) << i;
}

TEST(Quantize, ScalarTypesConvert) {
  std::vector<float> x = {1.0f, -2.5f, 65520.0f, 1e-8f};
  std::vector<uint8_t> b(8);
  ASSERT_TRUE(quantizeRow(GgmlType::F16, x.data(), b.data(), 4));
  EXPECT_EQ(b[0] | (b[1] << 8), 0x3c00);
  EXPECT_EQ(b[4] | (b[5] << 8), 0x7c00);
  ASSERT_TRUE(quantizeRow(GgmlType::BF16, x.data(), b.data(), 4));
  EXPECT_EQ(b[0] | (b[1] << 8), 0x3f80);
  EXPECT_EQ(b[2] | (b[3] << 8), 0xc020);
}

} // namespace
