//===- CachedKernel.cpp - what every cached (decode) kernel shares --------===//
//
// The state operands' dims and storage and the kernel's opening, for the
// families' cached-op emitters (CachedKernel.h).
//
//===----------------------------------------------------------------------===//
#include "codegen/CachedKernel.h"

namespace strata::codegen::detail {

const format::PlanDim kCachedRows{1, 0, 1};

std::vector<int64_t> stateDims(const Emitter &e, uint32_t i) {
  const format::PlanOperand &o = e.kernel.inputs.at(i);
  if (!o.isState)
    throw Unsupported(fmt::format("input {} of a state kernel is no state", i));
  std::vector<int64_t> d;
  for (uint64_t v : e.plan.states.at(o.index).shape)
    d.push_back(static_cast<int64_t>(v));
  return d;
}

CacheStore cacheStore(Emitter &e, uint32_t i) {
  std::vector<int64_t> d = stateDims(e, i);
  CacheStore c;
  c.dtype = e.plan.states.at(e.kernel.inputs.at(i).index).dtype;
  c.ctype = e.tensor({BodyRef::Kind::In, i, {}}).ctype;
  c.len = d.back();
  if (c.i8()) {
    if (c.len % 4 != 0)
      throw Unsupported("an i8 cache whose rows are not a multiple of 4");
    e.out.kvQuant = true;
  }
  return c;
}

int64_t constDim(const Tensor &t, size_t d) {
  if (d >= t.shape.size() || !isConst(t.shape[d]))
    throw Unsupported(fmt::format("dim {} of {} is not a constant", d, t.ptr));
  return t.shape[d].constant;
}

void expectLoadable(const Tensor &t, const char *what) {
  if (t.quant() || t.isTemp)
    throw Unsupported(
        fmt::format("{} is {} ({}), not a plain array", what, t.ctype, t.ptr));
}

void beginCachedKernel(Emitter &e, int threads) {
  e.line("STRATA_KERNEL({}) void @SYMBOL@({}) {{", threads, e.params());
  e.prologue();
}

} // namespace strata::codegen::detail
