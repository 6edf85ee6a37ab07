//===- PlanMemory.cpp - place every activation in one arena ---------------===//
//
// Liveness (Liveness.cpp) gives each storage set a live range and a size at
// T = maxTokens. Packing is greedy: sets in some order take the lowest
// 256-byte-aligned offset that does not collide with any already placed set
// live at the same time (first fit or best fit over the gaps); three
// orders (largest, longest-lived by bytes x time, earliest) times both fits
// are tried and the smallest arena kept. The result is checked
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
/// Repacking rounds tried when the first orders miss the lower bound.
constexpr int kRepackRounds = 64;
/// Cap on sets^2 x attempts (each packing is quadratic in the sets).
constexpr size_t kMaxPackingWork = size_t(1) << 28;

uint64_t alignUp(uint64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

/// Sets in \p order each take an aligned offset that does not collide with
/// a placed set live at the same time: the lowest (first fit) or the one in
/// the tightest gap (\p bestFit). Sets
/// \p offsets (by set index) and returns the arena size.
uint64_t pack(const std::vector<LiveSet> &sets,
              const std::vector<size_t> &order, bool bestFit,
              std::vector<uint64_t> &offsets) {
  offsets.assign(sets.size(), 0);
  std::vector<bool> done(sets.size(), false);
  uint64_t size = 0;
  for (size_t idx : order) {
    const LiveSet &s = sets[idx];
    // Intervals of placed sets live at the same time, sorted by offset.
    std::vector<std::pair<uint64_t, uint64_t>> busy;
    for (size_t j = 0; j < sets.size(); ++j)
      if (done[j] && !(sets[j].end < s.start || s.end < sets[j].start))
        busy.push_back({offsets[j], offsets[j] + sets[j].bytes});
    std::sort(busy.begin(), busy.end());
    // The gaps between them: first fit takes the lowest that holds the
    // set, best fit the tightest (the space above all of them last).
    uint64_t offset = 0, chosen = UINT64_MAX, slack = UINT64_MAX;
    for (const auto &[lo, hi] : busy) {
      if (offset + s.bytes <= lo) {
        if (!bestFit) {
          chosen = offset;
          break;
        }
        if (lo - offset - s.bytes < slack)
          slack = lo - offset - s.bytes, chosen = offset;
      }
      offset = std::max(offset, alignUp(hi));
    }
    if (chosen == UINT64_MAX)
      chosen = offset;
    offset = chosen;
    offsets[idx] = offset;
    done[idx] = true;
    size = std::max(size, offset + s.bytes);
  }
  return size;
}

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
    // Greedy first fit is order-sensitive: try a few orders (largest
    // first; longest-lived first; earliest first) and keep the smallest.
    std::vector<size_t> bySize(sets.size());
    std::iota(bySize.begin(), bySize.end(), 0);
    std::vector<size_t> byArea = bySize, byStart = bySize;
    std::stable_sort(bySize.begin(), bySize.end(), [&](size_t a, size_t b) {
      return sets[a].bytes > sets[b].bytes;
    });
    // Equal sizes: the one that lives on longer first.
    std::vector<size_t> bySizeLate = bySize;
    std::stable_sort(
        bySizeLate.begin(), bySizeLate.end(), [&](size_t a, size_t b) {
          return sets[a].bytes != sets[b].bytes ? sets[a].bytes > sets[b].bytes
                                                : sets[a].end > sets[b].end;
        });
    auto area = [&](size_t i) {
      return static_cast<double>(sets[i].bytes) *
             static_cast<double>(sets[i].end - sets[i].start + 1);
    };
    std::stable_sort(byArea.begin(), byArea.end(),
                     [&](size_t a, size_t b) { return area(a) > area(b); });
    std::stable_sort(byStart.begin(), byStart.end(), [&](size_t a, size_t b) {
      return sets[a].start < sets[b].start;
    });
    std::vector<uint64_t> best;
    uint64_t bestSize = UINT64_MAX;
    for (const std::vector<size_t> *order :
         {&bySize, &bySizeLate, &byArea, &byStart})
      for (bool bestFit : {false, true}) {
        std::vector<uint64_t> offsets;
        uint64_t size = pack(sets, *order, bestFit, offsets);
        if (size < bestSize)
          bestSize = size, best = std::move(offsets);
      }
    // Above the lower bound, repack with the sets that end highest placed
    // first (they set the arena size), keeping any improvement; bounded
    // work.
    const uint64_t bound = liveLowerBound(sets);
    std::vector<size_t> order = bySize;
    for (int attempt = 0;
         attempt < kRepackRounds && bestSize > alignUp(bound) &&
         sets.size() * sets.size() * attempt < kMaxPackingWork;
         ++attempt) {
      size_t top = 0;
      for (size_t i = 0; i < sets.size(); ++i)
        if (best[i] + sets[i].bytes > best[top] + sets[top].bytes)
          top = i;
      auto it = std::find(order.begin(), order.end(), top);
      if (it == order.begin())
        break; // already first: nothing left to try
      std::rotate(order.begin(), it, it + 1);
      for (bool bestFit : {false, true}) {
        std::vector<uint64_t> offsets;
        uint64_t size = pack(sets, order, bestFit, offsets);
        if (size < bestSize)
          bestSize = size, best = std::move(offsets);
      }
    }
    for (size_t i = 0; i < sets.size(); ++i)
      for (Value *v : sets[i].values)
        v->offset = best[i];
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
