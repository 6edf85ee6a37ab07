//===- OpRules.cpp - per-op verifiers and shape rules ---------------------===//
//
// One `infer<Rule>` per Rule column of Ops.def. Rules check operand ranks,
// element types and dims where they are known and compute result types.
// Dims compare as canonical polynomials; a mismatch is reported only when
// it is provable (see Dim::provablyDifferent).
//
//===----------------------------------------------------------------------===//
#include "ir/OpRules.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <climits>

namespace strata::ir {

RuleCtx::RuleCtx(const Operation &op, DiagnosticEngine &diag)
    : op(op), diag_(diag) {
  for (const Operand &o : op.operands)
    in.push_back(o.type());
}

bool RuleCtx::error(const std::string &msg, int operand) {
  SourceLoc loc = operand >= 0 && operand < int(op.operands.size())
                      ? op.operands[operand].loc
                      : op.loc;
  diag_.error(loc, fmt::format("'{}' {}", opName(op.kind), msg));
  return false;
}

static const Expr *literal(const Operation &op, const char *name) {
  const Attr *a = op.findAttr(name);
  return a && a->value->isLiteral() ? a->value.get() : nullptr;
}

static std::optional<int64_t> literalInt(const Expr &e) {
  if (e.kind == ExprKind::Int)
    return e.i;
  if (e.kind == ExprKind::Unary && e.s == "-" &&
      e.args[0]->kind == ExprKind::Int && e.args[0]->i != INT64_MIN)
    return -e.args[0]->i;
  return std::nullopt;
}

static std::optional<double> literalFloat(const Expr &e) {
  if (auto i = literalInt(e))
    return static_cast<double>(*i);
  if (e.kind == ExprKind::Float)
    return e.f;
  if (e.kind == ExprKind::Unary && e.s == "-" &&
      e.args[0]->kind == ExprKind::Float)
    return -e.args[0]->f;
  return std::nullopt;
}

std::optional<int64_t> RuleCtx::intAttr(const char *name) const {
  const Expr *e = literal(op, name);
  return e ? literalInt(*e) : std::nullopt;
}
std::optional<double> RuleCtx::floatAttr(const char *name) const {
  const Expr *e = literal(op, name);
  return e ? literalFloat(*e) : std::nullopt;
}
std::optional<bool> RuleCtx::boolAttr(const char *name) const {
  const Expr *e = literal(op, name);
  if (e && e->kind == ExprKind::Bool)
    return e->b;
  return std::nullopt;
}
std::optional<std::string> RuleCtx::strAttr(const char *name) const {
  const Expr *e = literal(op, name);
  if (e && e->kind == ExprKind::Str)
    return e->s;
  return std::nullopt;
}
std::optional<std::vector<int64_t>> RuleCtx::intsAttr(const char *name) const {
  const Expr *e = literal(op, name);
  if (!e || e->kind != ExprKind::List)
    return std::nullopt;
  std::vector<int64_t> v;
  for (const ExprPtr &a : e->args) {
    auto x = literalInt(*a);
    if (!x)
      return std::nullopt;
    v.push_back(*x);
  }
  return v;
}
std::optional<ElemType> RuleCtx::typeAttr(const char *name) const {
  const Attr *a = op.findAttr(name);
  if (!a || a->value->kind != ExprKind::Name)
    return std::nullopt;
  return ElemType::parse(a->value->s);
}

bool RuleCtx::allKnown() const {
  for (const Type &t : in)
    if (!t.isTensor())
      return false;
  return true;
}

namespace {

ElemType f32() { return ElemType::of(DType::F32); }
ElemType i32() { return ElemType::of(DType::I32); }

/// Checks operand \p i has rank \p rank (if known).
bool checkRank(RuleCtx &c, size_t i, size_t rank, const char *what) {
  const Type &t = c.in[i];
  if (!t.isTensor() || t.rank() == rank)
    return true;
  return c.error(
      fmt::format("expects {} of rank {}, got {}", what, rank, t.str()),
      int(i));
}

/// Checks operand \p i is an activation (not a block-quantised weight).
bool checkActivation(RuleCtx &c, size_t i, const char *what) {
  const Type &t = c.in[i];
  if (!t.isTensor() || !t.elem.isBlock)
    return true;
  return c.error(fmt::format("expects {} to be an activation, got "
                             "block-quantised {}",
                             what, t.str()),
                 int(i));
}

/// Checks operand \p i has an integer element type.
bool checkIndices(RuleCtx &c, size_t i, const char *what) {
  const Type &t = c.in[i];
  if (!t.isTensor() || t.elem.isInt())
    return true;
  return c.error(
      fmt::format("expects {} to be i32 or i64, got {}", what, t.str()),
      int(i));
}

/// Checks dim \p da of operand \p a equals dim \p db of operand \p b.
bool checkDim(RuleCtx &c, size_t a, size_t da, size_t b, size_t db,
              const char *what) {
  const Type &ta = c.in[a], &tb = c.in[b];
  if (!ta.isTensor() || !tb.isTensor() || da >= ta.rank() || db >= tb.rank())
    return true;
  if (!Dim::provablyDifferent(ta.dims[da], tb.dims[db]))
    return true;
  return c.error(fmt::format("{} mismatch: {} (operand #{} {}) vs {} "
                             "(operand #{} {})",
                             what, ta.dims[da].str(), a, ta.str(),
                             tb.dims[db].str(), b, tb.str()),
                 int(b));
}

/// Checks a dim is divisible by another where both are constants.
bool checkDivisible(RuleCtx &c, const Dim &n, const Dim &d, const char *what) {
  auto x = n.constant(), y = d.constant();
  if (!x || !y)
    return true;
  if (*y != 0 && *x % *y == 0)
    return true;
  return c.error(fmt::format("{}: {} is not a multiple of {}", what, *x, *y));
}

/// Normalises a possibly negative axis; reports out-of-range axes.
std::optional<size_t> axisOf(RuleCtx &c, int64_t axis, size_t rank) {
  int64_t r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r) {
    c.error(fmt::format("axis {} is out of range for rank {}", axis, rank));
    return std::nullopt;
  }
  return static_cast<size_t>(axis < 0 ? axis + r : axis);
}

bool inferUnary(RuleCtx &c) {
  if (!checkActivation(c, 0, "its operand"))
    return false;
  if (c.in[0].isTensor())
    c.out[0] = c.in[0];
  return true;
}

bool inferClamp(RuleCtx &c) {
  auto lo = c.floatAttr("min"), hi = c.floatAttr("max");
  if (lo && hi && *lo > *hi)
    return c.error(
        fmt::format("attribute 'min' ({}) is above 'max' ({})", *lo, *hi));
  return inferUnary(c);
}

bool inferL2Norm(RuleCtx &c) {
  auto form = c.strAttr("form");
  if (form && *form != "max" && *form != "add")
    return c.error(fmt::format("attribute 'form' must be \"max\" or \"add\", "
                               "got \"{}\"",
                               *form));
  return inferUnary(c);
}

bool inferCast(RuleCtx &c) {
  const Attr *a = c.op.findAttr("to");
  auto to = c.typeAttr("to");
  if (a && !to)
    return c.error(fmt::format("attribute 'to' must name an activation type "
                               "(f32, f16, bf16, i32, i64, bool), got '{}'",
                               printExpr(*a->value)));
  if (to && to->isBlock)
    return c.error("cannot cast to a block-quantised type");
  if (!checkActivation(c, 0, "its operand"))
    return false;
  if (c.in[0].isTensor() && to)
    c.out[0] = Type::tensor(*to, c.in[0].dims);
  return true;
}

bool inferBinary(RuleCtx &c) {
  if (!checkActivation(c, 0, "its operands") ||
      !checkActivation(c, 1, "its operands"))
    return false;
  if (!c.allKnown())
    return true;
  const Type &a = c.in[0], &b = c.in[1];
  if (!(a.elem == b.elem))
    return c.error(fmt::format("operand element types differ: {} vs {}",
                               a.str(), b.str()));
  // numpy broadcasting over trailing dims; 1 broadcasts.
  size_t rank = std::max(a.rank(), b.rank());
  std::vector<Dim> dims(rank);
  for (size_t k = 0; k < rank; ++k) {
    const Dim *da =
        k < rank - a.rank() ? nullptr : &a.dims[k - (rank - a.rank())];
    const Dim *db =
        k < rank - b.rank() ? nullptr : &b.dims[k - (rank - b.rank())];
    if (!da || (da->constant() == 1 && db)) {
      dims[k] = *db;
    } else if (!db || db->constant() == 1) {
      dims[k] = *da;
    } else {
      if (Dim::provablyDifferent(*da, *db))
        return c.error(
            fmt::format("cannot broadcast {} with {}", a.str(), b.str()));
      dims[k] = *da;
    }
  }
  c.out[0] = Type::tensor(a.elem, dims);
  return true;
}

bool inferReduce(RuleCtx &c) {
  if (!checkActivation(c, 0, "its operand"))
    return false;
  auto axis = c.intAttr("axis");
  if (!c.in[0].isTensor() || !axis)
    return true;
  auto ax = axisOf(c, *axis, c.in[0].rank());
  if (!ax)
    return false;
  std::vector<Dim> dims = c.in[0].dims;
  dims.erase(dims.begin() + *ax);
  c.out[0] = Type::tensor(c.in[0].elem, dims);
  return true;
}

bool inferArgmax(RuleCtx &c) {
  if (!checkActivation(c, 0, "its operand"))
    return false;
  const Type &x = c.in[0];
  if (!x.isTensor())
    return true;
  if (x.rank() == 0)
    return c.error("expects an operand of rank >= 1 (rows of its last dim)", 0);
  if (x.elem.isInt())
    return c.error(
        fmt::format("expects a floating-point operand, got {}", x.str()), 0);
  std::vector<Dim> dims(x.dims.begin(), x.dims.end() - 1);
  c.out[0] = Type::tensor(i32(), dims);
  return true;
}

bool inferRmsNorm(RuleCtx &c) {
  if (!checkActivation(c, 0, "the input"))
    return false;
  const Type &x = c.in[0];
  if (x.isTensor() && x.rank() == 0)
    return c.error("expects an input of rank >= 1");
  auto groups = c.intAttr("groups");
  if (groups && *groups <= 0)
    return c.error(
        fmt::format("attribute 'groups' must be positive, got {}", *groups));
  if (x.isTensor() && groups &&
      !checkDivisible(c, x.dims.back(), Dim::constant(*groups),
                      "last dim must split into 'groups'"))
    return false;
  if (c.in.size() > 1) {
    if (!checkRank(c, 1, 1, "a weight"))
      return false;
    if (!checkDim(c, 0, x.rank() - 1, 1, 0, "normalised dim and weight size"))
      return false;
  }
  if (x.isTensor())
    c.out[0] = Type::tensor(f32(), x.dims);
  return true;
}

bool inferMatmul(RuleCtx &c) {
  if (!checkActivation(c, 0, "the input"))
    return false;
  const Type &x = c.in[0], &w = c.in[1];
  if (x.isTensor() && x.rank() == 0)
    return c.error("expects an input of rank >= 1");
  if (!checkRank(c, 1, 2, "a weight [N, K]"))
    return false;
  if (x.isTensor() && !checkDim(c, 0, x.rank() - 1, 1, 1, "contraction dim K"))
    return false;
  if (x.isTensor() && w.isTensor()) {
    std::vector<Dim> dims = x.dims;
    dims.back() = w.dims[0];
    c.out[0] = Type::tensor(f32(), dims);
  }
  return true;
}

bool inferGetRows(RuleCtx &c) {
  if (!checkRank(c, 0, 2, "a table [V, D]") ||
      !checkIndices(c, 1, "the row ids"))
    return false;
  if (!c.allKnown())
    return true;
  std::vector<Dim> dims = c.in[1].dims;
  dims.push_back(c.in[0].dims[1]);
  c.out[0] = Type::tensor(f32(), dims);
  return true;
}

bool inferArange(RuleCtx &c) {
  const Type &x = c.in[0];
  if (!x.isTensor())
    return true;
  if (x.rank() == 0)
    return c.error("expects an operand of rank >= 1 (its first dim is the "
                   "length)");
  c.out[0] = Type::tensor(i32(), {x.dims[0]});
  return true;
}

bool inferRope(RuleCtx &c) {
  if (!checkActivation(c, 0, "the input") ||
      !checkRank(c, 0, 3, "an input [T, H, D]") ||
      !checkRank(c, 1, 1, "positions [T]") ||
      !checkIndices(c, 1, "the positions"))
    return false;
  auto mode = c.strAttr("mode");
  if (mode && *mode != "normal" && *mode != "neox")
    return c.error(fmt::format("attribute 'mode' must be \"normal\" or "
                               "\"neox\", got \"{}\"",
                               *mode));
  auto dims = c.intAttr("dims");
  if (dims && (*dims <= 0 || *dims % 2 != 0))
    return c.error(fmt::format("attribute 'dims' must be positive and even, "
                               "got {}",
                               *dims));
  const Type &x = c.in[0];
  if (dims && x.isTensor())
    if (auto hd = x.dims[2].constant(); hd && *dims > *hd)
      return c.error(
          fmt::format("rotates {} dims but the head has {}", *dims, *hd));
  if (auto s = c.intsAttr("sections")) {
    int64_t sum = 0;
    for (int64_t v : *s) {
      if (v < 0)
        return c.error("attribute 'sections' must be non-negative");
      sum += v;
    }
    if (dims && sum * 2 != *dims)
      return c.error(fmt::format("'sections' cover {} dims, 'dims' is {}",
                                 sum * 2, *dims));
  }
  if (!checkDim(c, 0, 0, 1, 0, "token count"))
    return false;
  if (x.isTensor())
    c.out[0] = Type::tensor(f32(), x.dims);
  return true;
}

bool inferAttention(RuleCtx &c) {
  bool gated = c.boolAttr("gated").value_or(false);
  int64_t block = c.intAttr("block").value_or(0);
  if (block < 0)
    return c.error(
        fmt::format("attribute 'block' must be >= 0, got {}", block));
  // The operand count follows from `gated` and `block` once both are known
  // (absent or literal); before expand they may still be expressions.
  auto settled = [&](const char *name) {
    const Attr *a = c.op.findAttr(name);
    return !a || a->value->isLiteral();
  };
  size_t want = 3 + (gated ? 1 : 0) + (block > 0 ? 1 : 0);
  if (settled("gated") && settled("block") && c.in.size() != want)
    return c.error(fmt::format("expects {} operands (q, k, v{}{}), got {}",
                               want, gated ? ", gate" : "",
                               block > 0 ? ", index" : "", c.in.size()));
  for (size_t i = 0; i < 3; ++i)
    if (!checkActivation(c, i, "q, k and v") ||
        !checkRank(c, i, 3, "q, k and v [T, heads, dim]"))
      return false;
  if (!checkDim(c, 0, 0, 1, 0, "token count") ||
      !checkDim(c, 1, 0, 2, 0, "token count") ||
      !checkDim(c, 0, 2, 1, 2, "q/k head dim") ||
      !checkDim(c, 1, 1, 2, 1, "k/v head count"))
    return false;
  if (c.in[0].isTensor() && c.in[1].isTensor() &&
      !checkDivisible(c, c.in[0].dims[1], c.in[1].dims[1],
                      "query heads must be a multiple of kv heads (GQA)"))
    return false;
  size_t next = 3;
  if (gated && c.in.size() > next) {
    if (!checkRank(c, next, 3, "a gate [T, H, Dv]") ||
        !checkDim(c, 0, 1, next, 1, "gate head count") ||
        !checkDim(c, 2, 2, next, 2, "gate dim"))
      return false;
    ++next;
  }
  if (block > 0 && c.in.size() > next)
    if (!checkRank(c, next, 2, "an index [T, blocks]") ||
        !checkIndices(c, next, "the block index"))
      return false;
  if (c.in[0].isTensor() && c.in[2].isTensor())
    c.out[0] = Type::tensor(
        f32(), {c.in[0].dims[0], c.in[0].dims[1], c.in[2].dims[2]});
  return true;
}

/// The depthwise conv's dilation, input x [T, C] (operand \p x) and weight
/// [C, K] (operand x + 1); sets result \p out to f32 [T, C].
bool checkConv1d(RuleCtx &c, size_t x, size_t out) {
  auto dilation = c.intAttr("dilation");
  if (dilation && *dilation <= 0)
    return c.error(fmt::format("attribute 'dilation' must be positive, got {}",
                               *dilation));
  if (!checkActivation(c, x, "the input") ||
      !checkRank(c, x, 2, "an input [T, C]") ||
      !checkRank(c, x + 1, 2, "a weight [C, K]") ||
      !checkDim(c, x, 1, x + 1, 0, "channel count"))
    return false;
  if (c.in[x].isTensor())
    c.out[out] = Type::tensor(f32(), c.in[x].dims);
  return true;
}

bool inferConv1d(RuleCtx &c) { return checkConv1d(c, 0, 0); }

/// The delta rule's optional 'heads' attribute: the value heads' order
/// over the key heads, "grouped" or "tiled".
bool checkDeltaHeads(RuleCtx &c) {
  auto heads = c.strAttr("heads");
  if (heads && *heads != "grouped" && *heads != "tiled")
    return c.error(fmt::format("attribute 'heads' must be \"grouped\" or "
                               "\"tiled\", got \"{}\"",
                               *heads));
  return true;
}

/// The delta rule's operands q, k, v, g, beta from operand \p base on;
/// sets result \p out to f32 [T, H, Dv].
bool checkGatedDelta(RuleCtx &c, size_t base, size_t out) {
  if (!checkDeltaHeads(c))
    return false;
  static const char *kNames[] = {"q [T, Hk, Dk]", "k [T, Hk, Dk]",
                                 "v [T, H, Dv]", "g [T, H]", "beta [T, H]"};
  static const size_t kRanks[] = {3, 3, 3, 2, 2};
  for (size_t i = 0; i < 5; ++i)
    if (!checkActivation(c, base + i, kNames[i]) ||
        !checkRank(c, base + i, kRanks[i], kNames[i]))
      return false;
  size_t q = base, k = base + 1, v = base + 2;
  if (!checkDim(c, q, 1, k, 1, "q/k head count") ||
      !checkDim(c, q, 2, k, 2, "q/k head dim") ||
      !checkDim(c, v, 1, base + 3, 1, "v/g head count") ||
      !checkDim(c, v, 1, base + 4, 1, "v/beta head count"))
    return false;
  for (size_t i = 1; i < 5; ++i)
    if (!checkDim(c, q, 0, base + i, 0, "token count"))
      return false;
  if (c.in[v].isTensor() && c.in[q].isTensor() &&
      !checkDivisible(c, c.in[v].dims[1], c.in[q].dims[1],
                      "value heads must be a multiple of key heads"))
    return false;
  if (c.in[v].isTensor())
    c.out[out] = Type::tensor(f32(), c.in[v].dims);
  return true;
}

bool inferGatedDelta(RuleCtx &c) { return checkGatedDelta(c, 0, 0); }

bool inferBlockMean(RuleCtx &c) {
  if (!checkActivation(c, 0, "the input") ||
      !checkRank(c, 0, 2, "an input [T, C]"))
    return false;
  auto block = c.intAttr("block");
  if (block && *block <= 0)
    return c.error(
        fmt::format("attribute 'block' must be positive, got {}", *block));
  if (c.in[0].isTensor() && block)
    c.out[0] = Type::tensor(
        f32(), {Dim::floorDiv(c.in[0].dims[0], *block), c.in[0].dims[1]});
  return true;
}

bool inferQsaSelect(RuleCtx &c) {
  if (!checkActivation(c, 0, "the queries") ||
      !checkActivation(c, 1, "the block keys") ||
      !checkRank(c, 0, 3, "queries [T, Hi, Di]") ||
      !checkRank(c, 1, 2, "block keys [NB, Di]") ||
      !checkDim(c, 0, 2, 1, 1, "indexer head dim"))
    return false;
  auto block = c.intAttr("block"), top = c.intAttr("top");
  if (block && *block <= 0)
    return c.error(
        fmt::format("attribute 'block' must be positive, got {}", *block));
  if (top && (*top <= 0 || *top > (int64_t(1) << 24)))
    return c.error(
        fmt::format("attribute 'top' must be in 1..2^24, got {}", *top));
  if (c.in[0].isTensor() && top)
    c.out[0] = Type::tensor(i32(), {c.in[0].dims[0], Dim::constant(*top + 1)});
  return true;
}

/// ngram_hash's attributes and its tokens, operand \p tok; sets result
/// \p out to i32 [T, (n-1)*heads].
bool checkNgramHash(RuleCtx &c, size_t tok, size_t out) {
  if (!checkRank(c, tok, 1, "tokens [T]") ||
      !checkIndices(c, tok, "the tokens"))
    return false;
  auto n = c.intAttr("n"), heads = c.intAttr("heads");
  if (n && (*n < 2 || *n > 64))
    return c.error(fmt::format("attribute 'n' must be in 2..64, got {}", *n));
  if (heads && (*heads <= 0 || *heads > 4096))
    return c.error(
        fmt::format("attribute 'heads' must be in 1..4096, got {}", *heads));
  if (auto m = c.intsAttr("mults"); m && n && int64_t(m->size()) != *n)
    return c.error(fmt::format("attribute 'mults' has {} entries, 'n' is {}",
                               m->size(), *n));
  auto checkList = [&](const char *name, int64_t lo) {
    auto list = c.intsAttr(name);
    if (!list)
      return true;
    if (n && heads && int64_t(list->size()) != (*n - 1) * *heads)
      return c.error(fmt::format("attribute '{}' has {} entries, expected "
                                 "(n-1)*heads = {}",
                                 name, list->size(), (*n - 1) * *heads));
    for (int64_t v : *list)
      if (v < lo || v > INT32_MAX)
        return c.error(
            fmt::format("attribute '{}' holds {}, out of range", name, v));
    return true;
  };
  if (!checkList("sizes", 1) || !checkList("offsets", 0))
    return false;
  if (c.in[tok].isTensor() && n && heads)
    c.out[out] = Type::tensor(
        i32(), {c.in[tok].dims[0], Dim::constant((*n - 1) * *heads)});
  return true;
}

bool inferNgramHash(RuleCtx &c) { return checkNgramHash(c, 0, 0); }

bool inferMoeRoute(RuleCtx &c) {
  if (!checkActivation(c, 0, "the router logits") ||
      !checkRank(c, 0, 2, "router logits [T, E]"))
    return false;
  auto func = c.strAttr("func");
  if (func && *func != "softmax" && *func != "sigmoid")
    return c.error(fmt::format("attribute 'func' must be \"softmax\" or "
                               "\"sigmoid\", got \"{}\"",
                               *func));
  auto k = c.intAttr("k");
  if (k && *k <= 0)
    return c.error(fmt::format("attribute 'k' must be positive, got {}", *k));
  // Operands past the logits: expert stacks [E, N, K] the ids select
  // (prefetch hints), one expert per index of the logits' last dim.
  for (size_t i = 1; i < c.in.size(); ++i) {
    if (!c.op.operands[i].isWeight())
      return c.error("expects its operands past the logits to be expert "
                     "weight stacks (prefetch hints)",
                     int(i));
    if (!checkRank(c, i, 3, "an expert stack [E, N, K]") ||
        !checkDim(c, 0, 1, i, 0, "expert count"))
      return false;
  }
  if (!c.in[0].isTensor() || !k)
    return true;
  if (auto e = c.in[0].dims[1].constant(); e && *k > *e)
    return c.error(fmt::format("selects k = {} of only {} experts", *k, *e));
  const Dim &t = c.in[0].dims[0];
  c.out[0] = Type::tensor(f32(), {t, Dim::constant(*k)});
  c.out[1] = Type::tensor(i32(), {t, Dim::constant(*k)});
  return true;
}

bool inferMoeExperts(RuleCtx &c) {
  if (!checkActivation(c, 0, "the input") ||
      !checkRank(c, 0, 2, "an input [T, D]") ||
      !checkRank(c, 1, 2, "expert ids [T, k]") ||
      !checkIndices(c, 1, "the expert ids") ||
      !checkRank(c, 2, 3, "gate experts [E, F, D]") ||
      !checkRank(c, 3, 3, "up experts [E, F, D]") ||
      !checkRank(c, 4, 3, "down experts [E, D, F]"))
    return false;
  if (!checkDim(c, 0, 0, 1, 0, "token count") ||
      !checkDim(c, 0, 1, 2, 2, "gate input dim") ||
      !checkDim(c, 2, 0, 3, 0, "gate/up expert count") ||
      !checkDim(c, 2, 1, 3, 1, "gate/up width") ||
      !checkDim(c, 3, 0, 4, 0, "up/down expert count") ||
      !checkDim(c, 2, 0, 4, 0, "gate/down expert count") ||
      !checkDim(c, 2, 1, 4, 2, "expert width F") ||
      !checkDim(c, 0, 1, 4, 1, "down output dim"))
    return false;
  if (c.in[0].isTensor() && c.in[1].isTensor())
    c.out[0] = Type::tensor(
        f32(), {c.in[0].dims[0], c.in[1].dims[1], c.in[0].dims[1]});
  return true;
}

bool inferMoeCombine(RuleCtx &c) {
  if (!checkActivation(c, 0, "expert outputs") ||
      !checkRank(c, 0, 3, "expert outputs [T, k, D]") ||
      !checkRank(c, 1, 2, "routing weights [T, k]") ||
      !checkDim(c, 0, 0, 1, 0, "token count") ||
      !checkDim(c, 0, 1, 1, 1, "slot count k"))
    return false;
  if (c.in.size() > 2 &&
      (!checkRank(c, 2, 2, "a shared expert output [T, D]") ||
       !checkDim(c, 0, 0, 2, 0, "token count") ||
       !checkDim(c, 0, 2, 2, 1, "hidden dim")))
    return false;
  if (c.in.size() > 3 && (!checkRank(c, 3, 2, "a shared gate [T, 1]") ||
                          !checkDim(c, 0, 0, 3, 0, "token count")))
    return false;
  if (c.in.size() > 3 && c.in[3].isTensor() &&
      c.in[3].dims[1].constant() != std::optional<int64_t>(1) &&
      c.in[3].dims[1].isPolynomial())
    return c.error(
        fmt::format("expects a shared gate [T, 1], got {}", c.in[3].str()), 3);
  if (c.in[0].isTensor())
    c.out[0] = Type::tensor(f32(), {c.in[0].dims[0], c.in[0].dims[2]});
  return true;
}

bool inferMoeSort(RuleCtx &c) {
  if (!checkRank(c, 0, 2, "expert ids [T, k]") ||
      !checkIndices(c, 0, "the expert ids"))
    return false;
  auto e = c.intAttr("experts");
  if (e && *e <= 0)
    return c.error(
        fmt::format("attribute 'experts' must be positive, got {}", *e));
  if (!c.in[0].isTensor() || !e)
    return true;
  c.out[0] = Type::tensor(i32(), {Dim::constant(*e + 1)});
  Dim slots = c.in[0].dims[0] * c.in[0].dims[1];
  c.out[1] = Type::tensor(i32(), {slots});
  c.out[2] = Type::tensor(i32(), {slots});
  return true;
}

bool inferMoeGroupedSwiglu(RuleCtx &c) {
  if (!checkActivation(c, 0, "the input") ||
      !checkRank(c, 0, 2, "an input [T, D]") ||
      !checkRank(c, 1, 1, "a permutation [T*k]") ||
      !checkIndices(c, 1, "the permutation") ||
      !checkRank(c, 2, 1, "expert offsets [E + 1]") ||
      !checkIndices(c, 2, "the expert offsets") ||
      !checkRank(c, 3, 3, "gate experts [E, F, D]") ||
      !checkRank(c, 4, 3, "up experts [E, F, D]") ||
      !checkDim(c, 0, 1, 3, 2, "gate input dim") ||
      !checkDim(c, 3, 0, 4, 0, "gate/up expert count") ||
      !checkDim(c, 3, 1, 4, 1, "gate/up width") ||
      !checkDim(c, 3, 2, 4, 2, "gate/up input dim"))
    return false;
  if (c.in[1].isTensor() && c.in[3].isTensor())
    c.out[0] = Type::tensor(f32(), {c.in[1].dims[0], c.in[3].dims[1]});
  return true;
}

bool inferMoeGroupedDown(RuleCtx &c) {
  if (!checkActivation(c, 0, "the hidden rows") ||
      !checkRank(c, 0, 2, "hidden rows [S, F]") ||
      !checkRank(c, 1, 1, "expert offsets [E + 1]") ||
      !checkIndices(c, 1, "the expert offsets") ||
      !checkRank(c, 2, 3, "down experts [E, D, F]") ||
      !checkDim(c, 0, 1, 2, 2, "expert width F"))
    return false;
  if (c.in[0].isTensor() && c.in[2].isTensor())
    c.out[0] = Type::tensor(f32(), {c.in[0].dims[0], c.in[2].dims[1]});
  return true;
}

bool inferMoeScatter(RuleCtx &c) {
  if (!checkActivation(c, 0, "expert rows") ||
      !checkRank(c, 0, 2, "expert rows [S, D]") ||
      !checkRank(c, 1, 1, "slot rows [S]") ||
      !checkIndices(c, 1, "the slot rows") ||
      !checkDim(c, 0, 0, 1, 0, "row count") ||
      !checkRank(c, 2, 2, "routing weights [T, k]"))
    return false;
  if (c.in.size() > 3 &&
      (!checkRank(c, 3, 2, "a shared expert output [T, D]") ||
       !checkDim(c, 2, 0, 3, 0, "token count") ||
       !checkDim(c, 0, 1, 3, 1, "hidden dim")))
    return false;
  if (c.in.size() > 4 && (!checkRank(c, 4, 2, "a shared gate [T, 1]") ||
                          !checkDim(c, 2, 0, 4, 0, "token count")))
    return false;
  if (c.in[0].isTensor() && c.in[2].isTensor())
    c.out[0] = Type::tensor(f32(), {c.in[2].dims[0], c.in[0].dims[1]});
  return true;
}

bool inferHcExpand(RuleCtx &c) {
  if (!checkActivation(c, 0, "the input") ||
      !checkRank(c, 0, 2, "an input [T, D]"))
    return false;
  auto n = c.intAttr("n");
  if (n && *n <= 0)
    return c.error(fmt::format("attribute 'n' must be positive, got {}", *n));
  if (c.in[0].isTensor() && n)
    c.out[0] = Type::tensor(
        c.in[0].elem, {c.in[0].dims[0], Dim::constant(*n), c.in[0].dims[1]});
  return true;
}

bool inferHcNorm(RuleCtx &c) {
  if (!checkActivation(c, 0, "the streams") ||
      !checkRank(c, 0, 3, "streams [T, n, D]"))
    return false;
  if (c.in.size() > 1) {
    if (!checkRank(c, 1, 1, "a weight [n*D]"))
      return false;
    const Type &r = c.in[0], &w = c.in[1];
    if (r.isTensor() && w.isTensor() &&
        Dim::provablyDifferent(r.dims[1] * r.dims[2], w.dims[0]))
      return c.error(fmt::format("weight size {} is not n*D = {}",
                                 w.dims[0].str(),
                                 (r.dims[1] * r.dims[2]).str()),
                     1);
  }
  if (c.in[0].isTensor())
    c.out[0] = Type::tensor(f32(), c.in[0].dims);
  return true;
}

bool inferHcRead(RuleCtx &c) {
  if (!checkActivation(c, 0, "normalised streams") ||
      !checkActivation(c, 1, "read gates") ||
      !checkRank(c, 0, 3, "normalised streams [T, n, D]") ||
      !checkRank(c, 1, 3, "read gates [T, n, D]"))
    return false;
  for (size_t d = 0; d < 3; ++d)
    if (!checkDim(c, 0, d, 1, d, "stream/gate shape"))
      return false;
  if (c.in[0].isTensor())
    c.out[0] = Type::tensor(f32(), {c.in[0].dims[0], c.in[0].dims[2]});
  return true;
}

bool inferHcWrite(RuleCtx &c) {
  if (!checkActivation(c, 0, "the streams") ||
      !checkRank(c, 0, 3, "streams [T, n, D]") ||
      !checkRank(c, 1, 2, "a sublayer output [T, D]") ||
      !checkRank(c, 2, 2, "injection gates [T, n]") ||
      !checkDim(c, 0, 0, 1, 0, "token count") ||
      !checkDim(c, 0, 2, 1, 1, "hidden dim") ||
      !checkDim(c, 0, 0, 2, 0, "token count") ||
      !checkDim(c, 0, 1, 2, 1, "stream count"))
    return false;
  if (c.in[0].isTensor())
    c.out[0] = Type::tensor(f32(), c.in[0].dims);
  return true;
}

bool inferSinkhorn(RuleCtx &c) {
  if (!checkActivation(c, 0, "the input"))
    return false;
  auto iters = c.intAttr("iters");
  if (iters && *iters <= 0)
    return c.error(
        fmt::format("attribute 'iters' must be positive, got {}", *iters));
  const Type &x = c.in[0];
  if (!x.isTensor())
    return true;
  if (x.rank() < 2)
    return c.error(fmt::format("expects [..., n, n], got {}", x.str()));
  if (Dim::provablyDifferent(x.dims[x.rank() - 1], x.dims[x.rank() - 2]))
    return c.error(
        fmt::format("expects square trailing dims, got {}", x.str()));
  c.out[0] = x;
  return true;
}

bool inferReshape(RuleCtx &c) {
  if (!c.op.declaredTypes[0])
    return c.error("needs its result type written (': f32[...]')");
  const Type &to = *c.op.declaredTypes[0];
  const Type &x = c.in[0];
  if (x.isTensor()) {
    if (!(x.elem == to.elem))
      return c.error(fmt::format("cannot change the element type ({} to {}); "
                                 "use cast",
                                 x.str(), to.str()));
    Dim a = Dim::constant(1), b = Dim::constant(1);
    for (const Dim &d : x.dims)
      a = a * d;
    for (const Dim &d : to.dims)
      b = b * d;
    if (Dim::provablyDifferent(a, b))
      return c.error(fmt::format("changes the element count: {} ({}) to {} "
                                 "({})",
                                 x.str(), a.str(), to.str(), b.str()));
  }
  c.out[0] = to;
  return true;
}

bool inferPermute(RuleCtx &c) {
  auto perm = c.intsAttr("perm");
  const Type &x = c.in[0];
  if (!perm)
    return true;
  std::vector<bool> seen(perm->size(), false);
  for (int64_t p : *perm) {
    if (p < 0 || p >= int64_t(perm->size()) || seen[p])
      return c.error("attribute 'perm' must be a permutation of 0..rank-1");
    seen[p] = true;
  }
  if (!x.isTensor())
    return true;
  if (perm->size() != x.rank())
    return c.error(fmt::format("'perm' has {} entries for rank {}",
                               perm->size(), x.rank()));
  std::vector<Dim> dims;
  for (int64_t p : *perm)
    dims.push_back(x.dims[p]);
  c.out[0] = Type::tensor(x.elem, dims);
  return true;
}

bool inferSlice(RuleCtx &c) {
  auto axis = c.intAttr("axis");
  auto start = c.intAttr("start"), end = c.intAttr("end");
  if (start && end && (*start < 0 || *end < *start))
    return c.error(
        fmt::format("needs 0 <= start <= end, got {}..{}", *start, *end));
  const Type &x = c.in[0];
  if (!x.isTensor() || !axis || !start || !end)
    return true;
  auto ax = axisOf(c, *axis, x.rank());
  if (!ax)
    return false;
  if (auto n = x.dims[*ax].constant(); n && *end > *n)
    return c.error(fmt::format("end {} is past the dim size {}", *end, *n));
  std::vector<Dim> dims = x.dims;
  dims[*ax] = Dim::constant(*end - *start);
  c.out[0] = Type::tensor(x.elem, dims);
  return true;
}

bool inferLastRows(RuleCtx &c) {
  auto n = c.intAttr("n");
  const Type &x = c.in[0];
  if (!x.isTensor() || !n)
    return true;
  if (x.rank() < 1)
    return c.error("needs a tensor of rank >= 1 (rows along dim 0)", 0);
  if (auto rows = x.dims[0].constant(); rows && *n > *rows)
    return c.error(fmt::format("takes {} rows of only {}", *n, *rows));
  std::vector<Dim> dims = x.dims;
  dims[0] = Dim::constant(*n);
  c.out[0] = Type::tensor(x.elem, dims);
  return true;
}

bool inferConcat(RuleCtx &c) {
  auto axis = c.intAttr("axis");
  if (!c.allKnown() || !axis)
    return true;
  const Type &first = c.in[0];
  auto ax = axisOf(c, *axis, first.rank());
  if (!ax)
    return false;
  Dim sum = Dim::constant(0);
  for (size_t i = 0; i < c.in.size(); ++i) {
    const Type &t = c.in[i];
    if (!(t.elem == first.elem) || t.rank() != first.rank())
      return c.error(fmt::format("operands differ in element type or rank: "
                                 "{} vs {}",
                                 first.str(), t.str()),
                     int(i));
    for (size_t d = 0; d < t.rank(); ++d)
      if (d != *ax && !checkDim(c, 0, d, i, d, "non-concatenated dim"))
        return false;
    sum = sum + t.dims[*ax];
  }
  std::vector<Dim> dims = first.dims;
  dims[*ax] = sum;
  c.out[0] = Type::tensor(first.elem, dims);
  return true;
}

/// The element types a state may hold: f32, or for the KV caches
/// (assign-precision under --kv) bf16 and i8 (format::stateBytes).
bool isStateElem(const ElemType &e) {
  return !e.isBlock && (e.dtype == DType::F32 || e.dtype == DType::BF16 ||
                        e.dtype == DType::I8);
}

/// `state() {name} : type`: the written type, an f32, bf16 or i8 tensor
/// whose dims do not depend on T (a state outlives a run) and, once bound,
/// are positive; an i8 state's rows (its last dim) a multiple of 4 long.
bool inferState(RuleCtx &c) {
  const std::optional<Type> &t =
      c.op.declaredTypes.empty() ? std::nullopt : c.op.declaredTypes[0];
  if (!t || !t->isTensor())
    return c.error("needs its type written (e.g. `: f32[S, C, HKV, HD]`)");
  if (!isStateElem(t->elem))
    return c.error(
        fmt::format("holds f32, bf16 or i8 (the states of this build), not {}",
                    t->elem.str()));
  if (t->elem.dtype == DType::I8 && !t->dims.empty())
    if (auto d = t->dims.back().constant(); d && *d % 4 != 0)
      return c.error(fmt::format("is i8 with rows of {} values; an i8 state's "
                                 "last dim is a multiple of 4 (each row ends "
                                 "with its f32 scale)",
                                 *d));
  if (auto name = c.strAttr("name"); name && name->empty())
    return c.error("needs a non-empty 'name'");
  // The symbol T as a word of the printed dim.
  auto mentionsT = [](const Dim &d) {
    std::string s = d.str();
    auto word = [](char ch) {
      return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_';
    };
    for (size_t i = 0; i < s.size(); ++i)
      if (s[i] == 'T' && (i == 0 || !word(s[i - 1])) &&
          (i + 1 == s.size() || !word(s[i + 1])))
        return true;
    return false;
  };
  for (const Dim &d : t->dims) {
    if (mentionsT(d))
      return c.error(fmt::format("has the dim '{}', which depends on T; a "
                                 "state outlives a run (its dims are slots, "
                                 "positions, heads...)",
                                 d.str()));
    if (auto v = d.constant(); v && *v <= 0)
      return c.error(fmt::format("has an empty dim ({} in {}): states are "
                                 "sized by strata-compile --max-context and "
                                 "--max-batch (declare them under `if "
                                 "generation()`)",
                                 *v, t->str()));
  }
  c.out[0] = *t;
  return true;
}

/// Checks operand \p i is a state-shaped tensor of rank \p rank: f32, or
/// with \p cache any state element type (the caches kv_store writes and
/// attention_cached and block_mean_cached read, bf16 or i8 under --kv).
bool checkStateOperand(RuleCtx &c, size_t i, size_t rank, const char *what,
                       bool cache = false) {
  const Type &t = c.in[i];
  if (!checkRank(c, i, rank, what))
    return false;
  if (t.isTensor() && !(t.elem == f32()) && !(cache && isStateElem(t.elem)))
    return c.error(fmt::format("expects {} to be {}, got {}", what,
                               cache ? "f32, bf16 or i8" : "f32", t.str()),
                   int(i));
  return true;
}

/// Checks operands \p seq and \p seq + 1 are the rows' slots and
/// positions, i32 [T] with T = dim 0 of operand \p rows.
bool checkRowPlaces(RuleCtx &c, size_t seq, size_t rows) {
  for (size_t i : {seq, seq + 1}) {
    const char *what = i == seq ? "the slots [T]" : "the positions [T]";
    if (!checkRank(c, i, 1, what) || !checkIndices(c, i, what) ||
        !checkDim(c, rows, 0, i, 0, "row count"))
      return false;
  }
  return true;
}

/// kv_store(state[S, C, Hkv, D], x[T, Hkv, D], seq, pos) -> the state.
bool inferKvStore(RuleCtx &c) {
  if (!checkStateOperand(c, 0, 4, "a state [S, C, Hkv, D]", true) ||
      !checkActivation(c, 1, "the rows") ||
      !checkRank(c, 1, 3, "rows [T, Hkv, D]") ||
      !checkDim(c, 0, 2, 1, 1, "kv head count") ||
      !checkDim(c, 0, 3, 1, 2, "head dim") || !checkRowPlaces(c, 2, 1))
    return false;
  if (c.in[0].isTensor())
    c.out[0] = c.in[0];
  return true;
}

/// attention_cached(q[T, H, D], kc[S, C, Hkv, D], vc[S, C, Hkv, Dv], seq,
/// pos [, gate[T, H, Dv]] [, index i32[T, N]]) {block?} -> f32[T, H, Dv].
bool inferAttentionCached(RuleCtx &c) {
  bool gated = c.boolAttr("gated").value_or(false);
  const Attr *g = c.op.findAttr("gated");
  auto block = c.intAttr("block");
  const Attr *b = c.op.findAttr("block");
  bool sparse = block.value_or(0) > 0;
  size_t want = 5 + (gated ? 1 : 0) + (sparse ? 1 : 0);
  if ((!g || g->value->isLiteral()) && (!b || b->value->isLiteral()) &&
      c.in.size() != want)
    return c.error(fmt::format("expects {} operands (q, k cache, v cache, "
                               "slots, positions{}{}), got {}",
                               want, gated ? ", gate" : "",
                               sparse ? ", block index" : "", c.in.size()));
  if (!checkActivation(c, 0, "q") || !checkRank(c, 0, 3, "queries [T, H, D]") ||
      !checkStateOperand(c, 1, 4, "a key cache [S, C, Hkv, D]", true) ||
      !checkStateOperand(c, 2, 4, "a value cache [S, C, Hkv, Dv]", true) ||
      !checkDim(c, 1, 0, 2, 0, "slot count") ||
      !checkDim(c, 1, 1, 2, 1, "context") ||
      !checkDim(c, 1, 2, 2, 2, "kv head count") ||
      !checkDim(c, 0, 2, 1, 3, "q/k head dim") || !checkRowPlaces(c, 3, 0))
    return false;
  if (c.in[0].isTensor() && c.in[1].isTensor() &&
      !checkDivisible(c, c.in[0].dims[1], c.in[1].dims[2],
                      "query heads must be a multiple of kv heads (GQA)"))
    return false;
  if (gated && c.in.size() > 5 &&
      (!checkRank(c, 5, 3, "a gate [T, H, Dv]") ||
       !checkDim(c, 0, 0, 5, 0, "gate row count") ||
       !checkDim(c, 0, 1, 5, 1, "gate head count") ||
       !checkDim(c, 2, 3, 5, 2, "gate dim")))
    return false;
  size_t index = gated ? 6 : 5;
  if (sparse && c.in.size() > index &&
      (!checkRank(c, index, 2, "a block index [T, N]") ||
       !checkIndices(c, index, "the block index") ||
       !checkDim(c, 0, 0, index, 0, "index row count")))
    return false;
  if (c.in[0].isTensor() && c.in[2].isTensor())
    c.out[0] = Type::tensor(
        f32(), {c.in[0].dims[0], c.in[0].dims[1], c.in[2].dims[3]});
  return true;
}

/// block_mean_cached(cache[S, C, Hkv, D], seq, pos) {block}
/// -> (f32[T, Hkv, D], i32[T]).
bool inferBlockMeanCached(RuleCtx &c) {
  if (!checkStateOperand(c, 0, 4, "a cache [S, C, Hkv, D]", true) ||
      !checkRowPlaces(c, 1, 1))
    return false;
  if (c.in[0].isTensor() && c.in[1].isTensor()) {
    c.out[0] = Type::tensor(
        f32(), {c.in[1].dims[0], c.in[0].dims[2], c.in[0].dims[3]});
    c.out[1] = Type::tensor(i32(), {c.in[1].dims[0]});
  }
  return true;
}

/// qsa_select_cached(q[T, Hi, Di], keys[S, NB, 1, Di], seq, pos)
/// {block, top} -> i32[T, top + 1].
bool inferQsaSelectCached(RuleCtx &c) {
  if (!checkActivation(c, 0, "the queries") ||
      !checkRank(c, 0, 3, "queries [T, Hi, Di]") ||
      !checkStateOperand(c, 1, 4, "block keys [S, NB, 1, Di]") ||
      !checkDim(c, 0, 2, 1, 3, "indexer head dim") || !checkRowPlaces(c, 2, 0))
    return false;
  if (c.in[1].isTensor()) {
    auto one = c.in[1].dims[2].constant();
    if (one && *one != 1)
      return c.error(fmt::format("expects block keys [S, NB, 1, Di] (one "
                                 "key head), got {}",
                                 c.in[1].str()),
                     1);
  }
  auto top = c.intAttr("top");
  if (top && (*top <= 0 || *top > (int64_t(1) << 24)))
    return c.error(
        fmt::format("attribute 'top' must be in 1..2^24, got {}", *top));
  if (c.in[0].isTensor() && top)
    c.out[0] = Type::tensor(i32(), {c.in[0].dims[0], Dim::constant(*top + 1)});
  return true;
}

/// Checks dim \p d of operand \p i is the constant \p want (once both
/// are known).
bool checkDimIs(RuleCtx &c, size_t i, size_t d, std::optional<int64_t> want,
                const char *what) {
  if (!c.in[i].isTensor() || !want)
    return true;
  auto have = c.in[i].dims[d].constant();
  if (have && *have != *want)
    return c.error(fmt::format("expects {} to be {} in {}, got {}", what, *want,
                               c.in[i].str(), *have),
                   int(i));
  return true;
}

/// conv1d_cached(win[S, W, C], x[T, C], w[C, K], seq, pos) {dilation, act}
/// -> (the window, f32[T, C]), W = (K - 1) * dilation.
bool inferConv1dCached(RuleCtx &c) {
  auto act = c.strAttr("act");
  if (act && *act != "none" && *act != "silu")
    return c.error(fmt::format("attribute 'act' must be \"none\" or "
                               "\"silu\", got \"{}\"",
                               *act));
  if (!checkStateOperand(c, 0, 3, "a window [S, W, C]") ||
      !checkConv1d(c, 1, 1) ||
      !checkDim(c, 0, 2, 1, 1, "window channel count") ||
      !checkRowPlaces(c, 3, 1))
    return false;
  if (c.in[2].isTensor())
    if (auto k = c.in[2].dims[1].constant())
      if (!checkDimIs(c, 0, 1, (*k - 1) * c.intAttr("dilation").value_or(1),
                      "the window length (K - 1) * dilation"))
        return false;
  if (c.in[0].isTensor())
    c.out[0] = c.in[0];
  return true;
}

/// gated_delta_cached(st[S, H, Dk, Dv], q, k, v, g, beta, seq, pos)
/// -> (the state, f32[T, H, Dv]).
bool inferGatedDeltaCached(RuleCtx &c) {
  if (!checkStateOperand(c, 0, 4, "a recurrent state [S, H, Dk, Dv]") ||
      !checkGatedDelta(c, 1, 1) || !checkRowPlaces(c, 6, 1) ||
      !checkDim(c, 0, 1, 3, 1, "value head count") ||
      !checkDim(c, 0, 2, 1, 2, "key head dim") ||
      !checkDim(c, 0, 3, 3, 2, "value head dim"))
    return false;
  if (c.in[0].isTensor())
    c.out[0] = c.in[0];
  return true;
}

/// gated_delta_qkv_cached(st[S, H, Dk, Dv], qkv[T, 2 Hk Dk + H Dv], g[T, H],
/// beta[T, H], seq, pos) {hk, eps, ...} -> (the state, f32[T, H, Dv]).
bool inferGatedDeltaQkvCached(RuleCtx &c) {
  if (!checkDeltaHeads(c))
    return false;
  if (!checkStateOperand(c, 0, 4, "a recurrent state [S, H, Dk, Dv]") ||
      !checkActivation(c, 1, "qkv [T, 2 Hk Dk + H Dv]") ||
      !checkRank(c, 1, 2, "qkv [T, 2 Hk Dk + H Dv]") ||
      !checkActivation(c, 2, "g [T, H]") || !checkRank(c, 2, 2, "g [T, H]") ||
      !checkActivation(c, 3, "beta [T, H]") ||
      !checkRank(c, 3, 2, "beta [T, H]") ||
      !checkDim(c, 1, 0, 2, 0, "token count") ||
      !checkDim(c, 1, 0, 3, 0, "token count") ||
      !checkDim(c, 0, 1, 2, 1, "value head count") ||
      !checkDim(c, 0, 1, 3, 1, "value head count") || !checkRowPlaces(c, 4, 1))
    return false;
  const Type &st = c.in[0], &qkv = c.in[1];
  auto hk = c.intAttr("hk");
  if (hk && st.isTensor() && qkv.isTensor() && st.dims[1].isConstant() &&
      st.dims[2].isConstant() && st.dims[3].isConstant() &&
      qkv.dims[1].isConstant()) {
    const int64_t h = *st.dims[1].constant(), dk = *st.dims[2].constant(),
                  dv = *st.dims[3].constant(), cols = *qkv.dims[1].constant();
    if (*hk <= 0 || h % *hk != 0)
      return c.error(fmt::format("value heads {} are not a multiple of key "
                                 "heads {} (attribute 'hk')",
                                 h, *hk));
    const int64_t want = 2 * *hk * dk + h * dv;
    if (cols != want)
      return c.error(fmt::format("expects qkv's columns to be 2 Hk Dk + H Dv "
                                 "= {} (Hk {}, Dk {}, H {}, Dv {}), got {}",
                                 want, *hk, dk, h, dv, cols),
                     1);
  }
  if (st.isTensor()) {
    c.out[0] = st;
    if (qkv.isTensor())
      c.out[1] = Type::tensor(f32(), {qkv.dims[0], st.dims[1], st.dims[3]});
  }
  return true;
}

/// ngram_hash_cached(hist[S, n - 1], tok, seq, pos) {ngram_hash's}
/// -> (the history, i32[T, (n-1)*heads]).
bool inferNgramHashCached(RuleCtx &c) {
  if (!checkStateOperand(c, 0, 2, "a token history [S, n - 1]") ||
      !checkNgramHash(c, 1, 1) || !checkRowPlaces(c, 2, 1))
    return false;
  if (auto n = c.intAttr("n");
      n && !checkDimIs(c, 0, 1, *n - 1, "the history length n - 1"))
    return false;
  if (c.in[0].isTensor())
    c.out[0] = c.in[0];
  return true;
}

} // namespace

bool runOpRule(RuleCtx &ctx) {
  switch (ctx.op.kind) {
#define OP(Id, Mnemonic, MinOperands, MaxOperands, NumResults, Attrs, Rule,    \
           Cost, Class)                                                        \
  case OpKind::Id:                                                             \
    return infer##Rule(ctx);
#include "runtime/format/Ops.def"
  default:
    return true;
  }
}

} // namespace strata::ir
