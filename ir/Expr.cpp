//===- Expr.cpp - compile-time expressions --------------------------------===//
#include "ir/Expr.h"

#include "runtime/format/ModelInfo.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>

namespace strata::ir {

ExprPtr Expr::makeInt(int64_t v, SourceLoc loc) {
  auto e = std::make_shared<Expr>();
  e->kind = ExprKind::Int;
  e->i = v;
  e->loc = loc;
  return e;
}
ExprPtr Expr::makeFloat(double v, SourceLoc loc) {
  auto e = std::make_shared<Expr>();
  e->kind = ExprKind::Float;
  e->f = v;
  e->loc = loc;
  return e;
}
ExprPtr Expr::makeBool(bool v, SourceLoc loc) {
  auto e = std::make_shared<Expr>();
  e->kind = ExprKind::Bool;
  e->b = v;
  e->loc = loc;
  return e;
}
ExprPtr Expr::makeStr(std::string v, SourceLoc loc) {
  auto e = std::make_shared<Expr>();
  e->kind = ExprKind::Str;
  e->s = std::move(v);
  e->loc = loc;
  return e;
}
ExprPtr Expr::makeName(std::string v, SourceLoc loc) {
  auto e = std::make_shared<Expr>();
  e->kind = ExprKind::Name;
  e->s = std::move(v);
  e->loc = loc;
  return e;
}
ExprPtr Expr::makeBinary(std::string op, ExprPtr a, ExprPtr b, SourceLoc loc) {
  auto e = std::make_shared<Expr>();
  e->kind = ExprKind::Binary;
  e->s = std::move(op);
  e->args = {std::move(a), std::move(b)};
  e->loc = loc;
  return e;
}

bool Expr::isLiteral() const {
  switch (kind) {
  case ExprKind::Int:
  case ExprKind::Float:
  case ExprKind::Bool:
  case ExprKind::Str:
    return true;
  case ExprKind::List:
    for (const ExprPtr &a : args)
      if (!a->isLiteral())
        return false;
    return true;
  case ExprKind::Unary:
    // A negative number prints as unary minus on a literal.
    return s == "-" &&
           (args[0]->kind == ExprKind::Int || args[0]->kind == ExprKind::Float);
  default:
    return false;
  }
}

std::string printFloat(double v) {
  if (std::isnan(v))
    return "nan";
  if (std::isinf(v))
    return v < 0 ? "-inf" : "inf";
  char buf[64];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, p);
  if (s.find_first_of(".en") == std::string::npos)
    s += ".0";
  return s;
}

std::string quoteString(const std::string &s) {
  std::string out = "\"";
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\t':
      out += "\\t";
      break;
    case '{':
      out += "\\{";
      break;
    case '}':
      out += "\\}";
      break;
    default:
      if (u < 0x20 || u == 0x7f)
        out += fmt::format("\\x{:02x}", u);
      else
        out += c;
    }
  }
  return out + "\"";
}

static int precedence(const std::string &op) {
  if (op == "||")
    return 1;
  if (op == "&&")
    return 2;
  if (op == "==" || op == "!=" || op == "<" || op == "<=" || op == ">" ||
      op == ">=")
    return 3;
  if (op == "+" || op == "-")
    return 4;
  return 5; // * / %
}

static std::string printPrec(const Expr &e, int parentPrec, bool rightSide);

std::string printExpr(const Expr &e) { return printPrec(e, 0, false); }

