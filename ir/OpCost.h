//===- OpCost.h - bytes and FLOPs of ops as functions of T -------*- C++
//-*-===//
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

/// Elements of tensor type \p t as a polynomial in T; nullopt where a dim
/// is not `c*T/q + d` (divisions are taken exactly, not floored).
std::optional<format::PlanPoly> elementsPoly(const Type &t);

/// Bytes of one tensor read or written whole: activations by element
/// size, weights as whole rows of their blocks.
format::PlanPoly tensorBytes(const Type &t);

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
