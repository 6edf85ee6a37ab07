//===- OpRules.h - per-op verifiers and shape rules -------------*- C++ -*-===//
#pragma once

#include "ir/Module.h"

#include <optional>
#include <string>
#include <vector>

namespace strata::ir {

/// What a rule sees: the op, its operand types (possibly Unknown before
/// weights are bound) and literal attribute values. A rule checks what it
/// can and fills `out` with the result types it can infer.
class RuleCtx {
public:
  RuleCtx(const Operation &op, DiagnosticEngine &diag);

  const Operation &op;
  std::vector<Type> in;
  std::vector<Type> out;

  /// Reports an error at the op (or operand \p operand if >= 0); returns false.
  bool error(const std::string &msg, int operand = -1);

  /// Literal attribute values; nullopt if absent or not (yet) a literal.
  std::optional<int64_t> intAttr(const char *name) const;
  std::optional<double> floatAttr(const char *name) const;
  std::optional<bool> boolAttr(const char *name) const;
  std::optional<std::string> strAttr(const char *name) const;
  std::optional<std::vector<int64_t>> intsAttr(const char *name) const;
  std::optional<ElemType> typeAttr(const char *name) const;

  /// True if every operand type is a known tensor type.
  bool allKnown() const;

private:
  DiagnosticEngine &diag_;
};

/// Runs the rule of registry op \p ctx.op (from Ops.def).
bool runOpRule(RuleCtx &ctx);

} // namespace strata::ir
