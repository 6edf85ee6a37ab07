//===- Expr.h - compile-time expressions ------------------------*- C++ -*-===//
//
// Expressions appear in `let` bindings, dims, attributes, repeat bounds, `if`
// conditions, call arguments and weight name templates. They are evaluated
// by `expand` once metadata is bound; before that they stay symbolic.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/Diagnostics.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace strata::format {
class ModelInfo;
}

namespace strata::ir {

enum class ExprKind {
  Int,      ///< integer literal (i)
  Float,    ///< float literal (f)
  Bool,     ///< true / false (b)
  Str,      ///< plain string literal (s)
  Template, ///< string with {expr} holes: args alternate Str pieces / exprs
  List,     ///< [a, b, ...] (args)
  Name,     ///< a let, parameter or loop variable (s)
  Builtin,  ///< meta, has_meta, has_weight, dim, min, max, sqrt, float,
            ///< max_context, max_batch, generation
  Unary,    ///< -x, !x (s = operator, args[0])
  Binary,   ///< a op b (s = operator, args[0..1])
  Index,    ///< a[i] (args[0..1])
};

struct Expr;
using ExprPtr = std::shared_ptr<const Expr>;

/// An immutable expression node.
struct Expr {
  ExprKind kind = ExprKind::Int;
  SourceLoc loc;
  int64_t i = 0;
  double f = 0;
  bool b = false;
  std::string s;
  std::vector<ExprPtr> args;

  static ExprPtr makeInt(int64_t v, SourceLoc loc = {});
  static ExprPtr makeFloat(double v, SourceLoc loc = {});
  static ExprPtr makeBool(bool v, SourceLoc loc = {});
  static ExprPtr makeStr(std::string v, SourceLoc loc = {});
  static ExprPtr makeName(std::string v, SourceLoc loc = {});
  static ExprPtr makeBinary(std::string op, ExprPtr a, ExprPtr b,
                            SourceLoc loc = {});

  bool isLiteral() const;
};

/// Prints an expression in the text format (round-trips through the parser).
std::string printExpr(const Expr &e);
/// Prints a float so that it reads back as the same double and as a float
/// (always with '.', 'e', "inf" or "nan").
std::string printFloat(double v);
/// Quotes a string with the IR's escapes.
std::string quoteString(const std::string &s);

/// A compile-time value.
struct Const {
  enum class Kind { Int, Float, Bool, Str, List };
  Kind kind = Kind::Int;
  int64_t i = 0;
  double f = 0;
  bool b = false;
  std::string s;
  std::vector<Const> list;

  static Const ofInt(int64_t v);
  static Const ofFloat(double v);
  static Const ofBool(bool v);
  static Const ofStr(std::string v);
  /// Converts back to a literal expression.
  ExprPtr toExpr(SourceLoc loc = {}) const;
  std::string kindName() const;
};

/// What an expression may refer to while being evaluated.
struct EvalEnv {
  /// Names in scope (lets, int params, loop variables).
  const std::map<std::string, Const> *names = nullptr;
  /// Metadata and tensor infos; meta()/has_weight() fail without it.
  const format::ModelInfo *model = nullptr;
  /// Architecture prefix for meta keys ("qwen3").
  std::string arch;
  /// If set, every metadata lookup is recorded here: the key as found, and
  /// the value the description folded in (MetaValue::toString of all of
  /// it), or kMetaAbsent where the key was missing (a default or
  /// has_meta() false). A plan keeps them, and runs only on a file that
  /// agrees.
  std::map<std::string, std::string> *baked = nullptr;
  /// Generation (strata-compile --max-context, --max-batch): the builtins
  /// max_context() and max_batch(); generation() is true when maxContext is
  /// positive. All three are 0 / false without it.
  int64_t maxContext = 0;
  int64_t maxBatch = 0;
};

/// The recorded value of a metadata key the description looked up but the
/// file does not have.
inline constexpr const char *kMetaAbsent = "(absent)";

/// Evaluates \p e. On failure reports a diagnostic and returns nullopt.
std::optional<Const> evalExpr(const Expr &e, const EvalEnv &env,
                              DiagnosticEngine &diag);

/// Calls \p fn on every Name referenced by \p e (not builtin names).
void forEachName(const Expr &e, const std::function<void(const Expr &)> &fn);

} // namespace strata::ir
