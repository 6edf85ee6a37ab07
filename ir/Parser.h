//===- Parser.h - the strata text format ------------------------*- C++ -*-===//
#pragma once

#include "ir/Diagnostics.h"
#include "ir/Module.h"

#include <memory>

namespace strata::ir {

/// Parses buffer \p buffer of \p sm into a module. Reports every error it
/// can recover from; returns nullptr if any error was reported. Nesting of
/// blocks and expressions is bounded, so no input overflows the stack.
std::unique_ptr<Module> parseModule(const SourceMgr &sm, uint32_t buffer,
                                    DiagnosticEngine &diag);

} // namespace strata::ir
