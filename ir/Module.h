//===- Module.h - modules, functions, operations, values --------*- C++ -*-===//
//
// A module is a model: `let` parameters, functions, and SSA values of tensor
// type. Before `expand`, functions may contain `call`, `repeat` (static loop
// with carried values) and `if` (static conditional); after it, one flat
// `@main` remains.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/Expr.h"
#include "ir/Type.h"

#include <deque>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace strata::ir {

/// Every operation kind: the ops of the op table (runtime/format/Ops.def, in
/// the order of format::Recipe), then structural ops.
enum class OpKind : uint16_t {
#define OP(Id, Mnemonic, MinOperands, MaxOperands, NumResults, Attrs, Rule,    \
           Cost, Class)                                                        \
  Id,
#include "runtime/format/Ops.def"
  Call,   ///< %r = call @f(args)
  Repeat, ///< %r = repeat i in lo..hi carry(%c = %init) { ... yield }
  If,     ///< %r = if cond { ... yield } else { ... yield }
  Return, ///< return %v, ...
  Yield,  ///< yield %v, ... (ends a repeat or if body)
  Kernel, ///< %r = kernel<recipe>(...) {attrs} : types (after lowering)
  Remark, ///< remark "text {l}": reported by expand where it is reached
  /// %r, ... = fused "name"(%a = %x, ...) {attrs} { ops; yield ... }: one
  /// kernel covering several ops. The body sees only its arguments (bound
  /// to the operands), its own values and weights; yielded values are the
  /// kernel's outputs, all other body values kernel-local temporaries.
  Fused,
};

/// An SSA value: a function parameter, a block argument or an op result.
struct Value {
  std::string name; ///< without the '%'
  Type type;
  SourceLoc loc;
  /// Byte offset in the activation arena, once plan-memory has run.
  std::optional<uint64_t> offset;
};

/// A reference to a GGUF tensor by name template, e.g.
/// `weight("blk.{l}.attn_q.weight")`, optionally with an expected element
/// type and shape: `weight<q4_k>("...", [N, K])` (IR order: last dim is the
/// row, i.e. ggml's ne[0]).
struct WeightRef {
  ExprPtr name; ///< Str or Template
  std::optional<ElemType> elem;
  std::optional<std::vector<Dim>> shape;
};

/// An operand: a value, a weight, or (call arguments only) a scalar expr.
struct Operand {
  Value *value = nullptr;
  std::shared_ptr<WeightRef> weight;
  ExprPtr scalar;
  SourceLoc loc;

  bool isValue() const { return value != nullptr; }
  bool isWeight() const { return weight != nullptr; }
  bool isScalar() const { return scalar != nullptr; }
  /// The tensor type of a value or (bound) weight; Unknown otherwise.
  Type type() const;
};

/// `name = expr` in an op's attribute dictionary.
struct Attr {
  std::string name;
  ExprPtr value;
  SourceLoc loc;
};

struct Operation;

/// A sequence of operations with arguments (repeat carries).
struct Block {
  std::vector<Value *> args;
  std::vector<std::unique_ptr<Operation>> ops;
};

/// One operation.
struct Operation {
  OpKind kind = OpKind::Return;
  SourceLoc loc;
  std::vector<Operand> operands;
  std::vector<Value *> results;
  std::vector<Attr> attrs;
  /// The `: type` annotation, one per result, if written.
  std::vector<std::optional<Type>> declaredTypes;

  /// Call: function name without '@'; Kernel: recipe; Fused: kernel name
  std::string callee;
  std::string loopVar; ///< Repeat: induction variable
  ExprPtr lo, hi;      ///< Repeat: bounds [lo, hi)
  ExprPtr cond;        ///< If: condition; Remark: the text (a string)
  /// Repeat, Fused: one body; If: then and else.
  std::vector<std::unique_ptr<Block>> regions;

  const Attr *findAttr(const std::string &name) const;
};

/// A function parameter: a tensor value or a compile-time scalar.
struct Param {
  Value *value = nullptr; ///< tensor parameter
  std::string name;       ///< scalar parameter name
  Type::Kind scalarKind = Type::Kind::Int;
  SourceLoc loc;
  bool isScalar() const { return value == nullptr; }
};

/// A function.
struct Func {
  std::string name; ///< without '@'
  SourceLoc loc;
  std::vector<Param> params;
  std::vector<Type> resultTypes;
  Block body;

  /// Creates a value owned by this function.
  Value *newValue(std::string name, Type type, SourceLoc loc);

private:
  std::deque<Value> values_;
};

/// `let NAME = expr`.
struct LetDecl {
  std::string name;
  ExprPtr value;
  SourceLoc loc;
};

/// A model description.
struct Module {
  std::string name;
  SourceLoc loc;
  std::vector<LetDecl> lets;
  std::vector<std::unique_ptr<Func>> funcs;

  Func *findFunc(const std::string &name) const;
};

/// Facts about a registry op, from the op table.
struct OpInfo {
  OpKind kind;
  const char *mnemonic;
  int minOperands;
  int maxOperands; ///< -1 = variadic
  int numResults;
  const char *attrs;
  format::OpClass cls;
};

/// The catalog recipe of registry op \p kind (the same row of Ops.def).
inline format::Recipe recipeOf(OpKind kind) {
  return static_cast<format::Recipe>(kind);
}
/// The registry op of recipe \p r.
inline OpKind opKindOf(format::Recipe r) { return static_cast<OpKind>(r); }

/// Per result of \p op, the operand it overwrites in place (a fused
/// kernel's `tied` attribute), or -1; empty when none is tied.
std::vector<int> tiedOperands(const Operation &op);

/// True if \p op declares a generation state (`state() {name} : type`):
/// its result is a state value, storage outside the arena.
bool isStateDecl(const Operation &op);
/// True if \p op writes its operand 0, a state, in place (an op of the
/// State class, or its `kernel<...>`); its result 0 is that state.
bool writesState(const Operation &op);
/// True if \p op is an elementwise registry op (the Unary and Binary
/// classes of the op table, numpy broadcasting included): what fusion
/// passes take as epilogues.
bool isElementwise(const Operation &op);
/// The state values defined in \p b (not in nested regions): the results
/// of `state` and result 0 of every op that writes a state.
std::set<const Value *> stateValues(const Block &b);

/// The registry entry for \p kind, or nullptr for structural ops.
const OpInfo *opInfo(OpKind kind);
/// The registry entry spelled \p mnemonic, or nullptr.
const OpInfo *lookupOp(std::string_view mnemonic);
/// Every registry op, in Ops.def order.
const std::vector<OpInfo> &allOps();
/// The spelling of any op kind ("matmul", "call", "repeat", ...).
const char *opName(OpKind kind);

/// One attribute of an op's schema (from the op table).
using AttrSpec = format::AttrSpec;
/// The parsed attribute signature of a registry op.
const std::vector<AttrSpec> &attrSpecs(OpKind kind);

} // namespace strata::ir
