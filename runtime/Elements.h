//===- Elements.h - conversions between activation types -------*- C++ -*-===//
//
// One place that knows how a PlanDType is stored, shared by the executor
// (inputs, outputs, NaN checks) and the CPU backend (casts, staging).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/format/Plan.h"

#include <cstdint>
#include <vector>

namespace strata::runtime {

/// Element \p i of an array of \p type at \p src, exactly as a double.
double loadElement(format::PlanDType type, const void *src, int64_t i);

/// Stores \p v as element \p i of an array of \p type at \p dst: floats
/// round to nearest even; integers truncate toward zero and saturate (NaN
/// becomes 0); bool is v != 0.
void storeElement(format::PlanDType type, void *dst, int64_t i, double v);

/// Converts \p n elements; \p src and \p dst must not overlap unless the
/// types are equal (then it is a memmove).
void convertElements(format::PlanDType from, const void *src,
                     format::PlanDType to, void *dst, int64_t n);

/// True for f32, f16 and bf16.
bool isFloatType(format::PlanDType type);

/// The elements of a state \p st (its bytes at \p src) as f32, in its
/// shape's order: f32 and bf16 converted, i8 rows dequantised (value times
/// the row's scale; format::stateBytes). For the executor's readState and
/// --check, which compare what the kernels read.
std::vector<float> stateElements(const format::PlanState &st, const void *src);

} // namespace strata::runtime
