//===- SyntheticWeights.h - deterministic random weights --------*- C++ -*-===//
//
// `strata-run --synthetic-weights SEED`: every weight is filled with
// deterministic, valid random blocks of its declared type, so a plan of a
// real-size model runs from a shapes-only GGUF (no 60 GB download). The
// generator is SyntheticBlock.h (shared with the device fill kernel of GPU
// plans); this is its host side: the cpu backend's fill, and the reference
// the device fill is verified against. Trained-like magnitudes keep
// activations finite through the layers.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/format/GgmlType.h"

#include <cstdint>
#include <vector>

namespace strata::runtime {

/// Whether a weight of \p dims is filled as rank-1 (centred on -1, see
/// SyntheticBlock.h): one dimension, or a second dimension of 1.
bool syntheticRank1(const std::vector<uint64_t> &dims);

/// Writes blocks [\p first, \p first + \p count) of weight \p index (ggml
/// \p type and \p dims, as the plan lists it) for \p seed into \p out
/// (count * the type's block bytes). A float type's block is one element.
void syntheticBlocks(uint64_t seed, uint64_t index, format::GgmlType type,
                     const std::vector<uint64_t> &dims, uint64_t first,
                     uint64_t count, uint8_t *out);

/// syntheticBlocks split over \p threads workers (the same bytes for any
/// split: every block depends only on its own index).
void syntheticBlocksParallel(uint64_t seed, uint64_t index,
                             format::GgmlType type,
                             const std::vector<uint64_t> &dims, uint64_t first,
                             uint64_t count, uint8_t *out, int threads);

/// Fills a whole weight into \p out (its bytes) with \p threads workers.
void syntheticWeight(uint64_t seed, uint64_t index, format::GgmlType type,
                     const std::vector<uint64_t> &dims, uint8_t *out,
                     int threads);

} // namespace strata::runtime
