//===- Dce.cpp - remove operations whose results nobody uses --------------===//
//
// Every op of the IR is pure (tensor in, tensor out; no side effects) but
// the state writes (kv_store: what they store outlives the run, so they
// stay even where nothing in this run reads their result), so an op whose
// results are all unused can go, and with it the uses it made. A
// worklist over the def-use chains (ir/DefUse.h) starts from every op;
// removing one puts the ops that defined its operands back on the list, so
// whole dead chains go. Ops with regions (repeat, if, fused) are removed
// whole when their results are unused; otherwise their bodies are cleaned
// the same way (a body's yield keeps what it yields). Function parameters,
// returns and yields stay. The pass runs before plan-memory: it changes the
// op list the plan's liveness and arena bound were computed from.
//
//===----------------------------------------------------------------------===//
#include "ir/DefUse.h"
#include "passes/Pass.h"

#include <algorithm>
#include <set>

namespace strata::passes {

using namespace ir;

namespace {

/// Terminators, remarks (their effect is the report `expand` makes) and
/// state writes, also inside a region (their effect is the state later runs
/// read): never removed.
bool isTerminator(const Operation &op) {
  if (op.kind == OpKind::Return || op.kind == OpKind::Yield ||
      op.kind == OpKind::Remark || writesState(op))
    return true;
  for (const auto &region : op.regions)
    for (const auto &nested : region->ops)
      if (writesState(*nested) ||
          (!nested->regions.empty() && isTerminator(*nested)))
        return true;
  return false;
}

void collect(Block &b, std::vector<Operation *> &ops) {
  for (auto &op : b.ops) {
    ops.push_back(op.get());
    for (auto &region : op->regions)
      collect(*region, ops);
  }
}

/// Removes the dead ops of \p root and the regions in it.
void sweep(Block &root) {
  DefUse du(root);
  std::vector<Operation *> work;
  collect(root, work);
  std::set<const Operation *> erased;
  while (!work.empty()) {
    Operation *op = work.back();
    work.pop_back();
    if (erased.count(op) || isTerminator(*op) || !du.isDead(*op))
      continue;
    // The ops that fed it may die with it.
    std::vector<Operation *> inner{op};
    for (size_t i = 0; i < inner.size(); ++i) {
      for (const Operand &o : inner[i]->operands)
        if (o.isValue())
          if (Operation *d = du.definingOp(o.value))
            work.push_back(d);
      erased.insert(inner[i]);
      for (auto &region : inner[i]->regions)
        for (auto &nested : region->ops)
          inner.push_back(nested.get());
    }
    du.dropUses(*op);
    Block *b = du.blockOf(op);
    auto it = std::find_if(b->ops.begin(), b->ops.end(),
                           [&](const auto &p) { return p.get() == op; });
    b->ops.erase(it);
  }
}

class DcePass : public Pass {
public:
  const char *name() const override { return "dce"; }

  bool run(std::unique_ptr<Module> &m, PassContext &ctx) override {
    if (!checkNotPlanned(*m, "dce", ctx))
      return false;
    for (auto &f : m->funcs)
      sweep(f->body);
    return true;
  }
};

} // namespace

std::unique_ptr<Pass> createDcePass() { return std::make_unique<DcePass>(); }

} // namespace strata::passes
