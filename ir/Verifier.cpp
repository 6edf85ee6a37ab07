//===- Verifier.cpp - structural and type checks --------------------------===//
#include "ir/Verifier.h"

#include "ir/OpRules.h"
#include "runtime/format/Plan.h"

#include <fmt/format.h>

#include <functional>
#include <set>

namespace strata::ir {

namespace {

class Verifier {
public:
  Verifier(Module &m, DiagnosticEngine &diag) : m_(m), diag_(diag) {}

  bool run() {
    unsigned before = diag_.errorCount();
    std::set<std::string> lets;
    for (const LetDecl &let : m_.lets) {
      checkNames(*let.value, lets);
      lets.insert(let.name);
    }
    letNames_ = lets;
    checkRecursion();
    for (auto &f : m_.funcs)
      verifyFunc(*f);
    if (!m_.findFunc("main"))
      diag_.error(m_.loc,
                  fmt::format("model '{}' has no @main function", m_.name));
    return diag_.errorCount() == before;
  }

private:
  bool error(SourceLoc loc, const std::string &msg) {
    diag_.error(loc, msg);
    return false;
  }

  /// Reports names in \p e that are not in \p scope.
  void checkNames(const Expr &e, const std::set<std::string> &scope) {
    forEachName(e, [&](const Expr &n) {
      if (n.s != "T" && !scope.count(n.s))
        error(n.loc, fmt::format("unknown name '{}'", n.s));
    });
  }

  void checkDims(const std::vector<Dim> &dims, SourceLoc loc,
                 const std::set<std::string> &scope) {
    // Dims were parsed from expressions; atoms are re-checked by printing.
    for (const Dim &d : dims) {
      if (d.overflowed()) {
        error(loc, "dimension overflows a 64-bit integer");
        continue;
      }
      auto c = d.constant();
      if (c && *c < 0)
        error(loc, fmt::format("negative dimension {}", *c));
    }
    (void)scope;
  }

  void checkRecursion() {
    // Depth-first search over the call graph; a back edge is recursion.
    std::map<std::string, int> state; // 0 new, 1 on stack, 2 done
    std::function<void(Func &)> visit = [&](Func &f) {
      state[f.name] = 1;
      forEachOp(f.body, [&](Operation &op) {
        if (op.kind != OpKind::Call)
          return;
        Func *g = m_.findFunc(op.callee);
        if (!g)
          return;
        if (state[g->name] == 1) {
          error(op.loc, fmt::format("recursive call to @{} (calls are "
                                    "inlined by expand, so recursion cannot "
                                    "terminate)",
                                    g->name));
          return;
        }
        if (state[g->name] == 0)
          visit(*g);
      });
      state[f.name] = 2;
    };
    for (auto &f : m_.funcs)
      if (state[f->name] == 0)
        visit(*f);
  }

  static void forEachOp(Block &b, const std::function<void(Operation &)> &fn) {
    for (auto &op : b.ops) {
      fn(*op);
      for (auto &r : op->regions)
        forEachOp(*r, fn);
    }
  }

  void verifyFunc(Func &f) {
    std::set<std::string> scope = letNames_;
    for (const Param &p : f.params) {
      if (p.isScalar()) {
        if (letNames_.count(p.name))
          error(p.loc, fmt::format("parameter '{}' shadows a let", p.name));
        scope.insert(p.name);
      } else if (p.value->type.isTensor()) {
        checkDims(p.value->type.dims, p.loc, scope);
      }
    }
    func_ = &f;
    verifyBlock(f.body, scope, OpKind::Return, f.loc);
  }

  /// Verifies a block that must end with \p terminator.
  void verifyBlock(Block &b, std::set<std::string> &scope, OpKind terminator,
                   SourceLoc ownerLoc) {
    for (size_t k = 0; k < b.ops.size(); ++k) {
      Operation &op = *b.ops[k];
      bool isTerm = op.kind == OpKind::Return || op.kind == OpKind::Yield;
      if (isTerm && op.kind != terminator) {
        error(op.loc, fmt::format("'{}' is not allowed here (this block ends "
                                  "with '{}')",
                                  opName(op.kind), opName(terminator)));
        continue;
      }
      if (isTerm && k + 1 != b.ops.size()) {
        error(b.ops[k + 1]->loc,
              fmt::format("op after '{}' is unreachable", opName(op.kind)));
        return;
      }
      verifyOp(op, scope);
    }
    if (b.ops.empty() || b.ops.back()->kind != terminator)
      error(ownerLoc,
            fmt::format("block must end with '{}'", opName(terminator)));
  }

