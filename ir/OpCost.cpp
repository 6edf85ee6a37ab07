//===- OpCost.cpp - bytes and FLOPs of ops as functions of T --------------===//
#include "ir/OpCost.h"

#include "runtime/format/Quants.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace strata::ir {

using format::PlanPoly;

namespace {

/// Product of two single-piece polynomials.
std::vector<double> mulCoefs(const std::vector<double> &a,
                             const std::vector<double> &b) {
  std::vector<double> r(a.size() + b.size() - 1, 0.0);
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; j < b.size(); ++j)
      r[i + j] += a[i] * b[j];
  return r;
}

/// Extent \p d of \p t as c0 + c1*T, or nullopt.
std::optional<std::vector<double>> dimPoly(const Type &t, size_t d) {
  if (d >= t.dims.size())
    return std::nullopt;
  auto lin = t.dims[d].affineIn("T");
  if (!lin)
    return std::nullopt;
  return std::vector<double>{static_cast<double>(lin->constant),
                             static_cast<double>(lin->coef) /
                                 static_cast<double>(lin->div)};
}

/// Extent \p d of \p t when it does not depend on T (0 otherwise).
double constDim(const Type &t, size_t d) {
  auto p = dimPoly(t, d);
  return p && (*p)[1] == 0 ? (*p)[0] : 0;
}

Type operandType(const Operation &op, size_t i) {
  return i < op.operands.size() ? op.operands[i].type() : Type::unknown();
}

PlanPoly resultElements(const Operation &op) {
  PlanPoly n;
  for (const Value *r : op.results)
    if (auto e = elementsPoly(r->type))
      n += *e;
  return n;
}

// One `cost<Cost>` per Cost column value of Ops.def.

/// About one operation per result element.
PlanPoly costElem(const Operation &op) { return resultElements(op); }

/// A reduction: about one operation per operand element (argmax compares
/// each value once).
PlanPoly costReduction(const Operation &op) {
  if (op.operands.empty())
    return {};
  auto n = elementsPoly(operandType(op, 0));
  return n ? *n : PlanPoly();
}

/// Data movement: no arithmetic.
PlanPoly costMove(const Operation &) { return {}; }

/// y[..., N] = x[..., K] w[N, K]: 2*K per result element.
PlanPoly costMatmul(const Operation &op) {
  Type x = operandType(op, 0);
  return resultElements(op) * (2 * constDim(x, x.rank() ? x.rank() - 1 : 0));
}

/// Per (token, slot): gate and up (2*F*D each) and down (2*D*F).
PlanPoly costExperts(const Operation &op) {
  Type gate = operandType(op, 2); // [E, F, D]
  double f = constDim(gate, 1), d = constDim(gate, 2);
  return d == 0 ? PlanPoly() : resultElements(op) * (1.0 / d) * (6 * f * d);
}

/// Causal attention reads t + 1 keys for query t, each 2*D for QK and 2*Dv
/// for PV per head; a block-sparse index (i32 [T, S] of blocks of `block`
/// keys) caps the keys at S*block: quadratic up to the budget, linear after.
PlanPoly costAttention(const Operation &op) {
  Type q = operandType(op, 0), v = operandType(op, 2);
  double h = constDim(q, 1), d = constDim(q, 2), dv = constDim(v, 2);
  double perKey = h * 2 * (d + dv);
  bool causal = true;
  int64_t block = 0;
  std::optional<Type> index;
  for (size_t i = 3; i < op.operands.size(); ++i)
    if (op.operands[i].type().elem.isInt())
      index = op.operands[i].type();
  for (const Attr &a : op.attrs) {
    if (a.name == "causal" && a.value->kind == ExprKind::Bool)
      causal = a.value->b;
    if (a.name == "block" && a.value->kind == ExprKind::Int)
      block = a.value->i;
  }
  if (!causal)
    return PlanPoly::of({0, 0, perKey});
  PlanPoly keys = PlanPoly::of({0, 0.5, 0.5}); // sum_{t<T} (t + 1)
  if (index && block > 0 && constDim(*index, 1) > 0) {
    double k = constDim(*index, 1) * static_cast<double>(block);
    keys.pieces.push_back({static_cast<int64_t>(k), {-k * (k - 1) / 2, k, 0}});
  }
  return keys * perKey;
}

