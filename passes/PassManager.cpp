//===- PassManager.cpp - pass registry and manager ------------------------===//
#include "passes/Pass.h"

#include "ir/Target.h"
#include "ir/Verifier.h"

#include <fmt/format.h>

namespace strata::passes {

#define PASS(Class, Name, Summary) std::unique_ptr<Pass> create##Class();
#include "passes/Passes.def"

std::unique_ptr<Pass> createPass(const std::string &name) {
#define PASS(Class, Name, Summary)                                             \
  if (name == Name)                                                            \
    return create##Class();
#include "passes/Passes.def"
  return nullptr;
}

const std::vector<PassInfo> &allPasses() {
  static const std::vector<PassInfo> kPasses = {
#define PASS(Class, Name, Summary) {Name, Summary},
#include "passes/Passes.def"
  };
  return kPasses;
}

bool decodesOnGpu(const PassContext &ctx) {
  const ir::Target *target = ir::lookupTarget(ctx.target);
  return ctx.maxContext > 0 && target && target->gpu;
}

bool checkNotPlanned(const ir::Module &m, const char *pass, PassContext &ctx) {
  for (const auto &f : m.funcs) {
    bool planned = false;
    for (const ir::Param &p : f->params)
      planned = planned || (p.value && p.value->offset);
    for (const auto &op : f->body.ops)
      for (const ir::Value *r : op->results)
        planned = planned || r->offset;
    if (planned) {
      ctx.diag.error(f->loc,
                     fmt::format("{}: @{} already has arena offsets; run {} "
                                 "before plan-memory",
                                 pass, f->name, pass));
      return false;
    }
  }
  return true;
}

bool PassManager::run(std::unique_ptr<ir::Module> &m, PassContext &ctx) {
  for (auto &p : passes_) {
    if (!p->run(m, ctx))
      return false;
    // The verifier runs after every pass: a pass that breaks an invariant is
    // caught where it happens, not three passes later.
    if (!ir::verifyModule(*m, ctx.diag))
      return false;
    if (after_)
      after_(p->name(), *m);
  }
  return true;
}

} // namespace strata::passes