  void checkTypeMatch(SourceLoc loc, const Type &got, const Type &want,
                      const std::string &what) {
    if (!got.isTensor() || !want.isTensor())
      return;
    bool differ = !(got.elem == want.elem) || got.rank() != want.rank();
    for (size_t d = 0; !differ && d < got.rank(); ++d)
      differ = Dim::provablyDifferent(got.dims[d], want.dims[d]);
    if (differ)
      error(loc, fmt::format("{}: {} does not match {}", what, got.str(),
                             want.str()));
  }

  void verifyOperands(Operation &op, const std::set<std::string> &scope) {
    for (Operand &o : op.operands) {
      if (o.scalar)
        checkNames(*o.scalar, scope);
      if (o.weight) {
        checkNames(*o.weight->name, scope);
        if (o.weight->shape)
          checkDims(*o.weight->shape, o.loc, scope);
      }
    }
  }

  void verifyOp(Operation &op, std::set<std::string> &scope) {
    verifyOperands(op, scope);
    // Where each value comes from, for the state checks (registry ops and
    // kernels; values of calls, repeats and ifs are not followed).
    if (opInfo(op.kind) || op.kind == OpKind::Kernel)
      for (Value *r : op.results)
        defOf_[r] = &op;
    checkStateOperand(op);
    switch (op.kind) {
    case OpKind::Return: {
      if (op.operands.size() != func_->resultTypes.size()) {
        error(op.loc, fmt::format("@{} returns {} value(s), 'return' gives {}",
                                  func_->name, func_->resultTypes.size(),
                                  op.operands.size()));
        return;
      }
      for (size_t k = 0; k < op.operands.size(); ++k)
        checkTypeMatch(op.operands[k].loc, op.operands[k].type(),
                       func_->resultTypes[k],
                       fmt::format("return value #{}", k));
      return;
    }
    case OpKind::Yield:
      return; // checked by the owning repeat / if
    case OpKind::Remark:
      return checkNames(*op.cond, scope);
    case OpKind::Call:
      return verifyCall(op, scope);
    case OpKind::Kernel:
      return verifyKernel(op);
    case OpKind::Repeat:
      return verifyRepeat(op, scope);
    case OpKind::If:
      return verifyIf(op, scope);
    case OpKind::Fused:
      return verifyFused(op, scope);
    default:
      return verifyRegistryOp(op, scope);
    }
  }

  void verifyCall(Operation &op, std::set<std::string> &scope) {
    Func *g = m_.findFunc(op.callee);
    if (!g) {
      error(op.loc, fmt::format("call to undefined function @{}", op.callee));
      return;
    }
    if (op.operands.size() != g->params.size()) {
      error(op.loc, fmt::format("@{} takes {} argument(s), got {}", g->name,
                                g->params.size(), op.operands.size()));
      return;
    }
    if (op.results.size() != g->resultTypes.size()) {
      error(op.loc,
            fmt::format("@{} returns {} value(s), but {} result(s) "
                        "are named",
                        g->name, g->resultTypes.size(), op.results.size()));
      return;
    }
    std::set<std::string> calleeScalars;
    for (const Param &p : g->params)
      if (p.isScalar())
        calleeScalars.insert(p.name);
    auto mentionsScalars = [&](const Type &t) {
      for (const Dim &d : t.dims)
        for (const std::string &s : calleeScalars)
          if (d.str().find(s) != std::string::npos)
            return true;
      return false;
    };
    for (size_t k = 0; k < op.operands.size(); ++k) {
      const Param &p = g->params[k];
      const Operand &a = op.operands[k];
      if (a.isWeight()) {
        error(a.loc, fmt::format("argument #{} of @{}: weights cannot be "
                                 "passed to calls; name them inside the "
                                 "callee",
                                 k, g->name));
      } else if (p.isScalar() && !a.isScalar()) {
        error(a.loc, fmt::format("argument #{} of @{} is the scalar '{}', "
                                 "not a tensor",
                                 k, g->name, p.name));
      } else if (!p.isScalar() && a.isScalar()) {
        error(a.loc, fmt::format("argument #{} of @{} must be a tensor value "
                                 "(%{}), got an expression",
                                 k, g->name, p.value->name));
      } else if (!p.isScalar() && !mentionsScalars(p.value->type)) {
        checkTypeMatch(a.loc, a.type(), p.value->type,
                       fmt::format("argument #{} of @{}", k, g->name));
      }
    }
    for (size_t k = 0; k < op.results.size(); ++k) {
      const Type &t = g->resultTypes[k];
      Type inferred = mentionsScalars(t) ? Type::unknown() : t;
      setResult(op, k, inferred);
    }
  }