/// QSA block selection: query t scores its (t + 1) / block visible blocks,
/// 2 * Hi * Di each (the indexer's dot products; the top-k sort moves data).
PlanPoly costQsaSelect(const Operation &op) {
  Type q = operandType(op, 0);
  int64_t block = 1;
  for (const Attr &a : op.attrs)
    if (a.name == "block" && a.value->kind == ExprKind::Int)
      block = std::max<int64_t>(1, a.value->i);
  double b = static_cast<double>(block);
  return PlanPoly::of({0, 0.5 / b, 0.5 / b}) *
         (2 * constDim(q, 1) * constDim(q, 2));
}

/// Grouped expert GEMMs: 2*K*N per row for every weight stack [E, N, K].
PlanPoly costGrouped(const Operation &op) {
  double perRow = 0;
  for (size_t i = 0; i < op.operands.size(); ++i) {
    Type w = operandType(op, i);
    if (w.rank() == 3 && (op.operands[i].isWeight() || w.elem.isBlock))
      perRow += 2 * constDim(w, 1) * constDim(w, 2);
  }
  PlanPoly rows;
  if (!op.results.empty())
    if (auto n = elementsPoly(op.results[0]->type))
      rows = *n * (1.0 / std::max(1.0, constDim(op.results[0]->type, 1)));
  return rows * perRow;
}

/// A state write stores rows: data movement, no arithmetic.
PlanPoly costKvStore(const Operation &) { return {}; }

/// Cached attention: row r reads keys 0 .. pos[r], at most the context C of
/// its slot: counted at a full context, C keys a row, 2*(D + Dv) FLOPs a key
/// and head.
PlanPoly costAttentionCached(const Operation &op) {
  Type q = operandType(op, 0), kc = operandType(op, 1), vc = operandType(op, 2);
  auto t = dimPoly(q, 0);
  if (!t)
    return {};
  double h = constDim(q, 1), d = constDim(q, 2), dv = constDim(vc, 3);
  double context = constDim(kc, 1);
  return PlanPoly::of(*t) * (context * h * 2 * (d + dv));
}

/// A block's mean for every row (a row that completes no block costs as
/// much in the bound): `block` adds per element.
PlanPoly costBlockMeanCached(const Operation &op) {
  int64_t block = 1;
  for (const Attr &a : op.attrs)
    if (a.name == "block" && a.value->kind == ExprKind::Int)
      block = std::max<int64_t>(1, a.value->i);
  return resultElements(op) * static_cast<double>(block);
}

/// Cached QSA selection: row r scores the complete blocks of its slot,
/// counted at a full context (every block key of the cache), 2*Hi*Di each.
PlanPoly costQsaSelectCached(const Operation &op) {
  Type q = operandType(op, 0), keys = operandType(op, 1);
  auto t = dimPoly(q, 0);
  if (!t)
    return {};
  return PlanPoly::of(*t) *
         (constDim(keys, 1) * 2 * constDim(q, 1) * constDim(q, 2));
}

/// The delta rule over q, k, v from operand \p base on: about 8 FLOPs per
/// state element per token.
PlanPoly deltaFlops(const Operation &op, size_t base) {
  Type k = operandType(op, base), v = operandType(op, base + 2);
  auto t = dimPoly(v, 0);
  if (!t)
    return {};
  double h = constDim(v, 1), dk = constDim(k, 2), dv = constDim(v, 2);
  return PlanPoly::of(*t) * (8 * h * dk * dv);
}

/// Recurrent gated delta rule.
PlanPoly costDelta(const Operation &op) { return deltaFlops(op, 0); }

/// conv1d_cached: conv1d_causal's 2*K FLOPs per input element.
PlanPoly costConv1dCached(const Operation &op) {
  auto x = elementsPoly(operandType(op, 1));
  if (!x)
    return {};
  // A silu epilogue (act) counts one operation an element, as silu does.
  const Attr *act = op.findAttr("act");
  const bool silu = act && act->value && act->value->kind == ExprKind::Str &&
                    act->value->s == "silu";
  return *x * (2 * constDim(operandType(op, 2), 1) + (silu ? 1 : 0));
}

/// gated_delta_cached: the recurrence's FLOPs, as the prefill's.
PlanPoly costGatedDeltaCached(const Operation &op) { return deltaFlops(op, 1); }

