//===- Expand.cpp - bind, unroll, resolve, inline
//---------------------------===//
//
// `expand` turns a model description into one flat function:
//   1. evaluates every `let` against the model's metadata (meta(), defaults);
//   2. walks @main, inlining calls, unrolling `repeat` with its carried
//      values and keeping only the taken branch of each `if`;
//   3. evaluates attributes, result types and weight name templates, and
//      binds each weight to its GGUF element type and shape;
//   4. drops @main's inputs after the first that nothing reads (the
//      generation inputs of a description compiled without generation).
// The builtins max_context(), max_batch() and generation() come from the
// pass context (strata-compile --max-context, --max-batch).
// The output keeps the lets (as literals) and a single @main; value names
// get a `.N` suffix where inlining would repeat them.
//
//===----------------------------------------------------------------------===//
#include "passes/Pass.h"

#include "ir/Expr.h"
#include "runtime/format/GgmlType.h"
#include "runtime/format/ModelInfo.h"

#include <fmt/format.h>

#include <functional>
#include <map>
#include <set>

namespace strata::passes {

using namespace ir;

namespace {

/// Signals that expansion stopped (error already reported).
struct Abort {};

/// True if IR shapes \p a and \p b (constant dims) are one ggml tensor:
/// equal once ggml's implicit trailing extents of 1 are added (see
/// format::sameGgmlShape; ggml order is the IR order reversed).
bool sameGgmlExtents(const std::vector<Dim> &a, const std::vector<Dim> &b) {
  auto ggml = [](const std::vector<Dim> &dims) {
    std::vector<uint64_t> out;
    for (auto it = dims.rbegin(); it != dims.rend(); ++it) {
      std::optional<int64_t> c = it->constant();
      out.push_back(c && *c >= 0 ? static_cast<uint64_t>(*c) : 0);
    }
    return out;
  };
  return format::sameGgmlShape(ggml(a), ggml(b));
}

class Expander {
public:
  Expander(const Module &m, PassContext &ctx)
      : m_(m), ctx_(ctx), diag_(ctx.diag) {}

  std::unique_ptr<Module> run() {
    if (!ctx_.model) {
      diag_.error(m_.loc, "expand needs model metadata: give a GGUF or "
                          "key/value file (strata-opt --meta FILE)");
      return nullptr;
    }
    env_.model = ctx_.model;
    env_.arch = ctx_.model->architecture();
    env_.names = &globals_;
    env_.baked = &ctx_.bakedMeta;
    env_.maxContext = ctx_.maxContext;
    env_.maxBatch = ctx_.maxBatch;
    auto out = std::make_unique<Module>();
    out->name = m_.name;
    out->loc = m_.loc;
    try {
      for (const LetDecl &let : m_.lets) {
        Const v = eval(*let.value);
        globals_[let.name] = v;
        out->lets.push_back(LetDecl{let.name, v.toExpr(let.loc), let.loc});
      }
      const Func *main = m_.findFunc("main");
      if (!main) {
        diag_.error(m_.loc, "no @main function to expand");
        return nullptr;
      }
      auto f = std::make_unique<Func>();
      f->name = main->name;
      f->loc = main->loc;
      func_ = f.get();
      std::map<const Value *, Value *> vmap;
      for (const Param &p : main->params) {
        if (p.isScalar()) {
          diag_.error(p.loc, fmt::format("@main cannot take the scalar "
                                         "parameter '{}': nothing binds it",
                                         p.name));
          return nullptr;
        }
        Param q;
        q.loc = p.loc;
        q.value = f->newValue(uniqueName(p.value->name),
                              substType(p.value->type, globals_, p.loc),
                              p.value->loc);
        vmap[p.value] = q.value;
        f->params.push_back(q);
      }
      for (const Type &t : main->resultTypes)
        f->resultTypes.push_back(substType(t, globals_, main->loc));
      std::vector<Operand> rets =
          emitBlock(main->body, globals_, vmap, f->body, 0);
      auto ret = std::make_unique<Operation>();
      ret->kind = OpKind::Return;
      ret->loc = main->body.ops.back()->loc;
      ret->operands = std::move(rets);
      f->body.ops.push_back(std::move(ret));
      dropUnreadInputs(*f);
      out->funcs.push_back(std::move(f));
    } catch (Abort &) {
      return nullptr;
    }
    if (diag_.hadError())
      return nullptr;
    return out;
  }

private:
  using Scalars = std::map<std::string, Const>;

  [[noreturn]] void abort() { throw Abort{}; }

