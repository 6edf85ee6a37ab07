//===- Verifier.h - structural and type checks ------------------*- C++ -*-===//
#pragma once

#include "ir/Diagnostics.h"
#include "ir/Module.h"

namespace strata::ir {

/// Verifies \p m and infers result types in place: names in scope, call
/// targets and arity, no recursion, terminators, attribute signatures, and
/// every op's shape rule (Ops.def). Returns false after reporting errors.
bool verifyModule(Module &m, DiagnosticEngine &diag);

} // namespace strata::ir
