//===- BlockDecodeTest.cpp - 8-element decoders vs row dequantisation -----===//
//
// GPU kernels decode 8 elements at a time with BlockDecode.h; the CPU
// reference dequantises whole rows. Both must give the same bits. Blocks are
// drawn fresh each run (random bytes with finite f16 scale fields, which makes
// every block valid); the seed is printed and STRATA_TEST_SEED replays it.
//
//===----------------------------------------------------------------------===//
#include "runtime/format/BlockDecodeHost.h"
#include "runtime/format/GgmlType.h"
#include "runtime/format/Quants.h"
#include "test/unit/format/WideForms.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace strata::format;

namespace {

using Decode8Fn = void (*)(const uint8_t *, int, float *);

struct BlockCase {
  GgmlType type;
  Decode8Fn decode8;
  std::vector<int> f16Fields; ///< byte offsets of the f16 scales
  int maxBytesUsed; ///< bytes one 8-element decode may depend on (scales +
                    ///< its quants), from the layouts in BlockDecode.h
};

const std::vector<BlockCase> &blockCases() {
  static const std::vector<BlockCase> cases = {
      {GgmlType::Q8_0, strata_dq8_q8_0, {0}, 2 + 8},
      {GgmlType::Q4_0, strata_dq8_q4_0, {0}, 2 + 8},
      // d, dmin, up to 3 packed scale bytes, 8 quant bytes (+ 8 qh).
      {GgmlType::Q4_K, strata_dq8_q4_k, {0, 2}, 4 + 3 + 8},
      {GgmlType::Q5_K, strata_dq8_q5_k, {0, 2}, 4 + 3 + 8 + 8},
      // d, one scale, 8 ql + 8 qh bytes.
      {GgmlType::Q6_K, strata_dq8_q6_k, {208}, 2 + 1 + 8 + 8},
      {GgmlType::IQ4_NL, strata_dq8_iq4_nl, {0}, 2 + 8},
      // d, scales_h, one scales_l byte, 8 quant bytes.
      {GgmlType::IQ4_XS, strata_dq8_iq4_xs, {0}, 2 + 2 + 1 + 8},
      // d, scale, 2 grid indices, qh, signs.
      {GgmlType::IQ3_S, strata_dq8_iq3_s, {0}, 2 + 1 + 2 + 1 + 1},
      // d, 2 grid indices, the sub-block's scale-and-signs word.
      {GgmlType::IQ3_XXS, strata_dq8_iq3_xxs, {0}, 2 + 2 + 4},
      // d, 1 grid index, the sub-block's scale-and-signs word.
      {GgmlType::IQ2_XXS, strata_dq8_iq2_xxs, {0}, 2 + 1 + 4},
  };
  return cases;
}

uint32_t seedForRun() {
  if (const char *env = std::getenv("STRATA_TEST_SEED"))
    return static_cast<uint32_t>(std::strtoul(env, nullptr, 0));
  return std::random_device{}();
}

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

/// A random finite f16 (any sign, subnormals included; exponent field < 31).
uint16_t randomFiniteF16(std::mt19937 &gen) {
  for (;;) {
    auto h = static_cast<uint16_t>(gen());
    if (((h >> 10) & 0x1f) != 0x1f)
      return h;
  }
}

/// \p nb random valid blocks of \p c's type, starting at an odd address so
/// that the decoders' unaligned field reads are exercised.
std::vector<uint8_t> randomBlocks(const BlockCase &c, int64_t nb,
                                  std::mt19937 &gen) {
  int64_t typeSize = ggmlTypeInfo(c.type).typeSize;
  std::vector<uint8_t> bytes(static_cast<size_t>(1 + nb * typeSize));
  for (uint8_t &b : bytes)
    b = static_cast<uint8_t>(gen());
  for (int64_t i = 0; i < nb; ++i)
    for (int at : c.f16Fields) {
      uint16_t h = randomFiniteF16(gen);
      uint8_t *p = bytes.data() + 1 + i * typeSize + at;
      p[0] = static_cast<uint8_t>(h);
      p[1] = static_cast<uint8_t>(h >> 8);
    }
  return bytes;
}

class BlockDecode : public ::testing::Test {
protected:
  void SetUp() override {
    seed_ = seedForRun();
    gen_.seed(seed_);
    RecordProperty("seed", std::to_string(seed_));
    std::printf("BlockDecode seed: %u (replay with STRATA_TEST_SEED)\n", seed_);
  }
  uint32_t seed_ = 0;
  std::mt19937 gen_;
};

TEST_F(BlockDecode, EveryGroupOfEightMatchesRowDequantisation) {
  constexpr int64_t kBlocks = 64;
  for (const BlockCase &c : blockCases()) {
    GgmlTypeInfo info = ggmlTypeInfo(c.type);
    SCOPED_TRACE(info.name);
    std::vector<uint8_t> bytes = randomBlocks(c, kBlocks, gen_);
    const uint8_t *row = bytes.data() + 1;
    int64_t n = kBlocks * info.blockSize;
    std::vector<float> ref(static_cast<size_t>(n));
    ASSERT_TRUE(dequantizeRow(c.type, row, ref.data(), n));
    for (int64_t b = 0; b < kBlocks; ++b)
      for (int i0 = 0; i0 < static_cast<int>(info.blockSize); i0 += 8) {
        float out[8];
        c.decode8(row + b * info.typeSize, i0, out);
        for (int k = 0; k < 8; ++k)
          ASSERT_EQ(bitsOf(out[k]), bitsOf(ref[b * info.blockSize + i0 + k]))
              << "block " << b << " element " << i0 + k << " seed " << seed_;
      }
  }
}

using DecodeI8Fn = void (*)(const uint8_t *, int, uint32_t *, float *, float *);

/// The integer forms (BlockDecodeInt8.h): d * byte - dm is the float
/// decode, bit for bit, for every group of every random block.
TEST_F(BlockDecode, IntegerFormTimesScaleIsTheFloatDecode) {
  struct IntCase {
    GgmlType type;
    DecodeI8Fn di8;
    bool min;
  };
  const IntCase ints[] = {
      {GgmlType::Q8_0, strata_di8_q8_0, false},
      {GgmlType::Q4_K, strata_di8_q4_k, true},
      {GgmlType::Q5_K, strata_di8_q5_k, true},
      {GgmlType::Q6_K, strata_di8_q6_k, false},
      {GgmlType::IQ4_NL, strata_di8_iq4_nl, false},
      {GgmlType::IQ4_XS, strata_di8_iq4_xs, false},
      {GgmlType::IQ3_S, strata_di8_iq3_s, false},
  };
  constexpr int64_t kBlocks = 64;
  for (const IntCase &ic : ints) {
    const BlockCase *c = nullptr;
    for (const BlockCase &bc : blockCases())
      if (bc.type == ic.type)
        c = &bc;
    ASSERT_NE(c, nullptr);
    GgmlTypeInfo info = ggmlTypeInfo(ic.type);
    SCOPED_TRACE(info.name);
    std::vector<uint8_t> bytes = randomBlocks(*c, kBlocks, gen_);
    const uint8_t *row = bytes.data() + 1;
    for (int64_t b = 0; b < kBlocks; ++b)
      for (int i0 = 0; i0 < static_cast<int>(info.blockSize); i0 += 8) {
        float ref[8];
        c->decode8(row + b * info.typeSize, i0, ref);
        uint32_t q[2] = {0, 0};
        float d = 0, dm = 0;
        ic.di8(row + b * info.typeSize, i0, q, &d, &dm);
        for (int k = 0; k < 8; ++k) {
          float v = d * static_cast<float>(
                            static_cast<int8_t>(q[k / 4] >> (8 * (k % 4))));
          if (ic.min)
            v = v - dm;
          ASSERT_EQ(bitsOf(v), bitsOf(ref[k]))
              << "block " << b << " element " << i0 + k << " seed " << seed_;
        }
      }
  }
}

// The wide forms hold the eight-element forms' bytes and scales for their
// 32 elements (Q4_K: halves 32 apart; Q6_K: 64 apart, at blocks only 2-byte
// aligned as rows of 210-byte blocks place them), so the wide GEMV sums the
// same products.
TEST_F(BlockDecode, WideFormsAreFourEightElementPieces) {
  const widecheck::WideCase forms[] = {
      {GgmlType::Q4_K, strata_di8w_q4_k, strata_di8_q4_k, 32, true},
      {GgmlType::Q6_K, strata_di8w_q6_k, strata_di8_q6_k, 64, false}};
  for (const widecheck::WideCase &f : forms) {
    const BlockCase *c = nullptr;
    for (const BlockCase &bc : blockCases())
      if (bc.type == f.type)
        c = &bc;
    ASSERT_NE(c, nullptr);
    constexpr int64_t kBlocks = 64;
    const int64_t size = ggmlTypeInfo(f.type).typeSize;
    std::vector<uint8_t> bytes = randomBlocks(*c, kBlocks, gen_);
    for (int64_t b = 0; b < kBlocks; ++b)
      widecheck::expectWideIsPieces(
          f.wide, f.piece, f.span, f.min, bytes.data() + b * size,
          std::string(ggmlTypeInfo(f.type).name) + " block " +
              std::to_string(b) + " seed " + std::to_string(seed_));
  }
}

TEST_F(BlockDecode, Dp4aIsTheSumOfSignedByteProducts) {
  for (int i = 0; i < 10000; ++i) {
    uint32_t a = gen_(), b = gen_();
    int c = static_cast<int>(gen_() % 2001) - 1000;
    int want = c;
    for (int k = 0; k < 4; ++k)
      want +=
          static_cast<int8_t>(a >> (8 * k)) * static_cast<int8_t>(b >> (8 * k));
    ASSERT_EQ(strata_dp4a(a, b, c), want) << a << " " << b << " seed " << seed_;
  }
}

// The activations' side: within half a step of the scale, the sum exact.
TEST_F(BlockDecode, ActivationQuantisationRoundsToNearest) {
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (int i = 0; i < 10000; ++i) {
    float a[8];
    for (float &x : a)
      x = i % 97 == 0 ? 0.0f : nd(gen_);
    uint32_t q[2];
    float s;
    int sum;
    strata_qa8(a, q, &s, &sum);
    int want = 0;
    for (int k = 0; k < 8; ++k) {
      int v = static_cast<int8_t>(q[k / 4] >> (8 * (k % 4)));
      want += v;
      ASSERT_LE(std::abs(v), 127);
      ASSERT_LE(std::fabs(s * static_cast<float>(v) - a[k]),
                s * 0.5001f + 1e-30f)
          << "value " << a[k] << " seed " << seed_;
    }
    ASSERT_EQ(sum, want);
  }
}

// The decode GEMVs' int8 dot of a Q4_K row (codegen/gemm/GemmDecode.cpp's
// pieces): per piece of 8, (d s) dp4a(q, a8) - dm (s t), t the sum of the
// piece's int8 activations. That is the float dot of the decoded row with
// the quantised activations (up to f32 rounding: the min term is the
// quantised sum's, not the float one's), and against the unquantised
// activations it errs by the quantisation's share alone: Gaussian rows,
// NMSE about (amax / 127)^2 / 12 / sigma^2 = 1.6e-5 (a piece's amax
// ~1.8 sigma). The GPU's Q4_K experts exceeding the bf16 bar (1e-4) is
// not this arithmetic.
TEST_F(BlockDecode, Q4KInt8DotIsTheDotWithQuantisedActivations) {
  const BlockCase *c = nullptr;
  for (const BlockCase &bc : blockCases())
    if (bc.type == GgmlType::Q4_K)
      c = &bc;
  ASSERT_NE(c, nullptr);
  constexpr int64_t kRows = 256, kK = 2048, kPer = kK / 256;
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> scale(2e-5f, 6e-5f);
  double err = 0, sig = 0;
  for (int64_t r = 0; r < kRows; ++r) {
    // Small finite scales (d, dmin) as trained weights have; the rest
    // random (sub-block scales and mins, quants).
    std::vector<uint8_t> bytes = randomBlocks(*c, kPer, gen_);
    uint8_t *row = bytes.data() + 1;
    for (int64_t b = 0; b < kPer; ++b)
      for (int at : {0, 2}) {
        uint16_t h = strata_f32_to_f16(scale(gen_));
        row[b * 144 + at] = static_cast<uint8_t>(h);
        row[b * 144 + at + 1] = static_cast<uint8_t>(h >> 8);
      }
    std::vector<float> w(kK), a(kK);
    ASSERT_TRUE(dequantizeRow(GgmlType::Q4_K, row, w.data(), kK));
    for (float &x : a)
      x = nd(gen_);
    float acc = 0;
    double withQuant = 0, exact = 0, mag = 0;
    for (int64_t i0 = 0; i0 < kK; i0 += 8) {
      uint32_t qa[2], qw[2];
      float s, d, dm;
      int t;
      strata_qa8(a.data() + i0, qa, &s, &t);
      strata_di8_q4_k(row + i0 / 256 * 144, static_cast<int>(i0 % 256), qw, &d,
                      &dm);
      acc += (d * s) * static_cast<float>(strata_dp4a(
                           qw[1], qa[1], strata_dp4a(qw[0], qa[0], 0)));
      acc -= dm * (s * static_cast<float>(t));
      for (int k = 0; k < 8; ++k) {
        const double v = static_cast<double>(s) *
                         static_cast<int8_t>(qa[k / 4] >> (8 * (k % 4)));
        withQuant += static_cast<double>(w[i0 + k]) * v;
        exact += static_cast<double>(w[i0 + k]) * a[i0 + k];
        mag += std::fabs(static_cast<double>(w[i0 + k]) * v);
      }
    }
    ASSERT_LE(std::fabs(acc - withQuant), 1e-5 * mag)
        << "row " << r << " seed " << seed_;
    err += (acc - exact) * (acc - exact);
    sig += exact * exact;
  }
  std::printf("Q4_K int8 dot against float activations: NMSE %.3g\n",
              err / sig);
  EXPECT_LT(err / sig, 4e-5) << "seed " << seed_;
  EXPECT_GT(err / sig, 4e-6) << "seed " << seed_;
}

// A thread decoding 8 elements must not need the rest of the block: count the
// bytes whose change changes the decode and hold it to the layout's bound.
TEST_F(BlockDecode, GroupDependsOnlyOnItsScalesAndQuants) {
  for (const BlockCase &c : blockCases()) {
    GgmlTypeInfo info = ggmlTypeInfo(c.type);
    SCOPED_TRACE(info.name);
    std::vector<uint8_t> block = randomBlocks(c, 1, gen_);
    block.erase(block.begin());
    for (int i0 = 0; i0 < static_cast<int>(info.blockSize); i0 += 8) {
      float base[8];
      c.decode8(block.data(), i0, base);
      int used = 0;
      for (size_t at = 0; at < block.size(); ++at) {
        std::vector<uint8_t> changed = block;
        changed[at] ^= 0xff;
        float out[8];
        c.decode8(changed.data(), i0, out);
        used += std::memcmp(out, base, sizeof(out)) != 0;
      }
      EXPECT_LE(used, c.maxBytesUsed) << "i0 " << i0 << " seed " << seed_;
    }
  }
}

// F32, F16 and BF16 readers against row conversion, with every bit pattern
// (NaN and Inf included) possible and a row length that is not a multiple of
// 8, so that the padded last group of dequantizeRow is covered as well.
TEST_F(BlockDecode, ScalarReadersMatchRowConversion) {
  struct ScalarCase {
    GgmlType type;
    Decode8Fn decode8;
  };
  const ScalarCase cases[] = {{GgmlType::F32, strata_dq8_f32},
                              {GgmlType::F16, strata_dq8_f16},
                              {GgmlType::BF16, strata_dq8_bf16}};
  constexpr int64_t kN = 8 * 100 + 5;
  for (const ScalarCase &c : cases) {
    GgmlTypeInfo info = ggmlTypeInfo(c.type);
    SCOPED_TRACE(info.name);
    std::vector<uint8_t> bytes(static_cast<size_t>(1 + kN * info.typeSize));
    for (uint8_t &b : bytes)
      b = static_cast<uint8_t>(gen_());
    const uint8_t *row = bytes.data() + 1;
    std::vector<float> ref(kN);
    ASSERT_TRUE(dequantizeRow(c.type, row, ref.data(), kN));
    for (int i0 = 0; i0 + 8 <= kN; i0 += 8) {
      float out[8];
      c.decode8(row, i0, out);
      for (int k = 0; k < 8; ++k)
        ASSERT_EQ(bitsOf(out[k]), bitsOf(ref[i0 + k]))
            << "element " << i0 + k << " seed " << seed_;
    }
  }
}

// BlockDecode.h needs no contraction setting because Q4_K/Q5_K's products
// are exact: (d*sc)*q - dmin*m, fused either way or not at all, rounds once.
// Every finite f16 d, with random dmin, 6-bit sc and m, 5-bit q.
TEST_F(BlockDecode, KQuantValueIsTheSameFusedOrNot) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00)
      continue;
    float d = strata_f16_to_f32(static_cast<uint16_t>(h));
    for (int rep = 0; rep < 16; ++rep) {
      float dmin = strata_f16_to_f32(randomFiniteF16(gen_));
      auto sc = static_cast<float>(gen_() & 63);
      auto m = static_cast<float>(gen_() & 63);
      auto q = static_cast<float>(gen_() & 31);
      float d1 = d * sc, mf = dmin * m;
      volatile float product = d1 * q; // rounded on its own
      float separate = product - mf;
      ASSERT_EQ(bitsOf(separate), bitsOf(std::fma(d1, q, -mf)))
          << h << " seed " << seed_;
      ASSERT_EQ(bitsOf(separate), bitsOf(std::fma(-dmin, m, d1 * q)))
          << h << " seed " << seed_;
    }
  }
}