/// gated_delta_qkv_cached: the recurrence's FLOPs over the state's heads,
/// and the two l2 norms' (three an element of q and k).
PlanPoly costGatedDeltaQkvCached(const Operation &op) {
  Type st = operandType(op, 0), qkv = operandType(op, 1);
  auto t = dimPoly(qkv, 0);
  if (!t)
    return {};
  double h = constDim(st, 1), dk = constDim(st, 2), dv = constDim(st, 3);
  double qk = constDim(qkv, 1) - h * dv;
  return PlanPoly::of(*t) * (8 * h * dk * dv + 3 * qk);
}

/// ngram_hash_cached: about one operation per id.
PlanPoly costNgramHashCached(const Operation &op) {
  if (op.results.size() < 2)
    return {};
  auto n = elementsPoly(op.results[1]->type);
  return n ? *n : PlanPoly();
}

} // namespace

std::optional<PlanPoly> elementsPoly(const Type &t) {
  if (!t.isTensor())
    return std::nullopt;
  std::vector<double> c{1.0};
  for (size_t d = 0; d < t.rank(); ++d) {
    auto p = dimPoly(t, d);
    if (!p)
      return std::nullopt;
    c = mulCoefs(c, *p);
  }
  while (c.size() > 1 && c.back() == 0)
    c.pop_back();
  return PlanPoly::of(c);
}

/// Bytes per element of a tensor that is not block-quantised: the dtype's
/// size; an i8 state (the int8 KV cache) also carries an f32 scale per row
/// of its last dim D (format::stateBytes): (D + 4) / D.
static double elementBytes(const Type &t) {
  double size = static_cast<double>(format::planDTypeSize(t.elem.dtype));
  if (t.elem.dtype != DType::I8 || t.rank() == 0)
    return size;
  double rowLen = constDim(t, t.rank() - 1);
  return rowLen > 0 ? (rowLen + 4) / rowLen : size;
}

PlanPoly tensorBytes(const Type &t) {
  auto n = elementsPoly(t);
  if (!n)
    return {};
  if (!t.elem.isBlock)
    return *n * elementBytes(t);
  double rowLen = constDim(t, t.rank() - 1);
  if (rowLen <= 0)
    return {};
  int64_t rowBytes =
      format::rowSizeInBytes(t.elem.block, static_cast<int64_t>(rowLen));
  // Rows that are not whole blocks (a description before binding): count
  // the blocks' bytes per element.
  format::GgmlTypeInfo info = format::ggmlTypeInfo(t.elem.block);
  double perElement = rowBytes > 0
                          ? static_cast<double>(rowBytes) / rowLen
                          : static_cast<double>(info.typeSize) / info.blockSize;
  return *n * perElement;
}

PlanPoly opFlops(const Operation &op) {
  format::Recipe r;
  if (const OpInfo *info = opInfo(op.kind)) {
    r = recipeOf(info->kind);
  } else if (op.kind == OpKind::Kernel) {
    const format::RecipeInfo *ri = format::lookupRecipe(op.callee);
    if (!ri)
      return {};
    r = ri->id;
  } else if (op.kind == OpKind::Fused) {
    PlanPoly sum;
    for (const auto &inner : op.regions[0]->ops)
      sum += opFlops(*inner);
    return sum;
  } else {
    return {};
  }
  switch (r) {
#define OP(Id, Mnemonic, MinOperands, MaxOperands, NumResults, Attrs, Rule,    \
           Cost, Class)                                                        \
  case format::Recipe::Id:                                                     \
    return cost##Cost(op);
#include "runtime/format/Ops.def"
  }
  return {};
}

/// Bytes operand \p i of \p reader brings in: the whole tensor, but for a
/// lookup table (or the last rows) only the rows read.
PlanPoly readBytes(const Operation &reader, size_t i) {
  const Operand &o = reader.operands[i];
  // The last rows of a tensor: only they are read.
  bool last = reader.kind == OpKind::LastRows ||
              (reader.kind == OpKind::Kernel && reader.callee == "last_rows");
  if (last && !reader.results.empty())
    return tensorBytes(reader.results[0]->type);
  bool lookup = reader.kind == OpKind::GetRows ||
                (reader.kind == OpKind::Kernel && reader.callee == "get_rows");
  if (!lookup || i != 0 || reader.results.empty())
    return tensorBytes(o.type());
  auto tableElems = elementsPoly(o.type());
  auto rowsRead = elementsPoly(reader.results[0]->type);
  double whole = tensorBytes(o.type()).at(0);
  if (!tableElems || !rowsRead || tableElems->at(0) <= 0)
    return tensorBytes(o.type());
  return *rowsRead * (whole / tableElems->at(0));
}

