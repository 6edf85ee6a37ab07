//===- BlockDecodeAlignedTest.cpp - the device preludes' wide loads -------===//
//
// The device preludes define STRATA_ALIGNED_LOADS: the decoders then read
// quants and scales with wide loads at the alignment GGUF's layout
// guarantees (block starts 2-byte aligned, 136/144/176-byte super-blocks
// 8-byte aligned). This translation unit compiles BlockDecode.h that way (in
// a namespace, internal linkage, beside the host copy) and checks it against
// the host decoders on rows laid out as a GPU receives them: 256-byte
// aligned, consecutive blocks, fresh random bytes each run (seed printed,
// STRATA_TEST_SEED replays it).
//
//===----------------------------------------------------------------------===//
#include "runtime/format/BlockDecodeHost.h"
#include "runtime/format/GgmlType.h"
#include "test/unit/format/WideForms.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#undef STRATA_FN
#undef STRATA_TABLE
#define STRATA_FN static inline __attribute__((always_inline))
#define STRATA_TABLE static constexpr
#define STRATA_ALIGNED_LOADS 1
#undef STRATA_RUNTIME_FORMAT_BLOCKDECODE_H // a second copy, by design
#undef STRATA_RUNTIME_FORMAT_BLOCKDECODEINT8_H
namespace aligned {
#include "runtime/format/BlockDecode.h"
#include "runtime/format/BlockDecodeInt8.h"
} // namespace aligned

using namespace strata::format;