  void setResult(Operation &op, size_t k, const Type &inferred) {
    Value *v = op.results[k];
    const std::optional<Type> &declared = op.declaredTypes[k];
    if (declared && inferred.isKnown())
      checkTypeMatch(v->loc, *declared, inferred,
                     fmt::format("declared type of %{}", v->name));
    v->type = inferred.isKnown() ? inferred
                                 : (declared ? *declared : Type::unknown());
  }

  /// A lowered op: the recipe must exist with this arity, and every result
  /// carries its type (kernels are not re-inferred).
  void verifyKernel(Operation &op) {
    const format::RecipeInfo *r = format::lookupRecipe(op.callee);
    if (!r) {
      error(op.loc, fmt::format("unknown kernel recipe '{}'", op.callee));
      return;
    }
    if (!format::arityAccepts(*r, op.operands.size()))
      error(op.loc, fmt::format("kernel<{}> takes {} to {} input(s), got {}",
                                r->name, r->minInputs,
                                r->maxInputs < 0 ? std::string("any")
                                                 : std::to_string(r->maxInputs),
                                op.operands.size()));
    if (static_cast<int>(op.results.size()) != r->numOutputs) {
      error(op.loc, fmt::format("kernel<{}> produces {} result(s), but {} "
                                "are named",
                                r->name, r->numOutputs, op.results.size()));
      return;
    }
    for (size_t k = 0; k < op.results.size(); ++k) {
      if (!op.declaredTypes[k] || !op.declaredTypes[k]->isTensor()) {
        error(op.results[k]->loc, fmt::format("kernel<{}> result %{} needs "
                                              "its type written",
                                              r->name, op.results[k]->name));
        continue;
      }
      op.results[k]->type = *op.declaredTypes[k];
    }
  }

  void verifyRepeat(Operation &op, std::set<std::string> &scope) {
    checkNames(*op.lo, scope);
    checkNames(*op.hi, scope);
    for (const ExprPtr &b : {op.lo, op.hi})
      if (b->kind == ExprKind::Float || b->kind == ExprKind::Str ||
          b->kind == ExprKind::Bool || b->kind == ExprKind::List)
        error(b->loc, "repeat bounds must be integer expressions");
    if (op.lo->kind == ExprKind::Int && op.hi->kind == ExprKind::Int &&
        op.lo->i > op.hi->i)
      error(op.lo->loc, fmt::format("bad repeat bounds {}..{}: the start is "
                                    "past the end",
                                    op.lo->i, op.hi->i));
    if (scope.count(op.loopVar))
      error(op.loc, fmt::format("loop variable '{}' shadows a name in scope",
                                op.loopVar));
    Block &body = *op.regions[0];
    for (const Operand &o : op.operands)
      if (o.isWeight())
        error(o.loc, "a carried value must start from a value, not a weight; "
                     "name the weight inside the repeat body");
    for (size_t k = 0; k < body.args.size(); ++k)
      body.args[k]->type = op.operands[k].type();
    std::set<std::string> inner = scope;
    inner.insert(op.loopVar);
    verifyBlock(body, inner, OpKind::Yield, op.loc);
    if (op.results.size() != body.args.size()) {
      error(op.loc, fmt::format("repeat carries {} value(s) but names {} "
                                "result(s)",
                                body.args.size(), op.results.size()));
      return;
    }
    if (!body.ops.empty() && body.ops.back()->kind == OpKind::Yield) {
      Operation &y = *body.ops.back();
      if (y.operands.size() != body.args.size()) {
        error(y.loc, fmt::format("yield gives {} value(s) for {} carried "
                                 "value(s)",
                                 y.operands.size(), body.args.size()));
      } else {
        for (size_t k = 0; k < y.operands.size(); ++k)
          checkTypeMatch(y.operands[k].loc, y.operands[k].type(),
                         body.args[k]->type,
                         fmt::format("yielded value #{} (carried values keep "
                                     "their type)",
                                     k));
      }
    }
    for (size_t k = 0; k < op.results.size(); ++k)
      setResult(op, k, body.args[k]->type);
  }

