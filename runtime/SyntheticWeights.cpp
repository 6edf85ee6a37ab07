//===- SyntheticWeights.cpp - deterministic random weights ----------------===//
#include "runtime/SyntheticWeights.h"

#include "runtime/ScalarMathCpu.h"
#include "runtime/format/BlockDecodeHost.h"

#include <algorithm>
#include <thread>

namespace strata::runtime {

namespace synth {
using scalar::sm_f32_to_bf16;
#include "runtime/SyntheticBlock.h"
} // namespace synth

namespace {

using format::GgmlType;
#define STRATA_SYNTH_SAME(name)                                                \
  static_assert(synth::kSynth##name == static_cast<uint32_t>(GgmlType::name),  \
                "SyntheticBlock.h's type ids are GgmlType's");
STRATA_SYNTH_SAME(F32)
STRATA_SYNTH_SAME(F16)
STRATA_SYNTH_SAME(Q4_0)
STRATA_SYNTH_SAME(Q8_0)
STRATA_SYNTH_SAME(Q4_K)
STRATA_SYNTH_SAME(Q5_K)
STRATA_SYNTH_SAME(Q6_K)
STRATA_SYNTH_SAME(IQ2_XXS)
STRATA_SYNTH_SAME(IQ3_XXS)
STRATA_SYNTH_SAME(IQ4_NL)
STRATA_SYNTH_SAME(IQ3_S)
STRATA_SYNTH_SAME(IQ4_XS)
STRATA_SYNTH_SAME(I32)
STRATA_SYNTH_SAME(BF16)
#undef STRATA_SYNTH_SAME

} // namespace

bool syntheticRank1(const std::vector<uint64_t> &dims) {
  return dims.size() <= 1 || (dims.size() >= 2 && dims[1] == 1);
}

void syntheticBlocks(uint64_t seed, uint64_t index, format::GgmlType type,
                     const std::vector<uint64_t> &dims, uint64_t first,
                     uint64_t count, uint8_t *out) {
  format::GgmlTypeInfo info = format::ggmlTypeInfo(type);
  const bool rank1 = syntheticRank1(dims);
  for (uint64_t b = 0; b < count; ++b)
    synth::strata_synthetic_block(seed, index, first + b,
                                  static_cast<uint32_t>(type), info.typeSize,
                                  rank1, out + b * info.typeSize);
}

void syntheticBlocksParallel(uint64_t seed, uint64_t index,
                             format::GgmlType type,
                             const std::vector<uint64_t> &dims, uint64_t first,
                             uint64_t count, uint8_t *out, int threads) {
  format::GgmlTypeInfo info = format::ggmlTypeInfo(type);
  threads = std::max(1, threads);
  uint64_t per = (count + threads - 1) / threads;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    uint64_t a = t * per, e = std::min(count, a + per);
    if (a >= e)
      break;
    pool.emplace_back([=] {
      syntheticBlocks(seed, index, type, dims, first + a, e - a,
                      out + a * info.typeSize);
    });
  }
  for (std::thread &t : pool)
    t.join();
}

void syntheticWeight(uint64_t seed, uint64_t index, format::GgmlType type,
                     const std::vector<uint64_t> &dims, uint8_t *out,
                     int threads) {
  uint64_t n = 1;
  for (uint64_t d : dims)
    n *= d;
  syntheticBlocksParallel(seed, index, type, dims, 0,
                          n / format::ggmlTypeInfo(type).blockSize, out,
                          threads);
}

} // namespace strata::runtime