  Const eval(const Expr &e, const Scalars *names = nullptr) {
    EvalEnv env = env_;
    if (names)
      env.names = names;
    auto v = evalExpr(e, env, diag_);
    if (!v)
      abort();
    return *v;
  }

  Type substType(const Type &t, const Scalars &names, SourceLoc loc) {
    if (!t.isTensor())
      return t;
    EvalEnv env = env_;
    env.names = &names;
    std::vector<Dim> dims;
    for (const Dim &d : t.dims) {
      auto s = d.substitute(names, env, diag_, loc);
      if (!s)
        abort();
      if (auto c = s->constant(); c && *c < 0) {
        diag_.error(loc,
                    fmt::format("dimension evaluates to {} (negative)", *c));
        abort();
      }
      dims.push_back(*s);
    }
    return Type::tensor(t.elem, dims);
  }

  std::string uniqueName(const std::string &base) {
    if (used_.insert(base).second)
      return base;
    // Strip a previous suffix so names stay short: q.3 -> q.4, not q.3.1.
    std::string stem = base;
    size_t dot = stem.rfind('.');
    if (dot != std::string::npos &&
        stem.find_first_not_of("0123456789", dot + 1) == std::string::npos)
      stem = stem.substr(0, dot);
    for (unsigned n = counters_[stem] + 1;; ++n) {
      std::string cand = fmt::format("{}.{}", stem, n);
      if (used_.insert(cand).second) {
        counters_[stem] = n;
        return cand;
      }
    }
  }

  std::shared_ptr<WeightRef> bindWeight(const WeightRef &w,
                                        const Scalars &names, SourceLoc loc) {
    Const name = eval(*w.name, &names);
    if (name.kind != Const::Kind::Str) {
      diag_.error(loc, "a weight name must be a string");
      abort();
    }
    const format::TensorInfo *t = ctx_.model->findTensor(name.s);
    if (!t) {
      diag_.error(loc, fmt::format("weight '{}' not found in {}", name.s,
                                   ctx_.model->source));
      abort();
    }
    format::GgmlTypeInfo ti = format::ggmlTypeInfo(t->type);
    if (!ti.loadable) {
      diag_.error(loc, fmt::format("weight '{}' is {} in {}, a block format "
                                   "strata cannot load",
                                   name.s, ti.name, ctx_.model->source));
      abort();
    }
    ElemType elem = ElemType::fromGgml(t->type);
    std::vector<Dim> shape;
    // GGUF dims are ggml order (ne[0] fastest); the IR lists the slowest first.
    for (auto it = t->dims.rbegin(); it != t->dims.rend(); ++it)
      shape.push_back(Dim::constant(static_cast<int64_t>(*it)));
    if (w.elem && !(*w.elem == elem)) {
      diag_.error(loc, fmt::format("weight '{}' is {} in {}, the description "
                                   "expects {}",
                                   name.s, elem.str(), ctx_.model->source,
                                   w.elem->str()));
      abort();
    }
    if (w.shape) {
      Type want = substType(Type::tensor(elem, *w.shape), names, loc);
      // ggml's view: leading extents of 1 (IR order) do not change a tensor,
      // so a [D] vector binds where the description wants [1, D] and takes
      // the description's shape.
      if (want.dims != shape && sameGgmlExtents(want.dims, shape))
        shape = want.dims;
      if (want.dims != shape) {
        diag_.error(loc, fmt::format("weight '{}' has shape {} in {}, the "
                                     "description expects {}",
                                     name.s, printDims(shape),
                                     ctx_.model->source, printDims(want.dims)));
        abort();
      }
    }
    auto out = std::make_shared<WeightRef>();
    out->name = Expr::makeStr(name.s, w.name->loc);
    out->elem = elem;
    out->shape = shape;
    return out;
  }

  Operand mapOperand(const Operand &o, const Scalars &names,
                     const std::map<const Value *, Value *> &vmap) {
    Operand r;
    r.loc = o.loc;
    if (o.value) {
      auto it = vmap.find(o.value);
      // The verifier guarantees dominance, so every value is mapped.
      r.value = it->second;
    } else if (o.weight) {
      r.weight = bindWeight(*o.weight, names, o.loc);
    }
    return r;
  }

  void countOp(SourceLoc loc) {
    if (++emitted_ > ctx_.maxExpandedOps) {
      diag_.error(loc, fmt::format("expansion produces more than {} ops; "
                                   "check the repeat bounds",
                                   ctx_.maxExpandedOps));
      abort();
    }
  }

