//===- Printer.h - deterministic text output --------------------*- C++ -*-===//
#pragma once

#include "ir/Module.h"

#include <string>

namespace strata::ir {

/// Prints \p m in the text format; parse(print(m)) prints identically.
std::string printModule(const Module &m);

} // namespace strata::ir
