//===- RuntimeTestUtil.h - host tensors, random data, NMSE ------*- C++ -*-===//
//
// Shared by the runtime tests: operands held in host memory (buffers of any
// activation type, weights quantised with quantizeRow), fresh random data
// (the seed is printed with every failure), and NMSE against references the
// tests compute themselves in double precision.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/Device.h"
#include "runtime/Elements.h"
#include "runtime/Executor.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/format/Quants.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace strata::runtime::test {

namespace format = strata::format;
using format::GgmlType;
using format::PlanAttr;
using format::PlanDType;
using format::Recipe;

inline int64_t count(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// One operand in host memory.
struct HostTensor {
  std::vector<uint8_t> bytes;
  std::vector<int64_t> shape;
  bool isWeight = false;
  PlanDType dtype = PlanDType::F32;
  GgmlType weightType = GgmlType::F32;
  std::string name = "t";

  TensorArg arg() {
    TensorArg a;
    a.data = bytes.data();
    a.bytes = bytes.size();
    a.isWeight = isWeight;
    a.dtype = dtype;
    a.weightType = weightType;
    a.shape = shape;
    a.name = name;
    return a;
  }
  /// The values as f32 (weights dequantised row by row).
  std::vector<float> floats() const {
    std::vector<float> out(count(shape));
    if (!isWeight) {
      convertElements(dtype, bytes.data(), PlanDType::F32, out.data(),
                      out.size());
      return out;
    }
    int64_t k = shape.back();
    int64_t rb = format::rowSizeInBytes(weightType, k);
    for (int64_t r = 0; r < count(shape) / k; ++r)
      EXPECT_TRUE(format::dequantizeRow(weightType, bytes.data() + r * rb,
                                        out.data() + r * k, k));
    return out;
  }
  std::vector<int32_t> ints() const {
    std::vector<int32_t> out(count(shape));
    if (!out.empty())
      std::memcpy(out.data(), bytes.data(), out.size() * 4);
    return out;
  }
};

/// A buffer of \p type holding \p values.
inline HostTensor buffer(std::vector<int64_t> shape,
                         const std::vector<float> &values,
                         PlanDType type = PlanDType::F32) {
  HostTensor t;
  t.shape = std::move(shape);
  t.dtype = type;
  EXPECT_EQ(static_cast<int64_t>(values.size()), count(t.shape));
  t.bytes.resize(values.size() * format::planDTypeSize(type));
  convertElements(PlanDType::F32, values.data(), type, t.bytes.data(),
                  values.size());
  return t;
}

inline HostTensor ids(std::vector<int64_t> shape,
                      const std::vector<int32_t> &values) {
  HostTensor t;
  t.shape = std::move(shape);
  t.dtype = PlanDType::I32;
  EXPECT_EQ(static_cast<int64_t>(values.size()), count(t.shape));
  t.bytes.resize(values.size() * 4);
  if (!values.empty())
    std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

/// A weight of IR shape \p shape ([..., K]) quantised row by row to \p type.
inline HostTensor weight(GgmlType type, std::vector<int64_t> shape,
                         const std::vector<float> &values) {
  HostTensor t;
  t.shape = std::move(shape);
  t.isWeight = true;
  t.weightType = type;
  t.name = "w";
  int64_t k = t.shape.back();
  int64_t rb = format::rowSizeInBytes(type, k);
  EXPECT_GT(rb, 0);
  int64_t rows = count(t.shape) / k;
  t.bytes.resize(rows * rb);
  for (int64_t r = 0; r < rows; ++r)
    EXPECT_TRUE(format::quantizeRow(type, values.data() + r * k,
                                    t.bytes.data() + r * rb, k));
  return t;
}

/// An output buffer filled with the executor's NaN poison.
inline HostTensor output(std::vector<int64_t> shape,
                         PlanDType type = PlanDType::F32) {
  HostTensor t;
  t.shape = std::move(shape);
  t.dtype = type;
  t.name = "out";
  t.bytes.resize((count(t.shape) * format::planDTypeSize(type) + 3) / 4 * 4);
  for (size_t i = 0; i + 4 <= t.bytes.size(); i += 4)
    std::memcpy(t.bytes.data() + i, &kPoison, 4);
  return t;
}

// Attributes.
inline PlanAttr aInt(int64_t v) {
  PlanAttr a;
  a.kind = PlanAttr::Kind::Int;
  a.i = v;
  return a;
}
inline PlanAttr aFloat(double v) {
  PlanAttr a;
  a.kind = PlanAttr::Kind::Float;
  a.f = v;
  return a;
}
inline PlanAttr aBool(bool v) {
  PlanAttr a;
  a.kind = PlanAttr::Kind::Bool;
  a.b = v;
  return a;
}
inline PlanAttr aStr(std::string v) {
  PlanAttr a;
  a.kind = PlanAttr::Kind::Str;
  a.s = std::move(v);
  return a;
}
inline PlanAttr aInts(std::vector<int64_t> v) {
  PlanAttr a;
  a.kind = PlanAttr::Kind::Ints;
  a.ints = std::move(v);
  return a;
}

/// Runs \p recipe through the CPU backend's entry point.
inline bool runKernel(Recipe recipe, const AttrMap &attrs,
                      std::vector<HostTensor *> ins,
                      std::vector<HostTensor *> outs, std::string &error,
                      int threads = 2) {
  Launch l;
  l.recipe = recipe;
  l.attrs = &attrs;
  for (HostTensor *t : ins)
    l.inputs.push_back(t->arg());
  for (HostTensor *t : outs)
    l.outputs.push_back(t->arg());
  return runCpuKernel(l, error, threads);
}

/// Fresh random numbers; the seed goes into every failure message.
class Rng {
public:
  Rng() : seed_(std::random_device{}()), gen_(seed_) {}
  uint32_t seed() const { return seed_; }
  std::string trace() const { return fmt::format("random seed {}", seed_); }
  std::vector<float> normal(int64_t n, float stddev = 1.0f) {
    std::normal_distribution<float> d(0.0f, stddev);
    std::vector<float> v(n);
    for (float &x : v)
      x = d(gen_);
    return v;
  }
  std::vector<float> uniform(int64_t n, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (float &x : v)
      x = d(gen_);
    return v;
  }
  int64_t integer(int64_t lo, int64_t hi) { // inclusive
    return std::uniform_int_distribution<int64_t>(lo, hi)(gen_);
  }
  std::vector<int32_t> integers(int64_t n, int32_t lo, int32_t hi) {
    std::vector<int32_t> v(n);
    for (int32_t &x : v)
      x = static_cast<int32_t>(integer(lo, hi));
    return v;
  }
  std::mt19937 &gen() { return gen_; }

private:
  uint32_t seed_;
  std::mt19937 gen_;
};

/// sum (got - want)^2 / sum want^2 (or the plain squared error when the
/// reference is all zeros); NaN anywhere gives +inf.
inline double nmse(const std::vector<float> &got,
                   const std::vector<double> &want) {
  EXPECT_EQ(got.size(), want.size());
  if (got.size() != want.size())
    return INFINITY;
  double err = 0, ref = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) || std::isnan(want[i]))
      return INFINITY;
    err += (got[i] - want[i]) * (got[i] - want[i]);
    ref += want[i] * want[i];
  }
  return ref > 0 ? err / ref : err;
}

inline std::vector<double> toDouble(const std::vector<float> &v) {
  return std::vector<double>(v.begin(), v.end());
}

/// The NMSE bar for f32 kernels against a double reference.
constexpr double kF32Bar = 1e-10;

} // namespace strata::runtime::test
