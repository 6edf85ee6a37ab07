//===- FuseRouteSort.cpp - moe_route and its moe_sort, one kernel ---------===//
//
// A decode step's routing is two launches of one block each: moe_route
// picks a token's k experts, moe_sort orders the T x k slots by expert
// for the grouped GEMMs. At one token each kernel is a few dependent round
// trips, and the sort's launch and wait on the route cost what its work
// does (the Qwen3-MoE at one row, H100: route 2.9 us, sort 2.0 us a
// layer; docs/PERFORMANCE.md). This pass makes the pair one kernel where
// the sort reads nothing but the route's ids:
//
//   %w, %ids = moe_route(%logits, hints...) {k, func, norm}
//   %off, %perm, %rows = moe_sort(%ids) {experts = E}
// =>
//   %w, %off, %perm, %rows = fused "moe_route+moe_sort"(%logits, hints...)
//
// The ids stay an output where anything else reads them, else they are
// the kernel's temporary (kept in its workspace). Routes of the run's T
// tokens, k <= 32 of at most 1,024 experts (the route's wave and block
// forms), whose weights something reads. The sort family prints the kernel
// (emitRouteSortKernel, codegen/sort/RouteEmitter.cpp): runs whose slots fit
// one block's sort (decode steps) route and sort in one block; longer runs
// route and count each slice of slots in a pre-launch, then rank the slices
// (the sort's own second launch): two launches where there were three.
//
// Plans that decode on a GPU target only (the host runs ops, not
// launches); after prefetch-experts, so the route keeps its hints.
// `--skip-pass fuse-route-sort` is the A/B.
//
//===----------------------------------------------------------------------===//
#include "ir/Rewrite.h"
#include "passes/Pass.h"

namespace strata::passes {

using namespace ir;

namespace {

class FuseRouteSortPass : public Pass {
public:
  const char *name() const override { return "fuse-route-sort"; }

  bool run(std::unique_ptr<Module> &m, PassContext &ctx) override {
    if (!checkNotPlanned(*m, name(), ctx))
      return false;
    if (!decodesOnGpu(ctx))
      return true;
    for (auto &f : m->funcs)
      fuse(*f);
    return true;
  }

private:
  /// The top-level moe_sort that reads \p route's ids (its only operand),
  /// or null where none or several do.
  static Operation *sortOf(const Rewriter &rw, const Operation &route) {
    Operation *sort = nullptr;
    for (const Use &u : rw.defUse().uses(route.results[1])) {
      if (u.user->kind != OpKind::MoeSort || u.operand != 0 ||
          rw.position(u.user) == SIZE_MAX)
        continue;
      if (sort)
        return nullptr;
      sort = u.user;
    }
    return sort;
  }

  /// Whether the sort family prints \p route fused: the run's T tokens of
  /// at most 1,024 experts (a wave a token past one), k <= 32 (a lane a
  /// pick), its weights read (they stay an output).
  static bool fusible(const Rewriter &rw, const Operation &route) {
    const Type &w = route.results[0]->type;
    const Attr *k = route.findAttr("k");
    const Type &logits = route.operands[0].type();
    std::optional<int64_t> e = logits.isTensor() && logits.rank() == 2
                                   ? logits.dims[1].constant()
                                   : std::nullopt;
    return w.isTensor() && !w.dims.empty() && w.dims[0] == Dim::symbol("T") &&
           k && k->value->kind == ExprKind::Int && k->value->i <= 32 && e &&
           *e <= 1024 && !rw.defUse().uses(route.results[0]).empty();
  }

  /// Fuses each top-level moe_route with the moe_sort of its ids.
  static void fuse(Func &f) {
    Rewriter rw(f);
    size_t i = 0;
    while (i < f.body.ops.size()) {
      Operation *route = f.body.ops[i].get();
      Operation *sort = route->kind == OpKind::MoeRoute &&
                                route->results.size() == 2 &&
                                fusible(rw, *route)
                            ? sortOf(rw, *route)
                            : nullptr;
      if (sort && rw.canFuse({route, sort}) &&
          rw.fuse({route, sort}, "moe_route+moe_sort")) {
        i = rw.lastRewriteStart() + 1;
        continue;
      }
      ++i;
    }
  }
};

} // namespace

std::unique_ptr<Pass> createFuseRouteSortPass() {
  return std::make_unique<FuseRouteSortPass>();
}

} // namespace strata::passes