static std::string printPrec(const Expr &e, int parentPrec, bool rightSide) {
  switch (e.kind) {
  case ExprKind::Int:
    return fmt::format("{}", e.i);
  case ExprKind::Float:
    return printFloat(e.f);
  case ExprKind::Bool:
    return e.b ? "true" : "false";
  case ExprKind::Str:
    return quoteString(e.s);
  case ExprKind::Template: {
    std::string out = "\"";
    for (const ExprPtr &piece : e.args) {
      if (piece->kind == ExprKind::Str) {
        std::string q = quoteString(piece->s);
        out += q.substr(1, q.size() - 2);
      } else {
        out += "{" + printExpr(*piece) + "}";
      }
    }
    return out + "\"";
  }
  case ExprKind::List: {
    std::string out = "[";
    for (size_t k = 0; k < e.args.size(); ++k)
      out += (k ? ", " : "") + printExpr(*e.args[k]);
    return out + "]";
  }
  case ExprKind::Name:
    return e.s;
  case ExprKind::Builtin: {
    std::string out = e.s + "(";
    for (size_t k = 0; k < e.args.size(); ++k)
      out += (k ? ", " : "") + printExpr(*e.args[k]);
    return out + ")";
  }
  case ExprKind::Unary:
    return e.s + printPrec(*e.args[0], 6, false);
  case ExprKind::Binary: {
    int p = precedence(e.s);
    std::string body = printPrec(*e.args[0], p, false) + " " + e.s + " " +
                       printPrec(*e.args[1], p, true);
    bool paren = p < parentPrec || (p == parentPrec && rightSide) ||
                 (p == 3 && parentPrec == 3);
    return paren ? "(" + body + ")" : body;
  }
  case ExprKind::Index:
    return printPrec(*e.args[0], 7, false) + "[" + printExpr(*e.args[1]) + "]";
  }
  return "?";
}

Const Const::ofInt(int64_t v) {
  Const c;
  c.kind = Kind::Int;
  c.i = v;
  return c;
}
Const Const::ofFloat(double v) {
  Const c;
  c.kind = Kind::Float;
  c.f = v;
  return c;
}
Const Const::ofBool(bool v) {
  Const c;
  c.kind = Kind::Bool;
  c.b = v;
  return c;
}
Const Const::ofStr(std::string v) {
  Const c;
  c.kind = Kind::Str;
  c.s = std::move(v);
  return c;
}

ExprPtr Const::toExpr(SourceLoc loc) const {
  switch (kind) {
  case Kind::Int:
    return Expr::makeInt(i, loc);
  case Kind::Float:
    return Expr::makeFloat(f, loc);
  case Kind::Bool:
    return Expr::makeBool(b, loc);
  case Kind::Str:
    return Expr::makeStr(s, loc);
  case Kind::List: {
    auto e = std::make_shared<Expr>();
    e->kind = ExprKind::List;
    e->loc = loc;
    for (const Const &c : list)
      e->args.push_back(c.toExpr(loc));
    return e;
  }
  }
  return Expr::makeInt(0, loc);
}

std::string Const::kindName() const {
  switch (kind) {
  case Kind::Int:
    return "int";
  case Kind::Float:
    return "float";
  case Kind::Bool:
    return "bool";
  case Kind::Str:
    return "string";
  case Kind::List:
    return "list";
  }
  return "?";
}

namespace {

/// Converts a metadata value to a compile-time value.
Const fromMeta(const format::MetaValue &v) {
  using format::GgufValueType;
  if (v.type == GgufValueType::Bool)
    return Const::ofBool(v.b);
  if (v.type == GgufValueType::String)
    return Const::ofStr(v.s);
  if (v.isFloat())
    return Const::ofFloat(v.f);
  if (v.type == GgufValueType::Array) {
    Const c;
    c.kind = Const::Kind::List;
    for (const format::MetaValue &e : v.array)
      c.list.push_back(fromMeta(e));
    return c;
  }
  if (auto x = v.asInt())
    return Const::ofInt(*x);
  // A u64 above INT64_MAX: keep it as a float rather than wrap.
  return Const::ofFloat(static_cast<double>(v.u));
}

/// False if \p v is, or holds, a NaN or an infinity.
bool isFinite(const format::MetaValue &v) {
  if (v.isFloat())
    return std::isfinite(v.f);
  for (const format::MetaValue &e : v.array)
    if (!isFinite(e))
      return false;
  return true;
}

class Evaluator {
public:
  Evaluator(const EvalEnv &env, DiagnosticEngine &diag)
      : env_(env), diag_(diag) {}

