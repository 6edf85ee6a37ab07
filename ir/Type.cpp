//===- Type.cpp - element types, symbolic dims, tensor types --------------===//
#include "ir/Type.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>

namespace strata::ir {

namespace {
constexpr const char *kOverflowAtom = "(overflow)";
} // namespace

std::optional<ElemType> ElemType::parse(std::string_view s) {
  if (auto d = format::planDTypeFromName(s))
    return ElemType::of(*d);
  // Block formats: every loadable GGUF type that is not also an activation
  // dtype (f32/f16/bf16/i32 are spelled as dtypes).
  if (auto g = format::ggmlTypeFromIrName(s); g && g->loadable)
    return ElemType::ofBlock(g->type);
  return std::nullopt;
}

ElemType ElemType::fromGgml(format::GgmlType g) {
  if (auto d = format::dtypeOfGgml(g))
    return of(*d);
  return ofBlock(g);
}

std::string ElemType::str() const {
  if (isBlock)
    return format::ggmlTypeInfo(block).irName;
  return format::planDTypeName(dtype);
}

Dim Dim::constant(int64_t v) {
  Dim d;
  d.add({}, v);
  return d;
}

Dim Dim::symbol(const std::string &name) {
  Dim d;
  d.add({name}, 1);
  return d;
}

void Dim::add(const Monomial &m, int64_t c) {
  int64_t &slot = terms_[m];
  if (__builtin_add_overflow(slot, c, &slot)) {
    terms_.clear();
    terms_[{kOverflowAtom}] = 1;
    return;
  }
  if (slot == 0)
    terms_.erase(m);
}

bool Dim::isPolynomial() const {
  for (const auto &[m, c] : terms_)
    for (const std::string &sym : m)
      if (!sym.empty() && sym[0] == '(')
        return false;
  return true;
}

std::optional<std::pair<int64_t, int64_t>>
Dim::linearIn(const std::string &sym) const {
  int64_t coef = 0, c = 0;
  for (const auto &[m, k] : terms_) {
    if (m.empty())
      c = k;
    else if (m.size() == 1 && m[0] == sym)
      coef = k;
    else
      return std::nullopt;
  }
  return std::make_pair(coef, c);
}

/// The operands of a floor-division atom's expression, or nullptr.
static const Expr *divisionOf(const ExprPtr &e) {
  return e && e->kind == ExprKind::Binary && e->s == "/" ? e.get() : nullptr;
}

std::optional<AffineDim> Dim::affineIn(const std::string &sym) const {
  if (auto lin = linearIn(sym))
    return AffineDim{lin->first, 1, lin->second};
  // One floor-division atom with coefficient 1, plus a constant.
  const Expr *div = nullptr;
  int64_t c = 0;
  for (const auto &[m, k] : terms_) {
    if (m.empty()) {
      c = k;
      continue;
    }
    auto a = m.size() == 1 ? atoms_.find(m[0]) : atoms_.end();
    if (k != 1 || div || a == atoms_.end() || !divisionOf(a->second))
      return std::nullopt;
    div = a->second.get();
  }
  if (!div)
    return std::nullopt;
  auto q = fromExpr(div->args[1]).constant();
  auto n = fromExpr(div->args[0]).linearIn(sym);
  // floor((a*T + q*k) / q) = floor(a*T / q) + k.
  if (!q || *q <= 0 || !n || n->second % *q != 0)
    return std::nullopt;
  int64_t constant;
  if (__builtin_add_overflow(c, n->second / *q, &constant))
    return std::nullopt;
  return AffineDim{n->first, *q, constant};
}

Dim Dim::floorDiv(const Dim &n, int64_t d) {
  assert(d > 0 && "floorDiv by a non-positive constant");
  if (auto c = n.constant()) {
    int64_t q = *c / d;
    return constant(q * d > *c ? q - 1 : q);
  }
  if (auto q = n.divExact(d))
    return *q;
  ExprPtr e = Expr::makeBinary("/", n.toExpr(), Expr::makeInt(d));
  std::string name = "(" + printExpr(*e) + ")";
  Dim r = symbol(name);
  r.atoms_.emplace(name, e);
  return r;
}

ExprPtr Dim::toExpr() const {
  ExprPtr sum;
  auto term = [&](const Monomial &m, int64_t c) {
    ExprPtr t;
    uint64_t mag = c < 0 ? 0 - static_cast<uint64_t>(c) : c;
    if (m.empty() || mag != 1)
      t = Expr::makeInt(static_cast<int64_t>(mag));
    for (const std::string &sym : m) {
      auto a = atoms_.find(sym);
      ExprPtr f = a != atoms_.end() ? a->second : Expr::makeName(sym);
      t = t ? Expr::makeBinary("*", t, f) : f;
    }
    if (!sum)
      sum = c < 0 ? Expr::makeBinary("-", Expr::makeInt(0), t) : t;
    else
      sum = Expr::makeBinary(c < 0 ? "-" : "+", sum, t);
  };
  for (const auto &[m, c] : terms_)
    if (!m.empty())
      term(m, c);
  if (auto it = terms_.find({}); it != terms_.end())
    term(it->first, it->second);
  return sum ? sum : Expr::makeInt(0);
}

bool Dim::overflowed() const { return terms_.count({kOverflowAtom}) != 0; }

static Dim atomOf(const ExprPtr &e) {
  Dim d = Dim::symbol("(" + printExpr(*e) + ")");
  return d;
}

Dim Dim::fromExpr(const ExprPtr &e) {
  switch (e->kind) {
  case ExprKind::Int:
    return constant(e->i);
  case ExprKind::Name:
    return symbol(e->s);
  case ExprKind::Unary:
    if (e->s == "-")
      return constant(0) - fromExpr(e->args[0]);
    break;
  case ExprKind::Binary: {
    const std::string &op = e->s;
    if (op == "+" || op == "-" || op == "*") {
      Dim a = fromExpr(e->args[0]), b = fromExpr(e->args[1]);
      return op == "+" ? a + b : op == "-" ? a - b : a * b;
    }
    if (op == "/") {
      Dim a = fromExpr(e->args[0]), b = fromExpr(e->args[1]);
      if (auto c = b.constant(); c && *c != 0)
        if (auto q = a.divExact(*c))
          return *q;
    }
    break;
  }
  default:
    break;
  }
  Dim d = atomOf(e);
  d.atoms_.emplace("(" + printExpr(*e) + ")", e);
  return d;
}

bool Dim::isConstant() const {
  return terms_.empty() ||
         (terms_.size() == 1 && terms_.begin()->first.empty());
}

std::optional<int64_t> Dim::constant() const {
  if (!isConstant())
    return std::nullopt;
  return terms_.empty() ? 0 : terms_.begin()->second;
}

bool Dim::isBound() const {
  for (const auto &[m, c] : terms_)
    for (const std::string &s : m) {
      if (s == "T")
        continue;
      // A floor division of a bound dim by a constant is bound.
      auto a = atoms_.find(s);
      const Expr *div = a == atoms_.end() ? nullptr : divisionOf(a->second);
      if (!div || !fromExpr(div->args[0]).isBound() ||
          !fromExpr(div->args[1]).isConstant())
        return false;
    }
  return true;
}

Dim Dim::operator+(const Dim &o) const {
  Dim r = *this;
  r.atoms_.insert(o.atoms_.begin(), o.atoms_.end());
  for (const auto &[m, c] : o.terms_)
    r.add(m, c);
  return r;
}

Dim Dim::operator-(const Dim &o) const {
  Dim r = *this;
  r.atoms_.insert(o.atoms_.begin(), o.atoms_.end());
  for (const auto &[m, c] : o.terms_) {
    if (c == INT64_MIN)
      return symbol(kOverflowAtom);
    r.add(m, -c);
  }
  return r;
}

Dim Dim::operator*(const Dim &o) const {
  Dim r;
  r.atoms_ = atoms_;
  r.atoms_.insert(o.atoms_.begin(), o.atoms_.end());
  for (const auto &[m1, c1] : terms_)
    for (const auto &[m2, c2] : o.terms_) {
      Monomial m = m1;
      m.insert(m.end(), m2.begin(), m2.end());
      std::sort(m.begin(), m.end());
      int64_t c;
      if (__builtin_mul_overflow(c1, c2, &c))
        return symbol(kOverflowAtom);
      r.add(m, c);
    }
  return r;
}

std::optional<Dim> Dim::divExact(int64_t d) const {
  if (d == 0)
    return std::nullopt;
  Dim r;
  r.atoms_ = atoms_;
  for (const auto &[m, c] : terms_) {
    if (c % d != 0 || (c == INT64_MIN && d == -1))
      return std::nullopt;
    r.terms_[m] = c / d;
  }
  return r;
}

std::string Dim::str() const {
  if (terms_.empty())
    return "0";
  std::string out;
  auto term = [](const Monomial &m, int64_t c) {
    uint64_t mag = c < 0 ? 0 - static_cast<uint64_t>(c) : c;
    std::string s;
    if (m.empty() || mag != 1)
      s = fmt::format("{}", mag);
    for (const std::string &sym : m)
      s += (s.empty() ? "" : "*") + sym;
    return s;
  };
  bool first = true;
  auto emit = [&](const Monomial &m, int64_t c) {
    if (first)
      out += (c < 0 ? "-" : "") + term(m, c);
    else
      out += (c < 0 ? " - " : " + ") + term(m, c);
    first = false;
  };
  for (const auto &[m, c] : terms_)
    if (!m.empty())
      emit(m, c);
  if (auto it = terms_.find({}); it != terms_.end())
    emit(it->first, it->second);
  return out;
}

std::optional<Dim> Dim::substitute(const std::map<std::string, Const> &names,
                                   const EvalEnv &env, DiagnosticEngine &diag,
                                   SourceLoc loc) const {
  if (overflowed()) {
    diag.error(loc, "dimension overflows a 64-bit integer");
    return std::nullopt;
  }
  Dim result = constant(0);
  for (const auto &[m, c] : terms_) {
    Dim t = constant(c);
    for (const std::string &sym : m) {
      if (sym == "T") {
        t = t * symbol("T");
        continue;
      }
      std::optional<Const> v;
      auto a = atoms_.find(sym);
      if (const Expr *div =
              a == atoms_.end() ? nullptr : divisionOf(a->second)) {
        // A division substitutes both sides; it stays symbolic in T.
        auto n = fromExpr(div->args[0]).substitute(names, env, diag, loc);
        if (!n)
          return std::nullopt;
        auto d = fromExpr(div->args[1]).substitute(names, env, diag, loc);
        if (!d)
          return std::nullopt;
        if (auto q = d->constant(); q && *q > 0) {
          t = t * floorDiv(*n, *q);
          continue;
        } else if (q) {
          diag.error(loc, fmt::format("dimension '{}' divides by {}", sym, *q));
          return std::nullopt;
        }
      }
      if (a != atoms_.end()) {
        v = evalExpr(*a->second, env, diag);
        if (!v)
          return std::nullopt;
      } else if (auto n = names.find(sym); n != names.end()) {
        v = n->second;
      } else {
        diag.error(loc, fmt::format("unknown dimension symbol '{}'", sym));
        return std::nullopt;
      }
      if (v->kind != Const::Kind::Int) {
        diag.error(loc, fmt::format("dimension '{}' is a {}, not an int", sym,
                                    v->kindName()));
        return std::nullopt;
      }
      t = t * constant(v->i);
    }
    result = result + t;
  }
  if (result.overflowed()) {
    diag.error(loc, "dimension overflows a 64-bit integer");
    return std::nullopt;
  }
  return result;
}

std::string Type::str() const {
  switch (kind) {
  case Kind::Unknown:
    return "?";
  case Kind::Int:
    return "int";
  case Kind::Float:
    return "float";
  case Kind::Tensor:
    return elem.str() + printDims(dims);
  }
  return "?";
}

std::string printDims(const std::vector<Dim> &dims) {
  std::string out = "[";
  for (size_t k = 0; k < dims.size(); ++k)
    out += (k ? ", " : "") + dims[k].str();
  return out + "]";
}

} // namespace strata::ir
