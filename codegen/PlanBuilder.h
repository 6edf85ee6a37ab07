//===- PlanBuilder.h - a planned module as a runtime plan -------*- C++ -*-===//
#pragma once

#include "ir/Module.h"
#include "runtime/format/Plan.h"

#include <string>

namespace strata::codegen {

/// Builds the runtime plan from a module that went through lower-to-kernels
/// and plan-memory: one buffer per arena value, one kernel per
/// `kernel<recipe>` op, the weights they read, and per-kernel byte and FLOP
/// counts at T = \p maxTokens. Returns false and sets \p error if the module
/// is not in that form.
bool buildPlan(const ir::Module &m, int64_t maxTokens,
               const std::string &target, const std::string &arch,
               format::Plan &plan, std::string &error);

} // namespace strata::codegen