  std::optional<Const> eval(const Expr &e, int depth = 0) {
    if (depth > 256)
      return fail(e, "expression nested too deeply");
    switch (e.kind) {
    case ExprKind::Int:
      return Const::ofInt(e.i);
    case ExprKind::Float:
      return Const::ofFloat(e.f);
    case ExprKind::Bool:
      return Const::ofBool(e.b);
    case ExprKind::Str:
      return Const::ofStr(e.s);
    case ExprKind::Template: {
      std::string out;
      for (const ExprPtr &piece : e.args) {
        if (piece->kind == ExprKind::Str) {
          out += piece->s;
          continue;
        }
        auto v = eval(*piece, depth + 1);
        if (!v)
          return std::nullopt;
        if (v->kind == Const::Kind::Int)
          out += fmt::format("{}", v->i);
        else if (v->kind == Const::Kind::Str)
          out += v->s;
        else
          return fail(*piece, fmt::format("a name template hole must be an "
                                          "int or string, not {}",
                                          v->kindName()));
      }
      return Const::ofStr(std::move(out));
    }
    case ExprKind::List: {
      Const c;
      c.kind = Const::Kind::List;
      for (const ExprPtr &a : e.args) {
        auto v = eval(*a, depth + 1);
        if (!v)
          return std::nullopt;
        c.list.push_back(std::move(*v));
      }
      return c;
    }
    case ExprKind::Name: {
      if (env_.names) {
        auto it = env_.names->find(e.s);
        if (it != env_.names->end())
          return it->second;
      }
      return fail(e, fmt::format("unknown name '{}'", e.s));
    }
    case ExprKind::Builtin:
      return evalBuiltin(e, depth);
    case ExprKind::Unary: {
      auto v = eval(*e.args[0], depth + 1);
      if (!v)
        return std::nullopt;
      if (e.s == "!") {
        if (v->kind != Const::Kind::Bool)
          return fail(e,
                      fmt::format("'!' needs a bool, not {}", v->kindName()));
        return Const::ofBool(!v->b);
      }
      if (v->kind == Const::Kind::Int) {
        if (v->i == INT64_MIN)
          return fail(e, "integer overflow in negation");
        return Const::ofInt(-v->i);
      }
      if (v->kind == Const::Kind::Float)
        return Const::ofFloat(-v->f);
      return fail(e, fmt::format("'-' needs a number, not {}", v->kindName()));
    }
    case ExprKind::Binary:
      return evalBinary(e, depth);
    case ExprKind::Index: {
      auto base = eval(*e.args[0], depth + 1);
      auto idx = eval(*e.args[1], depth + 1);
      if (!base || !idx)
        return std::nullopt;
      if (base->kind != Const::Kind::List)
        return fail(e, fmt::format("cannot index a {}", base->kindName()));
      if (idx->kind != Const::Kind::Int)
        return fail(*e.args[1], "an index must be an int");
      if (idx->i < 0 || idx->i >= static_cast<int64_t>(base->list.size()))
        return fail(*e.args[1],
                    fmt::format("index {} out of range for a list of {}",
                                idx->i, base->list.size()));
      return base->list[idx->i];
    }
    }
    return fail(e, "bad expression");
  }

private:
  std::optional<Const> fail(const Expr &e, const std::string &msg) {
    diag_.error(e.loc, msg);
    return std::nullopt;
  }

