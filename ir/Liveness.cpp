//===- Liveness.cpp - live ranges of arena values -------------------------===//
#include "ir/Liveness.h"

#include <fmt/format.h>

#include <map>
#include <optional>
#include <set>

namespace strata::ir {

static size_t elemBytes(const ElemType &e) {
  return e.isBlock ? 0 : format::planDTypeSize(e.dtype);
}

uint64_t bytesAt(const Type &t, int64_t maxTokens, std::string *why) {
  if (!t.isTensor() || t.elem.isBlock) {
    if (why)
      *why = fmt::format("{} is not an activation tensor", t.str());
    return 0;
  }
  unsigned __int128 n = elemBytes(t.elem);
  for (const Dim &d : t.dims) {
    // Every planned dim is floor(c*T / q) + d.
    auto lin = d.affineIn("T");
    if (!lin) {
      if (why)
        *why = fmt::format("dim '{}' of {} is not of the form c*T + d or "
                           "c*T / q + d",
                           d.str(), t.str());
      return 0;
    }
    int64_t v = lin->coef * maxTokens / lin->div + lin->constant;
    if (v < 0) {
      if (why)
        *why = fmt::format("dim '{}' of {} is negative", d.str(), t.str());
      return 0;
    }
    n *= static_cast<uint64_t>(v);
    if (n > (static_cast<unsigned __int128>(1) << 56)) {
      if (why)
        *why = fmt::format("{} is too large", t.str());
      return 0;
    }
  }
  return static_cast<uint64_t>(n);
}

std::vector<LiveSet> computeLiveness(const Func &main, int64_t maxTokens,
                                     std::string &error) {
  // Values by index for the shared liveness (runtime/format/Liveness.h):
  // parameters, then each op's results in order.
  std::vector<Value *> values;
  std::map<const Value *, uint32_t> index;
  auto id = [&](Value *v) {
    auto [it, added] = index.emplace(v, static_cast<uint32_t>(values.size()));
    if (added)
      values.push_back(v);
    return it->second;
  };
  for (const Param &p : main.params)
    if (!p.isScalar())
      id(p.value);
  for (const auto &op : main.body.ops)
    for (Value *r : op->results)
      id(r);
  format::LivenessBuilder live(values.size());
  auto define = [&](Value *v, size_t pos) -> bool {
    std::string why;
    uint64_t b = bytesAt(v->type, maxTokens, &why);
    if (b == 0 && !why.empty()) {
      error = fmt::format("%{}: {}", v->name, why);
      return false;
    }
    live.define(id(v), pos, b);
    return true;
  };
  for (const Param &p : main.params)
    if (!p.isScalar() && !define(p.value, 0))
      return {};
  // Generation states are not arena values: no set, no bytes. Their own
  // walk proves that no state is read after a later write replaced it (a
  // state is written in place, one version after another).
  const std::set<const Value *> states = stateValues(main.body);
  format::LivenessBuilder stateLive(values.size());
  const size_t n = main.body.ops.size();
  for (size_t i = 0; i < n; ++i) {
    const Operation &op = *main.body.ops[i];
    size_t pos = i + 1;
    for (const Operand &o : op.operands) {
      if (!o.value || !index.count(o.value))
        continue;
      if (states.count(o.value)) {
        if (op.kind == OpKind::Return) {
          error = fmt::format("%{} is a state; a model returns arena values",
                              o.value->name);
          return {};
        }
        if (stateLive.known(index.at(o.value)))
          stateLive.use(index.at(o.value), pos);
        continue;
      }
      live.use(index.at(o.value), op.kind == OpKind::Return ? n + 1 : pos);
    }
    if (isStateDecl(op)) {
      stateLive.define(id(op.results[0]), pos, 0);
      continue;
    }
    if (writesState(op)) {
      const Value *s = op.operands.empty() ? nullptr : op.operands[0].value;
      if (!s || !states.count(s)) {
        error = fmt::format("%{} is written in place by '{}' but is not a "
                            "state",
                            s ? s->name : op.results[0]->name,
                            op.kind == OpKind::Kernel ? op.callee
                                                      : opName(op.kind));
        return {};
      }
      if (stateLive.known(index.at(s)))
        stateLive.overwrite(id(op.results[0]), index.at(s), pos);
      for (size_t k = 1; k < op.results.size(); ++k)
        if (!define(op.results[k], pos))
          return {};
      continue;
    }
    if (op.kind == OpKind::Reshape && op.operands[0].value &&
        states.count(op.operands[0].value)) {
      error = fmt::format("%{} views the state %{}; states are not arena "
                          "values",
                          op.results[0]->name, op.operands[0].value->name);
      return {};
    }
    if (op.kind == OpKind::Reshape && op.operands[0].value) {
      live.alias(id(op.results[0]), index.at(op.operands[0].value));
      continue;
    }
    std::vector<int> tied = tiedOperands(op);
    for (size_t k = 0; k < op.results.size(); ++k) {
      Value *r = op.results[k];
      int in = k < tied.size() ? tied[k] : -1;
      if (in < 0) {
        if (!define(r, pos))
          return {};
        continue;
      }
      // Written in place: the result continues the operand's storage.
      live.overwrite(id(r), index.at(op.operands[in].value), pos);
    }
  }
  if (std::optional<format::StaleRead> stale = stateLive.staleRead()) {
    error = fmt::format("the state %{} is read after %{} replaced it (a "
                        "state is written in place: read the newest)",
                        values[stale->value]->name,
                        values[stale->overwriter]->name);
    return {};
  }
  if (std::optional<format::StaleRead> stale = live.staleRead()) {
    error = fmt::format("%{} is read after a kernel overwrote it in place "
                        "(tied)",
                        values[stale->value]->name);
    return {};
  }
  std::vector<LiveSet> sets;
  for (const format::LiveSet &s : live.sets()) {
    LiveSet out{{}, s.start, s.end, s.bytes};
    for (uint32_t v : s.values)
      out.values.push_back(values[v]);
    sets.push_back(std::move(out));
  }
  return sets;
}

/// The shared form of \p sets (runtime/format/Liveness.h); values are
/// numbered per set, which the bound and the clash search do not look at.
static std::vector<format::LiveSet> shared(const std::vector<LiveSet> &sets) {
  std::vector<format::LiveSet> out;
  for (const LiveSet &s : sets)
    out.push_back(format::LiveSet{{}, s.start, s.end, s.bytes});
  return out;
}

uint64_t liveLowerBound(const std::vector<LiveSet> &sets) {
  return format::liveLowerBound(shared(sets));
}

std::string checkNoOverlap(const std::vector<LiveSet> &sets) {
  std::vector<uint64_t> offsets;
  for (const LiveSet &s : sets)
    offsets.push_back(s.values[0]->offset.value_or(0));
  std::optional<format::LiveClash> c =
      format::findLiveClash(shared(sets), offsets);
  if (!c)
    return "";
  const LiveSet &x = sets[c->first], &y = sets[c->second];
  uint64_t xo = offsets[c->first], yo = offsets[c->second];
  return fmt::format("%{} [{}, {}) and %{} [{}, {}) are live together "
                     "and overlap",
                     x.values[0]->name, xo, xo + x.bytes, y.values[0]->name, yo,
                     yo + y.bytes);
}

} // namespace strata::ir
