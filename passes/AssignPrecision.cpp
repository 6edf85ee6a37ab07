//===- AssignPrecision.cpp - the storage dtype of every arena buffer ------===//
//
// The precision policy: every activation the plan stores gets a dtype from
// the target. Host plans keep f32. GPU plans (and --precision bf16) keep the
// residual streams in f32 and store every other floating-point activation
// in bf16 (rounded to nearest even on store); accumulators and a fused
// kernel's temporaries are kernel-local and stay f32, and so do the plan's
// outputs (the logits).
//
// The residual streams are the values updates accumulate into: the hyper-
// connection streams (hc_expand, hc_write of a stream) and the plain
// residual (the token embedding, then every add or hc_write whose
// accumulated operand is a residual), followed through reshapes and through
// the bodies of fused kernels (a fused output is a residual where its body
// computes it from a residual input that way).
//
// Generation states are not arena buffers. The recurrent ones (conv
// windows, delta-rule states, token histories) and the QSA indexer's keys
// keep f32. The KV caches, the states attention_cached reads as its K or V
// cache (followed through the kv_store writes), take --kv (PassContext::kv:
// f32, bf16, or i8 with an f32 scale per row; format::stateBytes): they are
// the state that grows with the context. The indexer's raw and block keys
// stay f32: one small head per layer (a fraction of the caches' bytes), and
// they feed a top-k block choice that a rounded key may flip.
//
// Runs after lower-to-kernels (kernels carry their types and are not
// re-inferred) and before plan-memory (which sizes buffers by dtype).
//
//===----------------------------------------------------------------------===//
#include "passes/Pass.h"

#include <fmt/format.h>

#include <map>
#include <set>

namespace strata::passes {

using namespace ir;

namespace {

const char *recipeName(const Operation &op) {
  return op.kind == OpKind::Kernel ? op.callee.c_str() : opName(op.kind);
}

class AssignPrecisionPass : public Pass {
public:
  const char *name() const override { return "assign-precision"; }

  bool run(std::unique_ptr<Module> &m, PassContext &ctx) override {
    if (!checkNotPlanned(*m, name(), ctx))
      return false;
    if (ctx.precision != "f32" && ctx.precision != "bf16") {
      ctx.diag.error(m->loc, fmt::format("assign-precision: unknown precision "
                                         "'{}' (f32 or bf16)",
                                         ctx.precision));
      return false;
    }
    if (ctx.kv != "f32" && ctx.kv != "bf16" && ctx.kv != "i8") {
      ctx.diag.error(m->loc, fmt::format("assign-precision: unknown KV cache "
                                         "dtype '{}' (f32, bf16 or i8)",
                                         ctx.kv));
      return false;
    }
    if (ctx.kv != "f32" && !assignKv(*m, ctx))
      return false;
    if (ctx.precision == "f32")
      return true;
    Func *main = m->findFunc("main");
    if (m->funcs.size() != 1 || !main) {
      ctx.diag.error(m->loc, "assign-precision needs one flat @main; run "
                             "expand first");
      return false;
    }
    std::set<const Value *> keep = stateValues(main->body);
    for (const Param &p : main->params)
      if (p.value)
        keep.insert(p.value);
    Block &body = main->body;
    if (!body.ops.empty() && body.ops.back()->kind == OpKind::Return)
      for (const Operand &o : body.ops.back()->operands)
        if (o.isValue())
          keep.insert(o.value);
    // A returned view shares its operand's storage: the operand (through
    // chains of reshapes) stays f32 with it.
    for (auto it = body.ops.rbegin(); it != body.ops.rend(); ++it) {
      Operation &op = **it;
      if (op.kind == OpKind::Reshape && keep.count(op.results[0]) &&
          op.operands[0].isValue())
        keep.insert(op.operands[0].value);
    }
    std::set<const Value *> residual;
    const Value *tokens =
        main->params.empty() ? nullptr : main->params[0].value;
    markResiduals(body, residual, tokens);
    for (auto &op : body.ops)
      assign(*op, residual, keep);
    return true;
  }

private:
  /// Gives the KV caches of @main (and every version their kv_store
  /// writes make) the element type ctx.kv.
  static bool assignKv(Module &m, PassContext &ctx) {
    Func *main = m.findFunc("main");
    if (!main)
      return true;
    const ElemType elem =
        ElemType::of(ctx.kv == "i8" ? DType::I8 : DType::BF16);
    // Each state version's `state` op, through the writes.
    std::map<Value *, Operation *> root;
    std::set<Operation *> caches;
    for (auto &opPtr : main->body.ops) {
      Operation &op = *opPtr;
      std::string r = recipeName(op);
      auto rootOf = [&](size_t i) -> Operation * {
        if (i >= op.operands.size() || !op.operands[i].isValue())
          return nullptr;
        auto it = root.find(op.operands[i].value);
        return it == root.end() ? nullptr : it->second;
      };
      if (op.kind == OpKind::State)
        root[op.results[0]] = &op;
      else if (r == "kv_store") {
        if (Operation *s = rootOf(0))
          root[op.results[0]] = s;
      } else if (r == "attention_cached") {
        for (size_t i : {size_t(1), size_t(2)})
          if (Operation *s = rootOf(i))
            caches.insert(s);
      }
    }
    for (Operation *s : caches) {
      Type t = s->results[0]->type;
      if (!t.isTensor() || t.dims.empty())
        continue;
      auto d = t.dims.back().constant();
      if (elem.dtype == DType::I8 && d && *d % 4 != 0) {
        ctx.diag.error(s->loc,
                       fmt::format("assign-precision: an i8 KV cache needs "
                                   "rows of a multiple of 4 values (each "
                                   "ends with its f32 scale); {} has {}",
                                   t.str(), *d));
        return false;
      }
    }
    for (auto &[v, s] : root) {
      if (!caches.count(s))
        continue;
      v->type.elem = elem;
    }
    // The written types follow (the printed IR and the verifier read them).
    for (auto &opPtr : main->body.ops) {
      Operation &op = *opPtr;
      if (op.kind != OpKind::State && recipeName(op) != std::string("kv_store"))
        continue;
      auto it = root.find(op.results[0]);
      if (it != root.end() && caches.count(it->second) &&
          !op.declaredTypes.empty() && op.declaredTypes[0])
        op.declaredTypes[0]->elem = elem;
    }
    return true;
  }