  std::optional<Const> evalBuiltin(const Expr &e, int depth) {
    // Generation: what strata-compile --max-context / --max-batch bound (0
    // and false without them).
    if (e.s == "max_context")
      return Const::ofInt(env_.maxContext);
    if (e.s == "max_batch")
      return Const::ofInt(env_.maxBatch);
    if (e.s == "generation")
      return Const::ofBool(env_.maxContext > 0);
    if (e.s == "meta" || e.s == "has_meta") {
      auto key = eval(*e.args[0], depth + 1);
      if (!key)
        return std::nullopt;
      if (key->kind != Const::Kind::Str)
        return fail(*e.args[0], fmt::format("{}() key must be a string", e.s));
      if (!env_.model)
        return fail(e, fmt::format("{}(\"{}\") needs model metadata (give "
                                   "a GGUF or key/value file)",
                                   e.s, key->s));
      std::string full = env_.arch.empty() ? key->s : env_.arch + "." + key->s;
      const format::MetaValue *v = env_.model->findMeta(full);
      const std::string *found = &full;
      if (!v) {
        v = env_.model->findMeta(key->s);
        found = &key->s;
      }
      if (env_.baked)
        (*env_.baked)[v ? *found : full] =
            v ? v->toString(SIZE_MAX) : kMetaAbsent;
      if (e.s == "has_meta")
        return Const::ofBool(v != nullptr);
      // A NaN or inf would otherwise surface only as a plan that does not
      // validate; name the key and the file here.
      if (v && !isFinite(*v))
        return fail(e, fmt::format("metadata key '{}' in {} is not a finite "
                                   "number ({})",
                                   *found, env_.model->source, v->toString()));
      if (v)
        return fromMeta(*v);
      if (e.args.size() > 1)
        return eval(*e.args[1], depth + 1);
      return fail(e, fmt::format("missing metadata key '{}' in {} (and no "
                                 "default given)",
                                 full, env_.model->source));
    }
    if (e.s == "has_weight") {
      auto name = eval(*e.args[0], depth + 1);
      if (!name)
        return std::nullopt;
      if (name->kind != Const::Kind::Str)
        return fail(*e.args[0], "has_weight() needs a string");
      if (!env_.model)
        return fail(e, "has_weight() needs model tensor infos (give a GGUF "
                       "or key/value file)");
      return Const::ofBool(env_.model->findTensor(name->s) != nullptr);
    }
    if (e.s == "dim") {
      // dim("name", i): extent i of a tensor in IR order (slowest first).
      auto name = eval(*e.args[0], depth + 1);
      auto axis = eval(*e.args[1], depth + 1);
      if (!name || !axis)
        return std::nullopt;
      if (name->kind != Const::Kind::Str || axis->kind != Const::Kind::Int)
        return fail(e, "dim() needs a tensor name and an int axis");
      if (!env_.model)
        return fail(e, "dim() needs model tensor infos (give a GGUF or "
                       "key/value file)");
      const format::TensorInfo *t = env_.model->findTensor(name->s);
      if (!t)
        return fail(e, fmt::format("dim(): tensor '{}' not found in {}",
                                   name->s, env_.model->source));
      int64_t rank = static_cast<int64_t>(t->dims.size());
      if (axis->i < 0 || axis->i >= rank)
        return fail(*e.args[1], fmt::format("dim(): axis {} out of range for "
                                            "'{}' of rank {}",
                                            axis->i, name->s, rank));
      return Const::ofInt(static_cast<int64_t>(t->dims[rank - 1 - axis->i]));
    }
    if (e.s == "sqrt" || e.s == "float") {
      auto a = eval(*e.args[0], depth + 1);
      if (!a)
        return std::nullopt;
      if (a->kind != Const::Kind::Int && a->kind != Const::Kind::Float)
        return fail(
            e, fmt::format("{}() needs a number, not {}", e.s, a->kindName()));
      double x = a->kind == Const::Kind::Int ? static_cast<double>(a->i) : a->f;
      if (e.s == "sqrt" && x < 0)
        return fail(
            e, fmt::format("sqrt() of a negative number ({})", printFloat(x)));
      return Const::ofFloat(e.s == "sqrt" ? std::sqrt(x) : x);
    }
    // min / max
    auto a = eval(*e.args[0], depth + 1);
    auto b = eval(*e.args[1], depth + 1);
    if (!a || !b)
      return std::nullopt;
    bool isMin = e.s == "min";
    if (a->kind == Const::Kind::Int && b->kind == Const::Kind::Int)
      return Const::ofInt(isMin ? std::min(a->i, b->i) : std::max(a->i, b->i));
    auto num = [](const Const &c) -> std::optional<double> {
      if (c.kind == Const::Kind::Int)
        return static_cast<double>(c.i);
      if (c.kind == Const::Kind::Float)
        return c.f;
      return std::nullopt;
    };
    auto x = num(*a), y = num(*b);
    if (!x || !y)
      return fail(e, fmt::format("{}() needs numbers", e.s));
    return Const::ofFloat(isMin ? std::min(*x, *y) : std::max(*x, *y));
  }

