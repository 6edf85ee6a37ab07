//===- DefUse.h - who defines and who reads every value ---------*- C++ -*-===//
//
// Def-use chains over a block and the regions nested in it: the op that
// defines each value, and the ops (with operand positions) that read it.
// Passes ask it instead of walking op vectors by hand; after a rewrite they
// either update it through its methods or rebuild it.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/Module.h"

#include <algorithm>
#include <unordered_map>
#include <vector>

namespace strata::ir {

/// One read of a value: operand \p operand of op \p user.
struct Use {
  Operation *user = nullptr;
  size_t operand = 0;
};

/// Def-use chains of a block tree.
class DefUse {
public:
  /// Builds the chains of \p root and every region nested in it.
  explicit DefUse(Block &root);

  /// The op that defines \p v, or nullptr (a parameter or block argument).
  Operation *definingOp(const Value *v) const;
  /// The block whose op list holds \p op (nullptr if unknown).
  Block *blockOf(const Operation *op) const;
  /// Every read of \p v, in program order (terminators included).
  const std::vector<Use> &uses(const Value *v) const;
  size_t numUses(const Value *v) const { return uses(v).size(); }
  bool hasOneUse(const Value *v) const { return numUses(v) == 1; }
  /// True if no result of \p op is read.
  bool isDead(const Operation &op) const;
  /// Makes every reader of \p from read \p to instead.
  void replaceAllUsesWith(Value *from, Value *to);
  /// Forgets the reads \p op makes (before it is erased).
  void dropUses(const Operation &op);

  // Updates for a rewrite that keeps the chains right without a rebuild.
  void setDefiningOp(const Value *v, Operation *op) { def_[v] = op; }
  void setBlock(const Operation *op, Block *b) { blockOf_[op] = b; }
  void addUse(const Value *v, Use u) { uses_[v].push_back(u); }
  /// Removes the reads of \p v for which \p drop(use) is true.
  template <typename Pred> void removeUsesIf(const Value *v, Pred drop) {
    auto it = uses_.find(v);
    if (it == uses_.end())
      return;
    std::vector<Use> &list = it->second;
    list.erase(std::remove_if(list.begin(), list.end(), drop), list.end());
  }

private:
  void collect(Block &b);

  std::unordered_map<const Value *, Operation *> def_;
  std::unordered_map<const Operation *, Block *> blockOf_;
  std::unordered_map<const Value *, std::vector<Use>> uses_;
};

} // namespace strata::ir
