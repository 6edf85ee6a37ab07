//===- OpCost.h - bytes and FLOPs of ops as functions of T ------*- C++ -*-===//
//
// The cost rules of the op table (the Cost column of Ops.def): every op's
// FLOPs, and the bytes a kernel moves (its operands read once, its results
// written once), as piecewise polynomials in the token count T, so a rate
// is right at any prompt length.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/Module.h"
#include "runtime/format/Plan.h"

#include <optional>

namespace strata::ir {

/// The most columns of a skinny GEMM: unquantised weights of this few rows
/// take warp dot products in every form (the code generator's GEMM family;
/// fuse-siblings groups such chains with quantised ones).
constexpr int64_t kSkinnyGemmColumns = 8;

/// Elements of tensor type \p t as a polynomial in T; nullopt where a dim
/// is not `c*T/q + d` (divisions are taken exactly, not floored).
std::optional<format::PlanPoly> elementsPoly(const Type &t);

/// Bytes of one tensor read or written whole: activations by element
/// size, weights as whole rows of their blocks.
format::PlanPoly tensorBytes(const Type &t);

/// The expected number of distinct experts \p t rows read when each row
/// routes to \p k of \p e experts uniformly: e * (1 - (1 - k/e)^t).
double expectedExperts(double e, double k, int64_t t);

/// expectedExperts(e, k, T) / e as a function of T: exact at T = 1, 2, 3,
/// 4, 6, 8, 12, 16, ... (powers of two and their halfway points), linear in
/// between (below the concave curve: a floor), 1 once within 1e-6 of it.
format::PlanPoly expertFraction(double e, double k);

/// FLOPs of a registry op or `kernel<recipe>` by its cost rule.
format::PlanPoly opFlops(const Operation &op);

/// Bytes and FLOPs of one kernel: a registry op, a `kernel<recipe>` or a
/// `fused` kernel (its distinct operands and weights read once and its
/// results written once; its temporaries stay on chip; FLOPs of its body).
struct KernelCost {
  format::PlanPoly bytes;
  format::PlanPoly flops;
};
KernelCost kernelCost(const Operation &op);

} // namespace strata::ir
