//===- DefUse.cpp - who defines and who reads every value -----------------===//
#include "ir/DefUse.h"

#include <algorithm>

namespace strata::ir {

DefUse::DefUse(Block &root) { collect(root); }

void DefUse::collect(Block &b) {
  for (auto &opPtr : b.ops) {
    Operation &op = *opPtr;
    blockOf_[&op] = &b;
    for (size_t i = 0; i < op.operands.size(); ++i)
      if (op.operands[i].isValue())
        uses_[op.operands[i].value].push_back({&op, i});
    for (Value *r : op.results)
      def_[r] = &op;
    for (auto &region : op.regions)
      collect(*region);
  }
}

Operation *DefUse::definingOp(const Value *v) const {
  auto it = def_.find(v);
  return it == def_.end() ? nullptr : it->second;
}

Block *DefUse::blockOf(const Operation *op) const {
  auto it = blockOf_.find(op);
  return it == blockOf_.end() ? nullptr : it->second;
}

const std::vector<Use> &DefUse::uses(const Value *v) const {
  static const std::vector<Use> kNone;
  auto it = uses_.find(v);
  return it == uses_.end() ? kNone : it->second;
}

bool DefUse::isDead(const Operation &op) const {
  for (const Value *r : op.results)
    if (numUses(r) != 0)
      return false;
  return true;
}

void DefUse::replaceAllUsesWith(Value *from, Value *to) {
  std::vector<Use> moved = std::move(uses_[from]);
  uses_.erase(from);
  for (const Use &u : moved)
    u.user->operands[u.operand].value = to;
  std::vector<Use> &dst = uses_[to];
  dst.insert(dst.end(), moved.begin(), moved.end());
}

void DefUse::dropUses(const Operation &op) {
  for (const Operand &o : op.operands) {
    if (!o.isValue())
      continue;
    auto it = uses_.find(o.value);
    if (it == uses_.end())
      continue;
    std::vector<Use> &list = it->second;
    list.erase(std::remove_if(list.begin(), list.end(),
                              [&](const Use &u) { return u.user == &op; }),
               list.end());
  }
  for (const auto &region : op.regions)
    for (const auto &inner : region->ops)
      dropUses(*inner);
}

} // namespace strata::ir
