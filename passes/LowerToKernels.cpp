//===- LowerToKernels.cpp - one catalog recipe per op ---------------------===//
//
// Replaces every op of the flat @main by `kernel<recipe>` with the same
// operands and attributes and its inferred result types written out; the
// recipe is the op table's row of the same name (runtime/format/Ops.def).
// A `fused` kernel stays one kernel: the ops of its body are lowered the
// same way, and the plan builder turns the whole region into one plan
// kernel. A `reshape` of a value stays an op: it is a view that plan-memory
// aliases (inside a fused body, a view of a temporary), not a launch; a
// reshape of a weight becomes `kernel<reshape>`, which brings the weight in.
// A `state` stays an op too: it names storage outside the arena, which the
// plan builder turns into a plan state entry; the ops that write a state in
// place (kv_store) and read one (attention_cached) become kernels.
//
//===----------------------------------------------------------------------===//
#include "passes/Pass.h"

#include <fmt/format.h>

namespace strata::passes {

using namespace ir;

namespace {

class LowerToKernelsPass : public Pass {
public:
  const char *name() const override { return "lower-to-kernels"; }

  bool run(std::unique_ptr<Module> &m, PassContext &ctx) override {
    Func *main = m->findFunc("main");
    if (m->funcs.size() != 1 || !main) {
      ctx.diag.error(m->loc, "lower-to-kernels needs one flat @main; run "
                             "expand first");
      return false;
    }
    return lowerBlock(main->body, ctx);
  }

private:
  bool lowerBlock(Block &b, PassContext &ctx) {
    bool ok = true;
    for (auto &op : b.ops) {
      if (op->kind == OpKind::Return || op->kind == OpKind::Yield ||
          op->kind == OpKind::Kernel)
        continue;
      if (op->kind == OpKind::Fused) {
        ok = lowerBlock(*op->regions[0], ctx) && ok;
        continue;
      }
      if (op->kind == OpKind::Reshape && !op->operands[0].isWeight())
        continue;
      if (isStateDecl(*op))
        continue;
      if (!opInfo(op->kind)) {
        ctx.diag.error(op->loc, fmt::format("lower-to-kernels: '{}' must be "
                                            "expanded first",
                                            opName(op->kind)));
        ok = false;
        continue;
      }
      for (size_t k = 0; k < op->results.size(); ++k) {
        const Type &t = op->results[k]->type;
        if (!t.isTensor()) {
          ctx.diag.error(op->loc,
                         fmt::format("cannot lower '{}': the type "
                                     "of %{} is unknown",
                                     opName(op->kind), op->results[k]->name));
          ok = false;
        }
        op->declaredTypes[k] = t;
      }
      op->callee = opName(op->kind);
      op->kind = OpKind::Kernel;
    }
    return ok;
  }
};

} // namespace

std::unique_ptr<Pass> createLowerToKernelsPass() {
  return std::make_unique<LowerToKernelsPass>();
}

} // namespace strata::passes