  std::optional<Const> evalBinary(const Expr &e, int depth) {
    const std::string &op = e.s;
    auto a = eval(*e.args[0], depth + 1);
    if (!a)
      return std::nullopt;
    // Short-circuit so `has_weight(x) && meta(...)` reads meta only if needed.
    if (op == "&&" || op == "||") {
      if (a->kind != Const::Kind::Bool)
        return fail(*e.args[0],
                    fmt::format("'{}' needs bools, not {}", op, a->kindName()));
      if ((op == "&&" && !a->b) || (op == "||" && a->b))
        return a;
      auto b = eval(*e.args[1], depth + 1);
      if (!b)
        return std::nullopt;
      if (b->kind != Const::Kind::Bool)
        return fail(*e.args[1],
                    fmt::format("'{}' needs bools, not {}", op, b->kindName()));
      return b;
    }
    auto b = eval(*e.args[1], depth + 1);
    if (!b)
      return std::nullopt;
    using K = Const::Kind;
    if (op == "==" || op == "!=") {
      bool eq;
      if (a->kind == K::Str && b->kind == K::Str)
        eq = a->s == b->s;
      else if (a->kind == K::Bool && b->kind == K::Bool)
        eq = a->b == b->b;
      else if (a->kind == K::Int && b->kind == K::Int)
        eq = a->i == b->i;
      else if ((a->kind == K::Int || a->kind == K::Float) &&
               (b->kind == K::Int || b->kind == K::Float))
        eq = toD(*a) == toD(*b);
      else
        return fail(e, fmt::format("cannot compare {} with {}", a->kindName(),
                                   b->kindName()));
      return Const::ofBool(op == "==" ? eq : !eq);
    }
    bool aNum = a->kind == K::Int || a->kind == K::Float;
    bool bNum = b->kind == K::Int || b->kind == K::Float;
    if (!aNum || !bNum)
      return fail(e, fmt::format("'{}' needs numbers, not {} and {}", op,
                                 a->kindName(), b->kindName()));
    if (op == "<" || op == "<=" || op == ">" || op == ">=") {
      bool r;
      if (a->kind == K::Int && b->kind == K::Int)
        r = op == "<"    ? a->i < b->i
            : op == "<=" ? a->i <= b->i
            : op == ">"  ? a->i > b->i
                         : a->i >= b->i;
      else
        r = op == "<"    ? toD(*a) < toD(*b)
            : op == "<=" ? toD(*a) <= toD(*b)
            : op == ">"  ? toD(*a) > toD(*b)
                         : toD(*a) >= toD(*b);
      return Const::ofBool(r);
    }
    if (a->kind == K::Int && b->kind == K::Int) {
      int64_t x = a->i, y = b->i, r = 0;
      if (op == "+") {
        if (__builtin_add_overflow(x, y, &r))
          return fail(e, "integer overflow");
      } else if (op == "-") {
        if (__builtin_sub_overflow(x, y, &r))
          return fail(e, "integer overflow");
      } else if (op == "*") {
        if (__builtin_mul_overflow(x, y, &r))
          return fail(e, "integer overflow");
      } else {
        if (y == 0)
          return fail(e, fmt::format("{} by zero",
                                     op == "/" ? "division" : "remainder"));
        if (x == INT64_MIN && y == -1)
          return fail(e, "integer overflow");
        r = op == "/" ? x / y : x % y;
      }
      return Const::ofInt(r);
    }
    if (op == "%")
      return fail(e, "'%' needs integers");
    double x = toD(*a), y = toD(*b);
    double r = op == "+"   ? x + y
               : op == "-" ? x - y
               : op == "*" ? x * y
                           : x / y;
    return Const::ofFloat(r);
  }

  static double toD(const Const &c) {
    return c.kind == Const::Kind::Int ? static_cast<double>(c.i) : c.f;
  }

  const EvalEnv &env_;
  DiagnosticEngine &diag_;
};

} // namespace

std::optional<Const> evalExpr(const Expr &e, const EvalEnv &env,
                              DiagnosticEngine &diag) {
  return Evaluator(env, diag).eval(e);
}

void forEachName(const Expr &e, const std::function<void(const Expr &)> &fn) {
  if (e.kind == ExprKind::Name)
    fn(e);
  for (const ExprPtr &a : e.args)
    forEachName(*a, fn);
}

} // namespace strata::ir