namespace {

using Decode8Fn = void (*)(const uint8_t *, int, float *);

struct Pair {
  GgmlType type;
  Decode8Fn host, wide;
};

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

/// A fresh seed (printed), or STRATA_TEST_SEED's to replay one.
uint32_t testSeed() {
  uint32_t seed = std::random_device{}();
  if (const char *env = std::getenv("STRATA_TEST_SEED"))
    seed = static_cast<uint32_t>(std::strtoul(env, nullptr, 0));
  std::printf("BlockDecodeAligned seed: %u (replay with STRATA_TEST_SEED)\n",
              seed);
  return seed;
}

/// \p bytes random bytes starting 256-byte aligned inside \p storage.
const uint8_t *alignedRandomRow(int64_t bytes, std::mt19937 &gen,
                                std::vector<uint8_t> &storage) {
  storage.assign(static_cast<size_t>(bytes) + 256, 0);
  uint8_t *row = storage.data() +
                 (256 - reinterpret_cast<uintptr_t>(storage.data()) % 256);
  for (int64_t i = 0; i < bytes; ++i)
    row[i] = static_cast<uint8_t>(gen());
  return row;
}

TEST(BlockDecodeAligned, WideLoadsDecodeAsByteLoads) {
  const uint32_t seed = testSeed();
  std::mt19937 gen(seed);
  const Pair pairs[] = {
      {GgmlType::Q8_0, strata_dq8_q8_0, aligned::strata_dq8_q8_0},
      {GgmlType::Q4_0, strata_dq8_q4_0, aligned::strata_dq8_q4_0},
      {GgmlType::Q4_K, strata_dq8_q4_k, aligned::strata_dq8_q4_k},
      {GgmlType::Q5_K, strata_dq8_q5_k, aligned::strata_dq8_q5_k},
      {GgmlType::Q6_K, strata_dq8_q6_k, aligned::strata_dq8_q6_k},
      {GgmlType::IQ4_NL, strata_dq8_iq4_nl, aligned::strata_dq8_iq4_nl},
      {GgmlType::IQ4_XS, strata_dq8_iq4_xs, aligned::strata_dq8_iq4_xs},
      {GgmlType::IQ3_S, strata_dq8_iq3_s, aligned::strata_dq8_iq3_s},
  };
  constexpr int kBlocks = 37; // odd: blocks at every offset class
  for (const Pair &p : pairs) {
    GgmlTypeInfo info = ggmlTypeInfo(p.type);
    SCOPED_TRACE(info.name);
    // A 256-byte aligned row of random bytes: no field needs to be valid.
    // Inf and NaN scales decode to Inf or NaN either way, but which NaN
    // operand's payload survives (Inf - Inf, NaN * x) follows each
    // decoder's operand order, so NaNs compare as NaNs (seed 1310159963:
    // Q5_K element 4 of block 9, 0x7fc50000 against 0x7ff00000); every
    // other value must match bit for bit.
    std::vector<uint8_t> storage;
    const uint8_t *row =
        alignedRandomRow(kBlocks * info.typeSize, gen, storage);
    for (int b = 0; b < kBlocks; ++b)
      for (int i0 = 0; i0 < static_cast<int>(info.blockSize); i0 += 8) {
        float want[8], got[8];
        p.host(row + b * info.typeSize, i0, want);
        p.wide(row + b * info.typeSize, i0, got);
        for (int k = 0; k < 8; ++k) {
          if (std::isnan(want[k])) {
            ASSERT_TRUE(std::isnan(got[k]))
                << "block " << b << " element " << i0 + k << " seed " << seed;
            continue;
          }
          ASSERT_EQ(bitsOf(got[k]), bitsOf(want[k]))
              << "block " << b << " element " << i0 + k << " seed " << seed;
        }
      }
  }
}

// The integer forms' word loads (strata_load8w) against byte loads.
TEST(BlockDecodeAligned, IntegerFormsWideAsBytes) {
  using DecodeI8Fn =
      void (*)(const uint8_t *, int, uint32_t *, float *, float *);
  struct IntPair {
    GgmlType type;
    DecodeI8Fn host, wide;
  };
  const uint32_t seed = testSeed();
  std::mt19937 gen(seed);
  const IntPair pairs[] = {
      {GgmlType::Q8_0, strata_di8_q8_0, aligned::strata_di8_q8_0},
      {GgmlType::Q4_K, strata_di8_q4_k, aligned::strata_di8_q4_k},
      {GgmlType::Q5_K, strata_di8_q5_k, aligned::strata_di8_q5_k},
      {GgmlType::Q6_K, strata_di8_q6_k, aligned::strata_di8_q6_k},
      {GgmlType::IQ4_NL, strata_di8_iq4_nl, aligned::strata_di8_iq4_nl},
      {GgmlType::IQ4_XS, strata_di8_iq4_xs, aligned::strata_di8_iq4_xs},
      {GgmlType::IQ3_S, strata_di8_iq3_s, aligned::strata_di8_iq3_s},
  };
  constexpr int kBlocks = 37;
  for (const IntPair &p : pairs) {
    GgmlTypeInfo info = ggmlTypeInfo(p.type);
    SCOPED_TRACE(info.name);
    std::vector<uint8_t> storage;
    const uint8_t *row =
        alignedRandomRow(kBlocks * info.typeSize, gen, storage);
    for (int b = 0; b < kBlocks; ++b)
      for (int i0 = 0; i0 < static_cast<int>(info.blockSize); i0 += 8) {
        uint32_t qa[2], qb[2];
        float da = 0, db = 0, ma = 0, mb = 0;
        p.host(row + b * info.typeSize, i0, qa, &da, &ma);
        p.wide(row + b * info.typeSize, i0, qb, &db, &mb);
        ASSERT_EQ(qa[0], qb[0]) << "block " << b << " i0 " << i0;
        ASSERT_EQ(qa[1], qb[1]) << "block " << b << " i0 " << i0;
        if (!std::isnan(da))
          ASSERT_EQ(bitsOf(da), bitsOf(db)) << "block " << b << " i0 " << i0;
        if (!std::isnan(ma))
          ASSERT_EQ(bitsOf(ma), bitsOf(mb)) << "block " << b << " i0 " << i0;
      }
  }
}

// The wide forms at the device's loads (Q4_K: 16-byte loads, rows 256-byte
// aligned, 144-byte super-blocks; Q6_K: aligned words joined by funnel
// shifts, 210-byte blocks, so odd blocks start 2 bytes past a word) against
// the eight-element forms read by bytes.
TEST(BlockDecodeAligned, WideFormsAsBytes) {
  const widecheck::WideCase forms[] = {
      {GgmlType::Q4_K, aligned::strata_di8w_q4_k, strata_di8_q4_k, 32, true},
      {GgmlType::Q6_K, aligned::strata_di8w_q6_k, strata_di8_q6_k, 64, false}};
  const uint32_t seed = testSeed();
  std::mt19937 gen(seed);
  for (const widecheck::WideCase &f : forms) {
    constexpr int kBlocks = 37;
    const int64_t size = ggmlTypeInfo(f.type).typeSize;
    std::vector<uint8_t> storage;
    const uint8_t *row = alignedRandomRow(kBlocks * size, gen, storage);
    for (int b = 0; b < kBlocks; ++b)
      widecheck::expectWideIsPieces(
          f.wide, f.piece, f.span, f.min, row + b * size,
          std::string(ggmlTypeInfo(f.type).name) + " block " +
              std::to_string(b) + " seed " + std::to_string(seed));
  }
}

} // namespace
