//===- PlanMemory.cpp - place every activation in one arena ---------------===//
//
// Liveness (Liveness.cpp) gives each storage set a live range and a size at
// T = maxTokens. Packing is greedy: sets in decreasing size take the lowest
// 256-byte-aligned offset that does not collide with any already placed set
// live at the same time (first fit over the gaps). The result is checked
// for overlaps, and the arena size is reported against the lower bound
// (max over time of live bytes) by strata-compile --report.
//
//===----------------------------------------------------------------------===//
#include "ir/Liveness.h"
#include "passes/Pass.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

namespace strata::passes {

using namespace ir;

namespace {

constexpr uint64_t kAlign = 256;

uint64_t alignUp(uint64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

class PlanMemoryPass : public Pass {
public:
  const char *name() const override { return "plan-memory"; }

  bool run(std::unique_ptr<Module> &m, PassContext &ctx) override {
    Func *main = m->findFunc("main");
    if (m->funcs.size() != 1 || !main) {
      ctx.diag.error(m->loc, "plan-memory needs one flat @main; run expand "
                             "first");
      return false;
    }
    if (ctx.maxTokens <= 0) {
      ctx.diag.error(m->loc, "plan-memory needs the maximum token count "
                             "(strata-compile --max-tokens, strata-opt "
                             "--max-tokens)");
      return false;
    }
    std::string error;
    std::vector<LiveSet> sets = computeLiveness(*main, ctx.maxTokens, error);
    if (!error.empty()) {
      ctx.diag.error(main->loc, "plan-memory: " + error);
      return false;
    }
    std::vector<size_t> order(sets.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return sets[a].bytes > sets[b].bytes;
    });
    std::vector<std::pair<uint64_t, uint64_t>> placed(sets.size());
    std::vector<bool> done(sets.size(), false);
    for (size_t idx : order) {
      LiveSet &s = sets[idx];
      // Intervals of placed sets live at the same time, sorted by offset.
      std::vector<std::pair<uint64_t, uint64_t>> busy;
      for (size_t j = 0; j < sets.size(); ++j)
        if (done[j] && !(sets[j].end < s.start || s.end < sets[j].start))
          busy.push_back(placed[j]);
      std::sort(busy.begin(), busy.end());
      uint64_t offset = 0;
      for (const auto &[lo, hi] : busy) {
        if (offset + s.bytes <= lo)
          break;
        offset = std::max(offset, alignUp(hi));
      }
      placed[idx] = {offset, offset + s.bytes};
      done[idx] = true;
      for (Value *v : s.values)
        v->offset = offset;
    }
    std::string clash = checkNoOverlap(sets);
    if (!clash.empty()) {
      // An internal invariant, reported rather than asserted so a bad plan
      // is never written.
      ctx.diag.error(main->loc,
                     "plan-memory produced overlapping buffers: " + clash);
      return false;
    }
    return true;
  }
};

} // namespace

std::unique_ptr<Pass> createPlanMemoryPass() {
  return std::make_unique<PlanMemoryPass>();
}

} // namespace strata::passes
