//===- Liveness.cpp - live ranges of storage over a list of steps ---------===//
#include "runtime/format/Liveness.h"

#include <algorithm>
#include <map>
#include <numeric>

namespace strata::format {

LivenessBuilder::LivenessBuilder(size_t numValues)
    : setOf_(numValues, kNone), lastUse_(numValues, 0),
      used_(numValues, false) {}

void LivenessBuilder::define(uint32_t v, size_t pos, uint64_t bytes) {
  setOf_[v] = sets_.size();
  sets_.push_back(LiveSet{{v}, pos, pos, bytes});
}

void LivenessBuilder::alias(uint32_t v, uint32_t base) {
  size_t s = setOf_[base];
  sets_[s].values.push_back(v);
  setOf_[v] = s;
}

void LivenessBuilder::overwrite(uint32_t v, uint32_t base, size_t pos) {
  size_t s = setOf_[base];
  overwrites_.push_back({sets_[s].values, v, pos});
  sets_[s].values.push_back(v);
  sets_[s].end = std::max(sets_[s].end, pos);
  setOf_[v] = s;
}

void LivenessBuilder::use(uint32_t v, size_t pos) {
  lastUse_[v] = std::max(lastUse_[v], pos);
  used_[v] = true;
  if (setOf_[v] != kNone)
    sets_[setOf_[v]].end = std::max(sets_[setOf_[v]].end, pos);
}

std::optional<StaleRead> LivenessBuilder::staleRead() const {
  for (const Overwrite &o : overwrites_)
    for (uint32_t v : o.values)
      if (used_[v] && lastUse_[v] > o.pos)
        return StaleRead{v, o.by, o.pos, lastUse_[v]};
  return std::nullopt;
}

uint64_t liveLowerBound(const std::vector<LiveSet> &sets) {
  // Sweep over positions: +bytes at start, -bytes after end.
  std::map<size_t, int64_t> delta;
  for (const LiveSet &s : sets) {
    delta[s.start] += static_cast<int64_t>(s.bytes);
    delta[s.end + 1] -= static_cast<int64_t>(s.bytes);
  }
  int64_t live = 0, peak = 0;
  for (const auto &[pos, d] : delta) {
    live += d;
    peak = std::max(peak, live);
  }
  return static_cast<uint64_t>(peak);
}

std::optional<LiveClash> findLiveClash(const std::vector<LiveSet> &sets,
                                       const std::vector<uint64_t> &offsets) {
  // Sweep by start position, keeping the sets still live: each set is
  // compared with those alive when it starts (plans have thousands of sets
  // but only tens live at once).
  std::vector<size_t> order(sets.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return sets[a].start != sets[b].start ? sets[a].start < sets[b].start
                                          : a < b;
  });
  std::vector<size_t> live;
  for (size_t b : order) {
    const LiveSet &y = sets[b];
    live.erase(std::remove_if(live.begin(), live.end(),
                              [&](size_t a) { return sets[a].end < y.start; }),
               live.end());
    if (y.bytes == 0)
      continue;
    // [lo, lo + bytes) and [lo', lo' + bytes') share a byte iff each starts
    // before the other ends; written without sums that could wrap.
    for (size_t a : live) {
      const LiveSet &x = sets[a];
      uint64_t xo = offsets[a], yo = offsets[b];
      bool overlap = xo <= yo ? yo - xo < x.bytes : xo - yo < y.bytes;
      if (overlap)
        return LiveClash{a, b};
    }
    live.push_back(b);
  }
  return std::nullopt;
}

} // namespace strata::format