#ifdef __FLT16_MAX__
// The compiler's _Float16 -> float conversion is an independent reference for
// every non-NaN half, subnormals included.
TEST(BlockDecodeScalars, F16MatchesTheCompilersConversionOffNaN) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0)
      continue; // NaN payloads: the oracle keeps them, hardware may not
    _Float16 x;
    uint16_t bits = static_cast<uint16_t>(h);
    std::memcpy(&x, &bits, sizeof(x));
    ASSERT_EQ(bitsOf(strata_f16_to_f32(bits)), bitsOf(static_cast<float>(x)))
        << h;
  }
}
#endif

// The codebook words the byte-permute lookup uses are kvalues_iq4nl, and the
// lookup (strata_byte_perm's portable form here; prmt.b32 on sm_90, checked
// there by the differential suite) gives every code at both nibble
// positions.
TEST(BlockDecodeScalars, Iq4nlLookupIsTheTable) {
  const uint32_t words[4] = {STRATA_IQ4NL_W0, STRATA_IQ4NL_W1, STRATA_IQ4NL_W2,
                             STRATA_IQ4NL_W3};
  for (int c = 0; c < 16; ++c)
    ASSERT_EQ(static_cast<int8_t>(words[c / 4] >> (8 * (c % 4))),
              strata_kvalues_iq4nl[c])
        << c;
  for (int shift : {0, 4})
    for (int c = 0; c < 16; ++c)
      for (int pos = 0; pos < 8; ++pos) {
        uint8_t q[8];
        for (int k = 0; k < 8; ++k) // the other codes differ from c
          q[k] = static_cast<uint8_t>(((c + k + 1) & 15) << shift |
                                      ((c + 3 * k) & 15) << (4 - shift));
        q[pos] =
            static_cast<uint8_t>(c << shift | ((c + 5) & 15) << (4 - shift));
        float out[8];
        strata_iq4nl8(q, shift, 0.5f, out);
        for (int k = 0; k < 8; ++k)
          ASSERT_EQ(out[k], 0.5f * strata_kvalues_iq4nl[(q[k] >> shift) & 15])
              << "shift " << shift << " code " << c << " at " << k;
      }
}

// prmt.b32's sign-replicating selectors (bit 3 of a nibble).
TEST(BlockDecodeScalars, BytePermReplicatesSigns) {
  EXPECT_EQ(strata_byte_perm(0x80402010u, 0x7f00ff01u, 0x3210), 0x80402010u);
  EXPECT_EQ(strata_byte_perm(0x80402010u, 0x7f00ff01u, 0x7654), 0x7f00ff01u);
  EXPECT_EQ(strata_byte_perm(0x80402010u, 0x7f00ff01u, 0x8b9f), 0x00ff0000u);
  EXPECT_EQ(strata_byte_perm(0x80402010u, 0x7f00ff01u, 0x0020), 0x10104010u);
}

} // namespace