  /// Marks the residual values of \p b; \p tokens is the plan's token
  /// input (the embedding lookup it feeds starts the plain residual).
  static void markResiduals(Block &b, std::set<const Value *> &residual,
                            const Value *tokens) {
    for (auto &opPtr : b.ops) {
      Operation &op = *opPtr;
      std::string r = recipeName(op);
      auto isRes = [&](size_t i) {
        return i < op.operands.size() && op.operands[i].isValue() &&
               residual.count(op.operands[i].value);
      };
      bool res = false;
      if (r == "hc_expand")
        res = true;
      else if (r == "get_rows")
        res =
            tokens && op.operands.size() == 2 && op.operands[1].value == tokens;
      else if (r == "hc_write")
        res = isRes(0);
      else if (r == "add")
        res = isRes(0) || isRes(1);
      else if (op.kind == OpKind::Reshape)
        res = isRes(0);
      if (op.kind == OpKind::Fused) {
        Block &inner = *op.regions[0];
        for (size_t i = 0; i < inner.args.size(); ++i)
          if (isRes(i))
            residual.insert(inner.args[i]);
        markResiduals(inner, residual, nullptr);
        const Operation &y = *inner.ops.back();
        for (size_t k = 0; k < op.results.size(); ++k)
          if (residual.count(y.operands[k].value))
            residual.insert(op.results[k]);
        continue;
      }
      if (res)
        for (const Value *v : op.results)
          residual.insert(v);
    }
  }

  static Type toBf16(Type t) {
    t.elem = ElemType::of(DType::BF16);
    return t;
  }

  /// Stores \p v in bf16 unless it must stay as it is.
  static void lower(Value *v, const std::set<const Value *> &residual,
                    const std::set<const Value *> &keep) {
    if (!v->type.isTensor() || v->type.elem.isBlock ||
        v->type.elem.dtype != DType::F32 || residual.count(v) || keep.count(v))
      return;
    v->type = toBf16(v->type);
  }

  static void assign(Operation &op, const std::set<const Value *> &residual,
                     const std::set<const Value *> &keep) {
    if (op.kind == OpKind::Return)
      return;
    if (op.kind == OpKind::Reshape) {
      // A view has its operand's storage.
      if (op.operands[0].isValue())
        op.results[0]->type.elem = op.operands[0].value->type.elem;
      if (op.declaredTypes[0])
        op.declaredTypes[0]->elem = op.results[0]->type.elem;
      return;
    }
    if (op.kind == OpKind::Fused) {
      Block &inner = *op.regions[0];
      for (size_t i = 0; i < inner.args.size(); ++i)
        if (op.operands[i].isValue())
          inner.args[i]->type = op.operands[i].value->type;
      for (size_t k = 0; k < op.results.size(); ++k) {
        lower(op.results[k], residual, keep);
        op.declaredTypes[k] = op.results[k]->type;
      }
      // The body stores its outputs in the results' dtypes; temporaries
      // stay f32; views follow their operand.
      Operation &y = *inner.ops.back();
      std::map<const Value *, Type> outType;
      for (size_t k = 0; k < op.results.size(); ++k)
        outType[y.operands[k].value] = op.results[k]->type;
      for (auto &innerOp : inner.ops) {
        if (innerOp->kind == OpKind::Yield)
          continue;
        if (innerOp->kind == OpKind::Reshape) {
          innerOp->results[0]->type.elem =
              innerOp->operands[0].value->type.elem;
          if (innerOp->declaredTypes[0])
            innerOp->declaredTypes[0]->elem = innerOp->results[0]->type.elem;
          continue;
        }
        for (size_t k = 0; k < innerOp->results.size(); ++k) {
          Value *v = innerOp->results[k];
          if (auto it = outType.find(v); it != outType.end())
            v->type = it->second;
          innerOp->declaredTypes[k] = v->type;
        }
      }
      return;
    }
    for (size_t k = 0; k < op.results.size(); ++k) {
      lower(op.results[k], residual, keep);
      op.declaredTypes[k] = op.results[k]->type;
    }
  }
};

} // namespace

std::unique_ptr<Pass> createAssignPrecisionPass() {
  return std::make_unique<AssignPrecisionPass>();
}

} // namespace strata::passes
