//===- PassManager.cpp - pass registry and manager ------------------------===//
#include "passes/Pass.h"

#include "ir/Verifier.h"

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