  /// A fused kernel: its body is isolated (it reads only its arguments, its
  /// own values and weights), holds only ops a kernel can run, and yields
  /// the results; `tied = [i, ...]` names per result the operand it
  /// overwrites in place (or -1), which must be a value of the same type.
  void verifyFused(Operation &op, std::set<std::string> &scope) {
    Block &body = *op.regions[0];
    for (size_t k = 0; k < body.args.size(); ++k)
      body.args[k]->type = op.operands[k].type();
    std::set<const Value *> visible(body.args.begin(), body.args.end());
    for (auto &inner : body.ops) {
      Operation &b = *inner;
      bool allowed = b.kind == OpKind::Yield || b.kind == OpKind::Kernel ||
                     opInfo(b.kind) != nullptr;
      if (!allowed)
        error(b.loc, fmt::format("'{}' cannot be inside a fused kernel (its "
                                 "body holds ops and kernels only)",
                                 opName(b.kind)));
      else if (isStateDecl(b) || writesState(b))
        error(b.loc, fmt::format("'{}' cannot be inside a fused kernel "
                                 "(states live outside the arena and are "
                                 "written by kernels of their own)",
                                 b.kind == OpKind::Kernel ? b.callee
                                                          : opName(b.kind)));
      for (const Operand &o : b.operands)
        if (o.isValue() && !visible.count(o.value))
          error(o.loc, fmt::format("%{} is defined outside the fused kernel "
                                   "\"{}\"; pass it as an argument",
                                   o.value->name, op.callee));
      for (const Value *r : b.results)
        visible.insert(r);
    }
    std::set<std::string> inner = scope;
    verifyBlock(body, inner, OpKind::Yield, op.loc);
    if (body.ops.empty() || body.ops.back()->kind != OpKind::Yield)
      return;
    Operation &y = *body.ops.back();
    if (y.operands.size() != op.results.size()) {
      error(y.loc, fmt::format("yield gives {} value(s) but the fused kernel "
                               "has {} result(s)",
                               y.operands.size(), op.results.size()));
      return;
    }
    for (size_t k = 0; k < op.results.size(); ++k) {
      if (y.operands[k].isWeight())
        error(y.operands[k].loc, "a fused kernel yields values, not weights");
      setResult(op, k, y.operands[k].type());
    }
    for (const Attr &a : op.attrs) {
      if (a.name != "tied") {
        error(a.loc, fmt::format("'fused' has no attribute '{}' (known: "
                                 "tied)",
                                 a.name));
        continue;
      }
      if (!literalMatches(*a.value, "ints") ||
          a.value->args.size() != op.results.size()) {
        error(a.loc, fmt::format("'tied' must list one operand index or -1 "
                                 "per result ({} results)",
                                 op.results.size()));
        continue;
      }
      for (size_t k = 0; k < a.value->args.size(); ++k) {
        const Expr &e = *a.value->args[k];
        int64_t i =
            e.kind == ExprKind::Int ? e.i
            : e.kind == ExprKind::Unary && e.args[0]->kind == ExprKind::Int
                ? -e.args[0]->i
                : -2;
        if (i == -1)
          continue;
        if (i < 0 || static_cast<size_t>(i) >= op.operands.size() ||
            !op.operands[i].isValue()) {
          error(a.loc, fmt::format("'tied' entry {} names operand {}, which "
                                   "is not a value operand",
                                   k, i));
          continue;
        }
        checkTypeMatch(a.loc, op.results[k]->type, op.operands[i].type(),
                       fmt::format("result #{} tied to operand #{}", k, i));
      }
    }
  }