double expectedExperts(double e, double k, int64_t t) {
  if (e <= 0 || k >= e)
    return std::max(e, 0.0);
  return e * (1 - std::pow(1 - k / e, static_cast<double>(t)));
}

PlanPoly expertFraction(double e, double k) {
  if (e <= 0 || k >= e)
    return PlanPoly::constant(1);
  PlanPoly p;
  auto f = [&](int64_t t) { return expectedExperts(e, k, t) / e; };
  // Samples 1, 2, 3, 4, 6, 8, 12, 16, ...
  std::vector<int64_t> at = {1, 2};
  while (at.back() < (int64_t(1) << 40)) {
    int64_t last = at.back();
    bool pow2 = (last & (last - 1)) == 0;
    at.push_back(pow2 ? last / 2 * 3 : last / 3 * 4);
  }
  p.pieces.push_back({0, {0}}); // T = 0 reads nothing
  for (size_t i = 0; i + 1 < at.size(); ++i) {
    double y0 = f(at[i]), y1 = f(at[i + 1]);
    if (y0 >= 1 - 1e-6) {
      p.pieces.push_back({at[i], {1}});
      return p;
    }
    double slope = (y1 - y0) / double(at[i + 1] - at[i]);
    p.pieces.push_back({at[i], {y0 - slope * double(at[i]), slope}});
  }
  p.pieces.push_back({at.back(), {1}});
  return p;
}

/// The recipe of a registry op or kernel<...>, if any.
static std::optional<format::Recipe> recipeOfOp(const Operation &op) {
  if (const OpInfo *info = opInfo(op.kind))
    return recipeOf(info->kind);
  if (op.kind == OpKind::Kernel)
    if (const format::RecipeInfo *ri = format::lookupRecipe(op.callee))
      return ri->id;
  return std::nullopt;
}

/// Bytes of the state operand \p i of \p op that a run touches: a state
/// write (operand 0 of a State-class op) the rows it stores; the caches
/// attention_cached and qsa_select_cached read, at a full context, one slot
/// per row up to every slot (min(T, S) slots); block_mean_cached a block of
/// rows per run row.
static std::optional<PlanPoly> stateBytes(const Operation &op, size_t i) {
  std::optional<format::Recipe> r = recipeOfOp(op);
  if (!r)
    return std::nullopt;
  // The delta rule's recurrent state is read and written whole, once per
  // slot a run touches (min(T, S) slots).
  if ((*r == format::Recipe::GatedDeltaCached ||
       *r == format::Recipe::GatedDeltaQkvCached) &&
      i == 0) {
    Type state = operandType(op, 0);
    double slots = constDim(state, 0);
    PlanPoly whole = tensorBytes(state);
    if (slots <= 0)
      return whole * 2.0;
    double perSlot = 2 * whole.at(0) / slots;
    PlanPoly p = PlanPoly::of({0, perSlot});
    p.pieces.push_back({static_cast<int64_t>(slots), {perSlot * slots}});
    return p;
  }
  if (format::recipeInfo(*r).cls == format::OpClass::State && i == 0) {
    Type state = operandType(op, 0);
    auto rows = elementsPoly(operandType(op, 1));
    if (!rows || !state.isTensor() || state.elem.isBlock)
      return PlanPoly();
    return *rows * elementBytes(state);
  }
  // block_mean_cached reads a block of rows per run row.
  if (*r == format::Recipe::BlockMeanCached && i == 0) {
    Type cache = operandType(op, 0);
    if (op.results.empty() || !cache.isTensor() || cache.elem.isBlock)
      return PlanPoly();
    int64_t block = 1;
    for (const Attr &a : op.attrs)
      if (a.name == "block" && a.value->kind == ExprKind::Int)
        block = std::max<int64_t>(1, a.value->i);
    auto rows = elementsPoly(op.results[0]->type);
    if (!rows)
      return PlanPoly();
    return *rows * (static_cast<double>(block) * elementBytes(cache));
  }
  if ((*r == format::Recipe::AttentionCached && (i == 1 || i == 2)) ||
      (*r == format::Recipe::QsaSelectCached && i == 1)) {
    Type cache = operandType(op, i);
    double slots = constDim(cache, 0);
    PlanPoly whole = tensorBytes(cache);
    if (slots <= 0)
      return whole;
    double perSlot = whole.at(0) / slots;
    PlanPoly p = PlanPoly::of({0, perSlot});
    p.pieces.push_back({static_cast<int64_t>(slots), {perSlot * slots}});
    return p;
  }
  return std::nullopt;
}

