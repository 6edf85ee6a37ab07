//===- LowerToKernels.cpp - one catalog recipe per op ---------------------===//
//
// Replaces every registry op of the flat @main by `kernel<recipe>` with the
// same operands and attributes and its inferred result types written out.
// The recipe is the catalog entry (runtime/format/Recipes.def) named like the
// op; `reshape` of a value stays an op because it is a view that plan-memory
// aliases, not a launch (a reshape of a weight becomes kernel<copy>). Fusion
// passes run before this one and leave fused ops that map to fused recipes.
//
//===----------------------------------------------------------------------===//
#include "passes/Pass.h"

#include "runtime/format/Plan.h"

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
    bool ok = true;
    for (auto &op : main->body.ops) {
      if (op->kind == OpKind::Return || op->kind == OpKind::Kernel)
        continue;
      // A reshape of a value is a view; a reshape of a weight must bring the
      // weight into the arena, which is a copy.
      if (op->kind == OpKind::Reshape) {
        if (op->operands[0].isWeight()) {
          op->declaredTypes[0] = op->results[0]->type;
          op->callee = "copy";
          op->kind = OpKind::Kernel;
        }
        continue;
      }
      if (!opInfo(op->kind)) {
        ctx.diag.error(op->loc, fmt::format("lower-to-kernels: '{}' must be "
                                            "expanded first",
                                            opName(op->kind)));
        ok = false;
        continue;
      }
      const format::RecipeInfo *r = format::lookupRecipe(opName(op->kind));
      if (!r) {
        ctx.diag.error(op->loc, fmt::format("no kernel recipe implements "
                                            "'{}'",
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
      op->callee = r->name;
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
