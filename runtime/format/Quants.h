//===- Quants.h - ggml block formats: dequantise and quantise ---*- C++ -*-===//
//
// Reference (scalar, CPU) conversions between float32 and the ggml element
// types strata loads. Dequantisation is bit-exact with gguf-py's
// `gguf.quants.dequantize` (the project's test oracle, see
// shared/reference/gguf-and-quants.md section 2) and goes through
// BlockDecode.h, the decoders GPU kernels share. Quants.cpp must be compiled
// with -ffp-contract=off for the quantisers: Q4_0's `x*id + 8.5` matches
// gguf-py only unfused.
//
// Quantisation is round-to-nearest with a small per-block scale search: good
// enough to build realistic synthetic test models, not a replacement for
// llama.cpp's importance-weighted quantisers.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/format/GgmlType.h"

#include <cstdint>

namespace strata::format {

/// Converts IEEE binary16 bits to float32 exactly. Subnormals become normal
/// floats; Inf keeps its sign; NaN keeps its sign and payload (shifted up by
/// 13 bits, never quietened), as numpy's float16 -> float32 cast does.
float fp16ToFp32(uint16_t h);

/// Converts float32 to IEEE binary16 bits, rounding to nearest even.
/// Magnitudes >= 65520 become Inf, tiny values round to (signed) subnormals or
/// zero. NaN stays NaN with its sign and the top 10 payload bits (a payload
/// that would vanish becomes 1), as numpy's float32 -> float16 cast does.
uint16_t fp32ToFp16(float f);

/// Converts bfloat16 bits to float32 exactly (the bits shifted up by 16).
float bf16ToFp32(uint16_t b);

/// Converts float32 to bfloat16 bits, rounding to nearest even; NaN becomes a
/// quiet NaN with the same sign and top payload bits. Same as ggml's
/// ggml_compute_fp32_to_bf16 and gguf-py's BF16 quantiser.
uint16_t fp32ToBf16(float f);

/// True if dequantizeRow() handles \p type: F32, F16, BF16, Q8_0, Q4_0, Q4_K,
/// Q5_K, Q6_K, IQ4_NL, IQ4_XS, IQ3_S, IQ3_XXS, IQ2_XXS.
bool canDequantize(GgmlType type);

/// True if quantizeRow() handles \p type: F32, F16, BF16, Q8_0, Q4_0, Q4_K,
/// Q5_K, Q6_K, IQ4_NL, IQ4_XS, IQ3_S.
bool canQuantize(GgmlType type);

/// Bytes occupied by \p n elements of \p type, or -1 if \p n is negative or
/// not a multiple of the type's block size.
int64_t rowSizeInBytes(GgmlType type, int64_t n);

/// Dequantises \p n elements of \p type stored at \p src (packed blocks, no
/// alignment required) into \p dst, which must not overlap \p src. Returns
/// false, writing nothing, if the type is not supported or \p n is not a
/// non-negative multiple of the block size. Every type goes through
/// BlockDecode.h's 8-element decoders, the ones GPU kernels use.
bool dequantizeRow(GgmlType type, const uint8_t *src, float *dst, int64_t n);

/// Quantises \p n floats at \p src into rowSizeInBytes(type, n) bytes at
/// \p dst. Returns false, writing nothing, if the type is not supported or
/// \p n is not a non-negative multiple of the block size. Inputs must be
/// finite for the quantised types (F32/F16/BF16 convert anything). Q8_0 and
/// Q4_0 reproduce gguf-py's (= ggml's reference) quantisers bit for bit.
bool quantizeRow(GgmlType type, const float *src, uint8_t *dst, int64_t n);

} // namespace strata::format