  /// Emits \p b into \p out; returns the mapped operands of its terminator.
  std::vector<Operand> emitBlock(const Block &b, const Scalars &names,
                                 std::map<const Value *, Value *> &vmap,
                                 Block &out, int depth) {
    for (const auto &opPtr : b.ops) {
      const Operation &op = *opPtr;
      switch (op.kind) {
      case OpKind::Return:
      case OpKind::Yield: {
        std::vector<Operand> r;
        for (const Operand &o : op.operands)
          r.push_back(mapOperand(o, names, vmap));
        return r;
      }
      case OpKind::Remark: {
        Const text = eval(*op.cond, &names);
        if (text.kind != Const::Kind::Str) {
          diag_.error(op.cond->loc, "a remark must be a string");
          abort();
        }
        diag_.remark(op.loc, text.s);
        break;
      }
      case OpKind::Call:
        emitCall(op, names, vmap, out, depth);
        break;
      case OpKind::Repeat:
        emitRepeat(op, names, vmap, out, depth);
        break;
      case OpKind::If: {
        Const c = eval(*op.cond, &names);
        if (c.kind != Const::Kind::Bool) {
          diag_.error(op.cond->loc, fmt::format("an if condition must be a "
                                                "bool, got {}",
                                                c.kindName()));
          abort();
        }
        std::vector<Operand> ys =
            emitBlock(*op.regions[c.b ? 0 : 1], names, vmap, out, depth + 1);
        bindResults(op, ys, vmap);
        break;
      }
      case OpKind::Fused: {
        // The kernel and its body are copied; the body stays a region.
        emitOp(op, names, vmap, out);
        Operation &n = *out.ops.back();
        auto body = std::make_unique<Block>();
        for (Value *a : op.regions[0]->args) {
          Value *v =
              func_->newValue(uniqueName(a->name), Type::unknown(), a->loc);
          vmap[a] = v;
          body->args.push_back(v);
        }
        auto y = std::make_unique<Operation>();
        y->kind = OpKind::Yield;
        y->loc = op.loc;
        y->operands = emitBlock(*op.regions[0], names, vmap, *body, depth + 1);
        body->ops.push_back(std::move(y));
        n.regions.push_back(std::move(body));
        break;
      }
      default:
        emitOp(op, names, vmap, out);
        break;
      }
    }
    return {};
  }

  /// Maps the results of a structural op to the values its body produced.
  /// Results that are weights (yielded weight refs) are not allowed.
  void bindResults(const Operation &op, const std::vector<Operand> &ys,
                   std::map<const Value *, Value *> &vmap) {
    for (size_t k = 0; k < op.results.size() && k < ys.size(); ++k) {
      if (!ys[k].value) {
        diag_.error(ys[k].loc, "only values (not weights) can be yielded or "
                               "returned");
        abort();
      }
      vmap[op.results[k]] = ys[k].value;
    }
  }

  void emitOp(const Operation &op, const Scalars &names,
              std::map<const Value *, Value *> &vmap, Block &out) {
    countOp(op.loc);
    auto n = std::make_unique<Operation>();
    n->kind = op.kind;
    n->loc = op.loc;
    n->callee = op.callee;
    for (const Operand &o : op.operands)
      n->operands.push_back(mapOperand(o, names, vmap));
    for (const Attr &a : op.attrs) {
      // Element-type attributes are names, not expressions to evaluate.
      const bool isType = a.value->kind == ExprKind::Name &&
                          ElemType::parse(a.value->s).has_value() &&
                          !names.count(a.value->s);
      n->attrs.push_back(
          Attr{a.name, isType ? a.value : eval(*a.value, &names).toExpr(a.loc),
               a.loc});
    }
    for (size_t k = 0; k < op.results.size(); ++k) {
      std::optional<Type> declared = op.declaredTypes[k];
      if (declared)
        declared = substType(*declared, names, op.loc);
      n->declaredTypes.push_back(declared);
      Value *v = func_->newValue(uniqueName(op.results[k]->name),
                                 declared ? *declared : Type::unknown(),
                                 op.results[k]->loc);
      n->results.push_back(v);
      vmap[op.results[k]] = v;
    }
    out.ops.push_back(std::move(n));
  }

