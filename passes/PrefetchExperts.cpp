//===- PrefetchExperts.cpp - the routed experts' stacks as route hints ----===//
//
// At one token a layer's routed experts are the largest read of a decode
// step (the Qwen3-MoE: eight of 128 experts, ~24 MB a layer), and their
// GEMVs cannot start reading until the router, moe_route and moe_sort have
// run: the grouped kernels find their experts in the sort's offsets. Which
// slabs they read is known one launch earlier, when moe_route has picked
// the ids. This pass hands moe_route the stacks its ids select, as operands
// past the logits:
//
//   %w, %ids = moe_route(%logits) {k, func, norm}
//   %off, %perm, %rows = moe_sort(%ids) {experts = E}
//   %h = moe_grouped_swiglu(%x, %perm, %off, gate, up)
//   %y = moe_grouped_down(%h, %off, down)
// =>
//   %w, %ids = moe_route(%logits, gate, up, down) {k, func, norm}
//   (the rest unchanged)
//
// The stacks are hints: no result depends on them (Ops.def), the CPU
// backend ignores them and the cost rules count their bytes where the
// grouped GEMMs read them. The sm_90 route form (codegen/sort/
// RouteEmitter.cpp, option moe-route-prefetch) asks L2 for the picked
// experts' slabs from many SMs while the sort runs.
//
// Plans that decode on a GPU target only: at thousands of rows nearly
// every expert is read anyway, and the host has no L2 to ask.
//
//===----------------------------------------------------------------------===//
#include "ir/DefUse.h"
#include "passes/Pass.h"

#include <algorithm>

namespace strata::passes {

using namespace ir;

namespace {

class PrefetchExpertsPass : public Pass {
public:
  const char *name() const override { return "prefetch-experts"; }

  bool run(std::unique_ptr<Module> &m, PassContext &ctx) override {
    if (!checkNotPlanned(*m, name(), ctx))
      return false;
    if (!decodesOnGpu(ctx))
      return true;
    for (auto &f : m->funcs)
      hint(*f);
    return true;
  }

private:
  /// Appends to each top-level moe_route without hints the weight stacks
  /// of the grouped GEMMs that read its sort's offsets, in op order.
  static void hint(Func &f) {
    DefUse du(f.body);
    for (auto &opPtr : f.body.ops) {
      Operation &route = *opPtr;
      if (route.kind != OpKind::MoeRoute || route.operands.size() != 1 ||
          route.results.size() != 2)
        continue;
      std::vector<Operand> stacks;
      for (const Use &u : du.uses(route.results[1])) {
        const Operation &sort = *u.user;
        if (sort.kind != OpKind::MoeSort || u.operand != 0 ||
            sort.results.empty())
          continue;
        for (const Use &g : du.uses(sort.results[0])) {
          const Operation &gemm = *g.user;
          if (gemm.kind == OpKind::MoeGroupedSwiglu && g.operand == 2) {
            stacks.push_back(gemm.operands[3]);
            stacks.push_back(gemm.operands[4]);
          } else if (gemm.kind == OpKind::MoeGroupedDown && g.operand == 1) {
            stacks.push_back(gemm.operands[2]);
          }
        }
      }
      // moe_route takes at most three (Ops.def); anything else (another
      // sort of the same ids) keeps the route as it is. A stack is a bound
      // weight [E, N, K] of the logits' E experts.
      const Type logits = route.operands[0].type();
      auto fits = [&](const Operand &s) {
        const Type t = s.type();
        return s.isWeight() && t.isTensor() && t.rank() == 3 &&
               logits.isTensor() && logits.rank() == 2 &&
               !Dim::provablyDifferent(t.dims[0], logits.dims[1]);
      };
      if (stacks.empty() || stacks.size() > 3 ||
          !std::all_of(stacks.begin(), stacks.end(), fits))
        continue;
      for (Operand &s : stacks) {
        s.loc = route.loc;
        route.operands.push_back(std::move(s));
      }
    }
  }
};

} // namespace

std::unique_ptr<Pass> createPrefetchExpertsPass() {
  return std::make_unique<PrefetchExpertsPass>();
}

} // namespace strata::passes