  void verifyIf(Operation &op, std::set<std::string> &scope) {
    checkNames(*op.cond, scope);
    std::vector<Type> types[2];
    for (int b = 0; b < 2; ++b) {
      Block &blk = *op.regions[b];
      std::set<std::string> inner = scope;
      verifyBlock(blk, inner, OpKind::Yield, op.loc);
      if (blk.ops.empty() || blk.ops.back()->kind != OpKind::Yield)
        return;
      Operation &y = *blk.ops.back();
      if (y.operands.size() != op.results.size()) {
        error(y.loc, fmt::format("yield gives {} value(s) but the if has {} "
                                 "result(s)",
                                 y.operands.size(), op.results.size()));
        return;
      }
      for (const Operand &o : y.operands)
        types[b].push_back(o.type());
    }
    for (size_t k = 0; k < op.results.size(); ++k) {
      checkTypeMatch(op.regions[1]->ops.back()->operands[k].loc, types[1][k],
                     types[0][k],
                     fmt::format("result #{} of the else branch (both "
                                 "branches must yield the same types)",
                                 k));
      setResult(op, k, types[0][k].isKnown() ? types[0][k] : types[1][k]);
    }
  }

  /// Checks \p op's attributes against its schema; false if one is out of
  /// its range.
  bool verifyAttrs(Operation &op, const std::set<std::string> &scope) {
    bool inRange = true;
    const std::vector<AttrSpec> &specs = attrSpecs(op.kind);
    for (const Attr &a : op.attrs) {
      const AttrSpec *spec = nullptr;
      for (const AttrSpec &s : specs)
        if (s.name == a.name)
          spec = &s;
      if (!spec) {
        std::string known;
        for (const AttrSpec &s : specs)
          known += (known.empty() ? "" : ", ") + s.name;
        error(a.loc, fmt::format("'{}' has no attribute '{}' (known: {})",
                                 opName(op.kind), a.name,
                                 known.empty() ? "none" : known));
        continue;
      }
      if (spec->kind == "type") {
        if (a.value->kind != ExprKind::Name || !ElemType::parse(a.value->s))
          error(a.loc, fmt::format("attribute '{}' must be an element type "
                                   "name, got '{}'",
                                   a.name, printExpr(*a.value)));
        continue;
      }
      checkNames(*a.value, scope);
      if (!a.value->isLiteral())
        continue; // checked once expand has evaluated it
      if (!literalMatches(*a.value, spec->kind)) {
        error(a.loc, fmt::format("attribute '{}' of '{}' must be {}, got {}",
                                 a.name, opName(op.kind),
                                 kindPhrase(spec->kind), printExpr(*a.value)));
        continue;
      }
      if (spec->range && !literalInRange(*a.value, *spec)) {
        error(a.loc, fmt::format("attribute '{}' of '{}' must lie in {}, got "
                                 "{}",
                                 a.name, opName(op.kind), spec->rangeStr(),
                                 printExpr(*a.value)));
        inRange = false;
      }
    }
    for (const AttrSpec &s : specs)
      if (!s.optional && !op.findAttr(s.name))
        error(op.loc, fmt::format("'{}' is missing required attribute '{}' "
                                  "({})",
                                  opName(op.kind), s.name, kindPhrase(s.kind)));
    return inRange;
  }

public:
  /// Is every number of literal \p e inside \p spec's range?
  static bool literalInRange(const Expr &e, const AttrSpec &spec) {
    auto one = [&](const Expr &x) {
      bool neg = x.kind == ExprKind::Unary;
      const Expr &v = neg ? *x.args[0] : x;
      if (v.kind == ExprKind::Int)
        return spec.inRange(neg ? -v.i : v.i);
      if (v.kind == ExprKind::Float)
        return spec.inRange(neg ? -v.f : v.f);
      return true;
    };
    if (e.kind == ExprKind::List) {
      for (const ExprPtr &a : e.args)
        if (!one(*a))
          return false;
      return true;
    }
    return one(e);
  }