  void emitCall(const Operation &op, const Scalars &names,
                std::map<const Value *, Value *> &vmap, Block &out, int depth) {
    const Func *g = m_.findFunc(op.callee);
    if (depth > 64) {
      diag_.error(op.loc, "calls nested deeper than 64");
      abort();
    }
    Scalars inner = globals_;
    std::map<const Value *, Value *> innerMap;
    for (size_t k = 0; k < g->params.size(); ++k) {
      const Param &p = g->params[k];
      const Operand &a = op.operands[k];
      if (p.isScalar()) {
        Const v = eval(*a.scalar, &names);
        bool ok =
            p.scalarKind == Type::Kind::Int
                ? v.kind == Const::Kind::Int
                : (v.kind == Const::Kind::Float || v.kind == Const::Kind::Int);
        if (!ok) {
          diag_.error(a.loc,
                      fmt::format("argument '{}' of @{} must be {}, "
                                  "got {}",
                                  p.name, g->name,
                                  p.scalarKind == Type::Kind::Int ? "an int"
                                                                  : "a float",
                                  v.kindName()));
          abort();
        }
        if (p.scalarKind == Type::Kind::Float && v.kind == Const::Kind::Int)
          v = Const::ofFloat(static_cast<double>(v.i));
        inner[p.name] = v;
      } else {
        innerMap[p.value] = mapOperand(a, names, vmap).value;
      }
    }
    std::vector<Operand> rets =
        emitBlock(g->body, inner, innerMap, out, depth + 1);
    bindResults(op, rets, vmap);
  }

  void emitRepeat(const Operation &op, const Scalars &names,
                  std::map<const Value *, Value *> &vmap, Block &out,
                  int depth) {
    Const lo = eval(*op.lo, &names), hi = eval(*op.hi, &names);
    if (lo.kind != Const::Kind::Int || hi.kind != Const::Kind::Int) {
      diag_.error(op.loc, fmt::format("repeat bounds must be ints, got {} and "
                                      "{}",
                                      lo.kindName(), hi.kindName()));
      abort();
    }
    if (lo.i > hi.i) {
      diag_.error(op.lo->loc, fmt::format("bad repeat bounds {}..{}: the "
                                          "start is past the end",
                                          lo.i, hi.i));
      abort();
    }
    const Block &body = *op.regions[0];
    std::vector<Value *> carries;
    for (const Operand &o : op.operands)
      carries.push_back(mapOperand(o, names, vmap).value);
    Scalars inner = names;
    for (int64_t i = lo.i; i < hi.i; ++i) {
      inner[op.loopVar] = Const::ofInt(i);
      for (size_t k = 0; k < body.args.size(); ++k)
        vmap[body.args[k]] = carries[k];
      std::vector<Operand> ys = emitBlock(body, inner, vmap, out, depth + 1);
      for (size_t k = 0; k < carries.size() && k < ys.size(); ++k) {
        if (!ys[k].value) {
          diag_.error(ys[k].loc, "only values (not weights) can be yielded");
          abort();
        }
        carries[k] = ys[k].value;
      }
    }
    for (size_t k = 0; k < op.results.size(); ++k)
      vmap[op.results[k]] = carries[k];
  }

  /// @main's inputs after the first (the tokens) that the expanded body
  /// does not read are not inputs of the model: a description takes the
  /// generation inputs (positions, slots) and reads them only under
  /// `if generation()`, and a plan without state keeps one input.
  static void dropUnreadInputs(Func &f) {
    std::set<const Value *> read;
    std::function<void(const Block &)> visit = [&](const Block &b) {
      for (const auto &op : b.ops) {
        for (const Operand &o : op->operands)
          if (o.value)
            read.insert(o.value);
        for (const auto &r : op->regions)
          visit(*r);
      }
    };
    visit(f.body);
    for (size_t i = f.params.size(); i-- > 1;)
      if (f.params[i].value && !read.count(f.params[i].value))
        f.params.erase(f.params.begin() + static_cast<std::ptrdiff_t>(i));
  }

  const Module &m_;
  PassContext &ctx_;
  DiagnosticEngine &diag_;
  EvalEnv env_;
  Scalars globals_;
  Func *func_ = nullptr;
  std::set<std::string> used_;
  std::map<std::string, unsigned> counters_;
  size_t emitted_ = 0;
};

class ExpandPass : public Pass {
public:
  const char *name() const override { return "expand"; }
  bool run(std::unique_ptr<Module> &m, PassContext &ctx) override {
    auto out = Expander(*m, ctx).run();
    if (!out)
      return false;
    m = std::move(out);
    return true;
  }
};

} // namespace

std::unique_ptr<Pass> createExpandPass() {
  return std::make_unique<ExpandPass>();
}

} // namespace strata::passes
