//===- Type.cpp - element types, symbolic dims, tensor types --------------===//
#include "ir/Type.h"

#include <fmt/format.h>

#include <algorithm>

namespace strata::ir {

namespace {
struct DTypeInfo {
  DType id;
  const char *spelling;
};
constexpr DTypeInfo kDTypes[] = {
#define DTYPE(Id, Spelling, Bytes) {DType::Id, Spelling},
#include "ir/Types.def"
};
constexpr const char *kOverflowAtom = "(overflow)";
} // namespace

std::optional<ElemType> ElemType::parse(std::string_view s) {
  for (const DTypeInfo &d : kDTypes)
    if (s == d.spelling)
      return ElemType::of(d.id);
  // Block formats: every loadable GGUF type that is not also an activation
  // dtype (f32/f16/bf16/i32 are spelled as dtypes).
  if (auto g = format::ggmlTypeFromIrName(s); g && g->loadable)
    return ElemType::ofBlock(g->type);
  return std::nullopt;
}

ElemType ElemType::fromGgml(format::GgmlType g) {
  switch (g) {
  case format::GgmlType::F32:
    return of(DType::F32);
  case format::GgmlType::F16:
    return of(DType::F16);
  case format::GgmlType::BF16:
    return of(DType::BF16);
  case format::GgmlType::I32:
    return of(DType::I32);
  default:
    return ofBlock(g);
  }
}

std::string ElemType::str() const {
  if (isBlock)
    return format::ggmlTypeInfo(block).irName;
  for (const DTypeInfo &d : kDTypes)
    if (d.id == dtype)
      return d.spelling;
  return "?";
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
    for (const std::string &s : m)
      if (s != "T")
        return false;
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
      if (auto a = atoms_.find(sym); a != atoms_.end()) {
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
  result.atoms_.clear();
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
