//===- Cse.cpp - merge operations that compute the same value -------------===//
//
// Two ops of the same kind, callee, operands, attributes and result types
// compute the same tensors (every op is pure but the state writes, which are
// never merged), so the later one's results are replaced by the earlier
// one's and it goes. Two `state` ops merge only with the same name and type
// (they are one state). Operands compare by value
// identity, weights by name, element type and shape, attributes by name and
// printed expression (order does not matter). An op is available to the ops
// after it in its block and in the regions nested there, as dominance allows;
// ops with regions are not merged themselves, and a fused kernel's body sees
// nothing from outside it. The def-use chains (ir/DefUse.h) move every read
// of a merged result to the surviving one. Runs before plan-memory: a merged
// value lives longer than the plan's liveness says.
//
//===----------------------------------------------------------------------===//
#include "ir/DefUse.h"
#include "passes/Pass.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <unordered_map>

namespace strata::passes {

using namespace ir;

namespace {

/// Available ops by key, for one block and the blocks nested in it.
using Available = std::map<std::string, Operation *>;

std::string weightKey(const WeightRef &w) {
  std::string s = printExpr(*w.name);
  s += w.elem ? "<" + w.elem->str() + ">" : "<?>";
  if (w.shape)
    for (const Dim &d : *w.shape)
      s += "," + d.str();
  return s;
}

/// What makes two ops equal, or "" for ops that are never merged.
std::string opKey(const Operation &op) {
  if (!op.regions.empty() || op.kind == OpKind::Return ||
      op.kind == OpKind::Yield || op.results.empty() || writesState(op))
    return {};
  std::string key = fmt::format("{}<{}>(", opName(op.kind), op.callee);
  for (const Operand &o : op.operands) {
    if (o.isValue())
      key += fmt::format("v{},", static_cast<const void *>(o.value));
    else if (o.isWeight())
      key += "w" + weightKey(*o.weight) + ",";
    else if (o.isScalar())
      key += "s" + printExpr(*o.scalar) + ",";
  }
  std::vector<std::string> attrs;
  for (const Attr &a : op.attrs)
    attrs.push_back(a.name + "=" + printExpr(*a.value));
  std::sort(attrs.begin(), attrs.end());
  key += "){";
  for (const std::string &a : attrs)
    key += a + ";";
  key += "}:";
  for (const Value *r : op.results)
    key += r->type.str() + ",";
  return key;
}

void cseBlock(Block &b, Available available, DefUse &du) {
  for (size_t i = 0; i < b.ops.size();) {
    Operation &op = *b.ops[i];
    // A fused body sees nothing from outside it: nothing is available there.
    for (auto &region : op.regions)
      cseBlock(*region, op.kind == OpKind::Fused ? Available{} : available, du);
    std::string key = opKey(op);
    if (key.empty()) {
      ++i;
      continue;
    }
    auto [it, inserted] = available.emplace(key, &op);
    if (inserted) {
      ++i;
      continue;
    }
    for (size_t r = 0; r < op.results.size(); ++r)
      du.replaceAllUsesWith(op.results[r], it->second->results[r]);
    du.dropUses(op);
    b.ops.erase(b.ops.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

class CsePass : public Pass {
public:
  const char *name() const override { return "cse"; }

  bool run(std::unique_ptr<Module> &m, PassContext &ctx) override {
    if (!checkNotPlanned(*m, "cse", ctx))
      return false;
    for (auto &f : m->funcs) {
      DefUse du(f->body);
      cseBlock(f->body, {}, du);
    }
    return true;
  }
};

} // namespace

std::unique_ptr<Pass> createCsePass() { return std::make_unique<CsePass>(); }

} // namespace strata::passes