/// Bytes of operand \p i of \p op when it is an expert stack (a weight
/// [E, ...] of moe_experts or a grouped expert GEMM): T rows route to k
/// experts each, so only the expected distinct experts are read
/// (expertFraction); a decode step at small T reads few.
static std::optional<PlanPoly> expertStackBytes(const Operation &op, size_t i) {
  std::optional<format::Recipe> r = recipeOfOp(op);
  if (!r || i >= op.operands.size() || !op.operands[i].isWeight())
    return std::nullopt;
  double k = 0;
  if (*r == format::Recipe::MoeExperts && i >= 2) {
    k = constDim(operandType(op, 1), 1); // ids [T, k]
  } else if ((*r == format::Recipe::MoeGroupedSwiglu && i >= 3) ||
             (*r == format::Recipe::MoeGroupedDown && i == 2)) {
    // The expert rows: S = k * T (perm, or the rows of h).
    auto rows = elementsPoly(
        operandType(op, *r == format::Recipe::MoeGroupedDown ? 0 : 1));
    Type first = operandType(op, *r == format::Recipe::MoeGroupedDown ? 0 : 1);
    if (!rows || rows->pieces.empty() || rows->pieces.back().c.size() < 2)
      return std::nullopt;
    double perRow = first.rank() > 1 ? constDim(first, first.rank() - 1) : 1;
    k = rows->pieces.back().c[1] / std::max(perRow, 1.0);
  } else {
    return std::nullopt;
  }
  Type w = operandType(op, i);
  double e = constDim(w, 0);
  if (w.rank() != 3 || e <= 0 || k <= 0)
    return std::nullopt;
  PlanPoly whole = tensorBytes(w);
  PlanPoly frac = expertFraction(e, k);
  for (auto &piece : frac.pieces)
    for (double &c : piece.c)
      c *= whole.at(0);
  return frac;
}

KernelCost kernelCost(const Operation &op) {
  KernelCost c;
  // A state write's result 0 is its operand 0: counted as the rows stored.
  std::optional<format::Recipe> recipe = recipeOfOp(op);
  const bool writes =
      recipe && format::recipeInfo(*recipe).cls == format::OpClass::State;
  std::set<const Value *> seen;
  std::set<std::string> seenWeights;
  auto read = [&](const Operation &reader, size_t i) {
    const Operand &o = reader.operands[i];
    // moe_route's expert stacks are prefetch hints: the grouped GEMMs
    // that read the slabs count their bytes.
    if (i > 0 && recipeOfOp(reader) == format::Recipe::MoeRoute)
      return;
    if (o.isValue() && !seen.insert(o.value).second)
      return;
    if (o.isWeight()) {
      std::string key =
          o.weight->name->kind == ExprKind::Str
              ? o.weight->name->s
              : std::to_string(reinterpret_cast<uintptr_t>(o.weight.get()));
      if (!seenWeights.insert(key).second)
        return;
    }
    if (std::optional<PlanPoly> sb = stateBytes(reader, i)) {
      c.bytes += *sb;
      return;
    }
    if (std::optional<PlanPoly> eb = expertStackBytes(reader, i)) {
      c.bytes += *eb;
      return;
    }
    c.bytes += readBytes(reader, i);
  };
  for (size_t i = 0; i < op.operands.size(); ++i)
    read(op, i);
  if (op.kind == OpKind::Fused)
    for (const auto &inner : op.regions[0]->ops)
      for (size_t i = 0; i < inner->operands.size(); ++i)
        if (inner->operands[i].isWeight())
          read(*inner, i);
  for (size_t k = writes ? 1 : 0; k < op.results.size(); ++k)
    c.bytes += tensorBytes(op.results[k]->type);
  c.flops = opFlops(op);
  return c;
}

} // namespace strata::ir
