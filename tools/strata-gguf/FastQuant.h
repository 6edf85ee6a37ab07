//===- FastQuant.h - one-pass quantisers for real-size synth ----*- C++ -*-===//
//
// `strata-gguf synth --quant fast`: the block types of real-size benchmark
// files coded in one pass per block (scales from each sub-block's range, the
// nearest code for each value), no search over scales. Valid blocks that
// ggml and strata decode alike, 10-100x faster than runtime/format's
// quantisers (whose scale searches dominate synth of billions of values);
// coarser codes of the same values.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/format/GgmlType.h"

#include <cstdint>

namespace strata::tools {

/// Codes \p n values (a whole number of blocks) of \p src as \p type into
/// \p dst in one pass per block: Q4_K, Q6_K, IQ4_NL and IQ3_S here, every
/// other type through format::quantizeRow. Returns false where neither can
/// write \p type.
bool quantizeRowFast(format::GgmlType type, const float *src, uint8_t *dst,
                     int64_t n);

} // namespace strata::tools
