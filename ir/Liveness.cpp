//===- Liveness.cpp - live ranges of arena values -------------------------===//
#include "ir/Liveness.h"

#include <fmt/format.h>

#include <map>

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
  std::vector<LiveSet> sets;
  std::map<const Value *, size_t> setOf;
  std::map<const Value *, size_t> lastUse;
  auto define = [&](Value *v, size_t pos) -> bool {
    std::string why;
    uint64_t b = bytesAt(v->type, maxTokens, &why);
    if (b == 0 && !why.empty()) {
      error = fmt::format("%{}: {}", v->name, why);
      return false;
    }
    setOf[v] = sets.size();
    sets.push_back(LiveSet{{v}, pos, pos, b});
    return true;
  };
  auto use = [&](const Value *v, size_t pos) {
    lastUse[v] = std::max(lastUse[v], pos);
    auto it = setOf.find(v);
    if (it != setOf.end())
      sets[it->second].end = std::max(sets[it->second].end, pos);
  };
  // (values sharing storage when a kernel overwrote them, its position)
  std::vector<std::pair<std::vector<Value *>, size_t>> overwritten;
  for (const Param &p : main.params)
    if (!p.isScalar() && !define(p.value, 0))
      return {};
  const size_t n = main.body.ops.size();
  for (size_t i = 0; i < n; ++i) {
    const Operation &op = *main.body.ops[i];
    size_t pos = i + 1;
    for (const Operand &o : op.operands)
      if (o.value)
        use(o.value, op.kind == OpKind::Return ? n + 1 : pos);
    if (op.kind == OpKind::Reshape && op.operands[0].value) {
      size_t s = setOf.at(op.operands[0].value);
      sets[s].values.push_back(op.results[0]);
      setOf[op.results[0]] = s;
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
      size_t s = setOf.at(op.operands[in].value);
      overwritten.push_back({sets[s].values, pos});
      sets[s].values.push_back(r);
      setOf[r] = s;
    }
  }
  for (const auto &[values, pos] : overwritten)
    for (const Value *v : values)
      if (lastUse[v] > pos) {
        error = fmt::format("%{} is read after a kernel overwrote it in place "
                            "(tied)",
                            v->name);
        return {};
      }
  return sets;
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

std::string checkNoOverlap(const std::vector<LiveSet> &sets) {
  for (size_t a = 0; a < sets.size(); ++a)
    for (size_t b = a + 1; b < sets.size(); ++b) {
      const LiveSet &x = sets[a], &y = sets[b];
      if (x.end < y.start || y.end < x.start || !x.bytes || !y.bytes)
        continue;
      uint64_t xo = *x.values[0]->offset, yo = *y.values[0]->offset;
      if (xo < yo + y.bytes && yo < xo + x.bytes)
        return fmt::format("%{} [{}, {}) and %{} [{}, {}) are live together "
                           "and overlap",
                           x.values[0]->name, xo, xo + x.bytes,
                           y.values[0]->name, yo, yo + y.bytes);
    }
  return "";
}

} // namespace strata::ir
