//===- ScalarMathCpu.h - ScalarMath.h for the CPU backend -------*- C++ -*-===//
//
// Includes the shared scalar math (and the int8 KV cache's quantisation,
// KvQuant.h) with std:: primitives, in namespace
// strata::scalar (the header itself is freestanding and namespace-free so the
// code generator can embed it in device sources).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cmath>
#include <cstdint>

namespace strata::scalar {
#define STRATA_FN inline
#define strata_exp(x) std::exp(x)
#define strata_log(x) std::log(x)
#define strata_log1p(x) std::log1p(x)
#define strata_sqrt(x) std::sqrt(x)
#define strata_tanh(x) std::tanh(x)
#include "runtime/KvQuant.h"
#include "runtime/ScalarMath.h"
#undef STRATA_FN
#undef strata_exp
#undef strata_log
#undef strata_log1p
#undef strata_sqrt
#undef strata_tanh
} // namespace strata::scalar
