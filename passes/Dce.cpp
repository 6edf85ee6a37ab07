//===- Dce.cpp - remove operations whose results nobody uses --------------===//
//
// Every op of the IR is pure (tensor in, tensor out; no side effects), so an
// op whose results are all unused can go, and with it the uses it made. A
// block is walked backwards with use counts: removing an op may make the ops
// that defined its operands dead, and those come earlier, so one walk removes
// whole dead chains. Ops with regions (repeat, if) are removed whole when
// their results are unused; otherwise their bodies are cleaned the same way
// (a body's yield keeps what it yields). Function parameters, returns and
// yields stay. The pass runs before plan-memory: it changes the op list the
// plan's liveness and arena bound were computed from.
//
//===----------------------------------------------------------------------===//
#include "passes/Pass.h"

#include <unordered_map>

namespace strata::passes {

using namespace ir;

namespace {

using UseCounts = std::unordered_map<const Value *, int64_t>;

/// Adds (\p delta = +1) or removes (-1) the uses \p op and its regions make.
void countUses(const Operation &op, UseCounts &uses, int delta) {
  for (const Operand &o : op.operands)
    if (o.isValue())
      uses[o.value] += delta;
  for (const auto &region : op.regions)
    for (const auto &inner : region->ops)
      countUses(*inner, uses, delta);
}

/// Terminators, and remarks (their effect is the report `expand` makes).
bool isTerminator(const Operation &op) {
  return op.kind == OpKind::Return || op.kind == OpKind::Yield ||
         op.kind == OpKind::Remark;
}

/// Removes the dead ops of \p b (backwards); returns how many went.
size_t sweep(Block &b, UseCounts &uses) {
  size_t removed = 0;
  for (size_t i = b.ops.size(); i-- > 0;) {
    Operation &op = *b.ops[i];
    if (isTerminator(op))
      continue;
    bool dead = true;
    for (const Value *r : op.results)
      dead = dead && uses[r] == 0;
    if (dead) {
      countUses(op, uses, -1);
      b.ops.erase(b.ops.begin() + static_cast<std::ptrdiff_t>(i));
      ++removed;
      continue;
    }
    for (auto &region : op.regions)
      removed += sweep(*region, uses);
  }
  return removed;
}

class DcePass : public Pass {
public:
  const char *name() const override { return "dce"; }

  bool run(std::unique_ptr<Module> &m, PassContext &ctx) override {
    if (!checkNotPlanned(*m, "dce", ctx))
      return false;
    for (auto &f : m->funcs) {
      UseCounts uses;
      for (const auto &op : f->body.ops)
        countUses(*op, uses, +1);
      sweep(f->body, uses);
    }
    return true;
  }
};

} // namespace

std::unique_ptr<Pass> createDcePass() { return std::make_unique<DcePass>(); }

} // namespace strata::passes
