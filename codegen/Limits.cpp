//===- Limits.cpp - hardware limits the emitters plan with ----------------===//
#include "codegen/Limits.h"

#include "ir/Target.h"

#include <algorithm>
#include <cassert>

namespace strata::codegen {

namespace {

/// The smallest \p field over the GPU targets.
template <typename F> int64_t gpuMin(F field) {
  int64_t v = INT64_MAX;
  for (const ir::Target &t : ir::allTargets())
    if (t.gpu)
      v = std::min<int64_t>(v, field(t));
  return v;
}

} // namespace

int64_t staticSharedBudget() {
  static const int64_t v =
      gpuMin([](const ir::Target &t) { return t.staticSharedPerBlock; }) -
      4 * 1024;
  return v;
}

int64_t launchBoundRegisters() {
  static const int64_t v =
      gpuMin([](const ir::Target &t) { return t.regsPerUnit; });
  return v;
}

int64_t decodeWarpSlots() {
  static const int64_t v = [] {
    int64_t best = 0;
    for (const ir::Target &t : ir::allTargets())
      if (t.gpu)
        best = std::max<int64_t>(best, t.units * t.regsPerUnit /
                                           (int64_t(t.waveSize) * 32));
    return best;
  }();
  return v;
}

int64_t tmaRingBytes(int blocks) {
  static const ir::Target *sm90 = ir::lookupTarget("sm_90");
  assert(sm90 && sm90->tensorMaps && "sm_90 missing from Targets.def");
  constexpr int64_t kReserved = 1024, kSlack = 1024, kBarriers = 16 * 8;
  const int64_t perBlock = blocks == 1
                               ? sm90->sharedPerBlock
                               : sm90->sharedPerUnit / blocks - kReserved;
  return perBlock - kSlack - kBarriers;
}

} // namespace strata::codegen
