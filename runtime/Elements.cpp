//===- Elements.cpp - element conversions between activation types --------===//
#include "runtime/Elements.h"

#include "runtime/ScalarMathCpu.h"
#include "runtime/format/Quants.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace strata::runtime {

using format::PlanDType;

namespace {

template <typename T> T loadAs(const void *src, int64_t i) {
  T v;
  std::memcpy(&v, static_cast<const uint8_t *>(src) + i * sizeof(T), sizeof(T));
  return v;
}

template <typename T> void storeAs(void *dst, int64_t i, T v) {
  std::memcpy(static_cast<uint8_t *>(dst) + i * sizeof(T), &v, sizeof(T));
}

/// Truncates toward zero and saturates to T's range; NaN becomes 0.
template <typename T> T toInteger(double v) {
  if (std::isnan(v))
    return 0;
  double t = std::trunc(v);
  if (t <= static_cast<double>(std::numeric_limits<T>::min()))
    return std::numeric_limits<T>::min();
  // The max of int64 is not a double; compare against 2^63 instead.
  if (t >= std::ldexp(1.0, std::numeric_limits<T>::digits))
    return std::numeric_limits<T>::max();
  return static_cast<T>(t);
}

} // namespace

double loadElement(PlanDType type, const void *src, int64_t i) {
  switch (type) {
  case PlanDType::F32:
    return loadAs<float>(src, i);
  case PlanDType::F16:
    return format::fp16ToFp32(loadAs<uint16_t>(src, i));
  case PlanDType::BF16:
    return format::bf16ToFp32(loadAs<uint16_t>(src, i));
  case PlanDType::I32:
    return loadAs<int32_t>(src, i);
  case PlanDType::I64:
    return static_cast<double>(loadAs<int64_t>(src, i));
  case PlanDType::Bool:
    return loadAs<uint8_t>(src, i) != 0 ? 1.0 : 0.0;
  case PlanDType::I8:
    return loadAs<int8_t>(src, i);
  }
  return 0;
}

void storeElement(PlanDType type, void *dst, int64_t i, double v) {
  switch (type) {
  case PlanDType::F32:
    storeAs<float>(dst, i, static_cast<float>(v));
    return;
  case PlanDType::F16:
    storeAs<uint16_t>(dst, i, format::fp32ToFp16(static_cast<float>(v)));
    return;
  case PlanDType::BF16:
    storeAs<uint16_t>(dst, i, format::fp32ToBf16(static_cast<float>(v)));
    return;
  case PlanDType::I32:
    storeAs<int32_t>(dst, i, toInteger<int32_t>(v));
    return;
  case PlanDType::I64:
    storeAs<int64_t>(dst, i, toInteger<int64_t>(v));
    return;
  case PlanDType::Bool:
    storeAs<uint8_t>(dst, i, v != 0 ? 1 : 0);
    return;
  case PlanDType::I8:
    storeAs<int8_t>(dst, i, toInteger<int8_t>(v));
    return;
  }
}

void convertElements(PlanDType from, const void *src, PlanDType to, void *dst,
                     int64_t n) {
  if (n <= 0)
    return;
  if (from == to) {
    std::memmove(dst, src, static_cast<size_t>(n) * format::planDTypeSize(to));
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    storeElement(to, dst, i, loadElement(from, src, i));
}

std::vector<float> stateElements(const format::PlanState &st, const void *src) {
  uint64_t n = 1;
  for (uint64_t d : st.shape)
    n *= d;
  std::vector<float> out(n);
  if (st.dtype != PlanDType::I8) {
    convertElements(st.dtype, src, PlanDType::F32, out.data(),
                    static_cast<int64_t>(n));
    return out;
  }
  const uint64_t d = st.shape.empty() ? 1 : st.shape.back();
  const uint8_t *row = static_cast<const uint8_t *>(src);
  for (uint64_t r = 0; r < n / d; ++r, row += d + 4) {
    float scale;
    std::memcpy(&scale, row + d, 4);
    for (uint64_t i = 0; i < d; ++i)
      out[r * d + i] = scalar::kv_dequant(static_cast<int8_t>(row[i]), scale);
  }
  return out;
}

bool isFloatType(PlanDType type) {
  return type == PlanDType::F32 || type == PlanDType::F16 ||
         type == PlanDType::BF16;
}

} // namespace strata::runtime