  /// Does literal \p e fit attribute kind \p kind?
  static bool literalMatches(const Expr &e, const std::string &kind) {
    auto isInt = [](const Expr &x) {
      return x.kind == ExprKind::Int ||
             (x.kind == ExprKind::Unary && x.args[0]->kind == ExprKind::Int);
    };
    auto isNum = [&](const Expr &x) {
      return isInt(x) || x.kind == ExprKind::Float ||
             (x.kind == ExprKind::Unary && x.args[0]->kind == ExprKind::Float);
    };
    if (kind == "int")
      return isInt(e);
    if (kind == "float")
      return isNum(e);
    if (kind == "bool")
      return e.kind == ExprKind::Bool;
    if (kind == "str")
      return e.kind == ExprKind::Str;
    if (kind == "ints" || kind == "floats") {
      if (e.kind != ExprKind::List)
        return false;
      for (const ExprPtr &a : e.args)
        if (kind == "ints" ? !isInt(*a) : !isNum(*a))
          return false;
      return true;
    }
    return false;
  }
  static std::string kindPhrase(const std::string &kind) {
    if (kind == "int")
      return "an integer";
    if (kind == "float")
      return "a number";
    if (kind == "bool")
      return "true or false";
    if (kind == "str")
      return "a string";
    if (kind == "ints")
      return "a list of integers";
    if (kind == "floats")
      return "a list of numbers";
    return "an element type";
  }

private:
  void verifyRegistryOp(Operation &op, const std::set<std::string> &scope) {
    const OpInfo *info = opInfo(op.kind);
    int n = static_cast<int>(op.operands.size());
    bool arityOk = n >= info->minOperands &&
                   (info->maxOperands < 0 || n <= info->maxOperands);
    if (!arityOk) {
      std::string want =
          info->minOperands == info->maxOperands
              ? fmt::format("{}", info->minOperands)
          : info->maxOperands < 0
              ? fmt::format("at least {}", info->minOperands)
              : fmt::format("{} to {}", info->minOperands, info->maxOperands);
      error(op.loc, fmt::format("'{}' expects {} operand(s), got {}",
                                info->mnemonic, want, n));
    }
    if (static_cast<int>(op.results.size()) != info->numResults) {
      error(op.loc,
            fmt::format("'{}' produces {} result(s), but {} are "
                        "named",
                        info->mnemonic, info->numResults, op.results.size()));
      return;
    }
    // An attribute outside its schema range is reported once, from the
    // schema; the op's rule would repeat it.
    if (!verifyAttrs(op, scope)) {
      for (Value *r : op.results)
        r->type = Type::unknown();
      return;
    }
    for (size_t k = 0; k < op.operands.size(); ++k) {
      const Type t = op.operands[k].type();
      if (t.isKnown() && !t.isTensor())
        error(op.operands[k].loc, "operands must be tensors");
    }
    if (!arityOk)
      return;
    RuleCtx ctx(op, diag_);
    ctx.out.assign(op.results.size(), Type::unknown());
    if (!runOpRule(ctx)) {
      for (size_t k = 0; k < op.results.size(); ++k)
        op.results[k]->type =
            op.declaredTypes[k] ? *op.declaredTypes[k] : Type::unknown();
      return;
    }
    for (size_t k = 0; k < op.results.size(); ++k)
      setResult(op, k, ctx.out[k]);
  }

  /// An op that writes a state in place must be given one: operand 0 the
  /// result of `state` or of another state write (where the verifier sees
  /// its definition).
  void checkStateOperand(const Operation &op) {
    if (!writesState(op) || op.operands.empty())
      return;
    const Operand &o = op.operands[0];
    const char *name =
        op.kind == OpKind::Kernel ? op.callee.c_str() : opName(op.kind);
    if (o.isWeight()) {
      error(o.loc, fmt::format("'{}' writes its operand 0 in place, which "
                               "must be a state, not a weight",
                               name));
      return;
    }
    auto it = o.value ? defOf_.find(o.value) : defOf_.end();
    if (it == defOf_.end() || isStateDecl(*it->second) ||
        writesState(*it->second))
      return;
    const Operation &d = *it->second;
    error(o.loc,
          fmt::format("'{}' writes its operand 0 in place, which must "
                      "be a state (the result of 'state' or of a "
                      "state write); %{} is the result of '{}'",
                      name, o.value->name,
                      d.kind == OpKind::Kernel ? d.callee : opName(d.kind)));
  }

  Module &m_;
  DiagnosticEngine &diag_;
  std::map<const Value *, const Operation *> defOf_;
  std::set<std::string> letNames_;
  Func *func_ = nullptr;
};

} // namespace

bool verifyModule(Module &m, DiagnosticEngine &diag) {
  return Verifier(m, diag).run();
}

} // namespace strata::ir
