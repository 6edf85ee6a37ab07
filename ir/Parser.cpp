//===- Parser.cpp - the strata text format --------------------------------===//
//
// Recursive descent with one token of lookahead. On an error inside a
// statement the parser skips to the next line at the same brace depth and
// continues, so one run reports several errors.
//
//===----------------------------------------------------------------------===//
#include "ir/Parser.h"

#include "ir/Lexer.h"

#include <fmt/format.h>

#include <charconv>
#include <map>

namespace strata::ir {

namespace {

constexpr int kMaxBlockDepth = 32;
constexpr int kMaxExprDepth = 128;

class Parser {
public:
  Parser(const SourceMgr &sm, uint32_t buffer, DiagnosticEngine &diag)
      : diag_(diag), mainLexer_(sm.text(buffer), buffer, diag) {
    advance();
  }

  std::unique_ptr<Module> parse();

private:
  // --- tokens ---------------------------------------------------------------
  void advance() {
    prevLine_ = tok_.loc.line;
    tok_ = lexer_->next();
    // The lexer has reported the bad token; errors the parser would raise
    // because of it are noise until the next statement starts.
    if (tok_.is(Tok::Error))
      suppress_ = true;
  }
  bool consumeIf(Tok k) {
    if (!tok_.is(k))
      return false;
    advance();
    return true;
  }
  bool expect(Tok k, std::string_view what) {
    if (consumeIf(k))
      return true;
    return errorHere(fmt::format("expected {} {}, found {}", tokName(k), what,
                                 describe(tok_)));
  }
  bool expectIdent(std::string_view word, std::string_view what) {
    if (tok_.isIdent(word)) {
      advance();
      return true;
    }
    return errorHere(
        fmt::format("expected '{}' {}, found {}", word, what, describe(tok_)));
  }
  static std::string describe(const Token &t) {
    switch (t.kind) {
    case Tok::Eof:
      return "end of file";
    case Tok::Ident:
    case Tok::Int:
    case Tok::Float:
      return fmt::format("'{}'", t.text.substr(0, 40));
    case Tok::ValueName:
      return fmt::format("'%{}'", t.text.substr(0, 40));
    case Tok::FuncName:
      return fmt::format("'@{}'", t.text.substr(0, 40));
    case Tok::String:
      return "a string";
    default:
      return tokName(t.kind);
    }
  }
  bool errorAt(SourceLoc loc, const std::string &msg) {
    if (!suppress_ && !tok_.is(Tok::Error))
      diag_.error(loc, msg);
    return false;
  }
  bool errorHere(const std::string &msg) { return errorAt(tok_.loc, msg); }

  /// Skips the rest of a broken statement: up to the first token on a later
  /// line at brace depth 0, or a '}' closing the current block.
  void recover(uint32_t errorLine) {
    int depth = 0;
    while (!tok_.is(Tok::Eof)) {
      if (depth == 0 && tok_.loc.line > errorLine)
        return;
      if (tok_.is(Tok::LBrace))
        ++depth;
      if (tok_.is(Tok::RBrace)) {
        if (depth == 0)
          return;
        --depth;
      }
      advance();
    }
  }

  // --- expressions ----------------------------------------------------------
  ExprPtr parseExpr(int depth = 0);
  ExprPtr parseBinary(int prec, int depth);
  ExprPtr parseUnary(int depth);
  ExprPtr parsePrimary(int depth);
  ExprPtr parseStringExpr(const Token &t, bool allowHoles);

  // --- types ----------------------------------------------------------------
  std::optional<std::vector<Dim>> parseDimList();
  std::optional<Type> parseType(bool allowScalar);
  bool parseTypeList(std::vector<std::optional<Type>> &out);

  // --- functions and statements ---------------------------------------------
  bool parseLet(Module &m);
  bool parseFunc(Module &m);
  bool parseBlock(Block &block, int depth, bool isFuncBody);
  /// `%a = operand, ...) { body }` of repeat and fused: the operands go to
  /// \p op, the body (its arguments bound to them) to \p regions.
  bool parseBoundRegion(Operation &op, int depth, const char *argWhat,
                        const char *closeWhat, const char *bodyWhat,
                        bool allowEmpty,
                        std::vector<std::unique_ptr<Block>> &regions);
  bool parseStatement(Block &block, int depth);
  bool parseOperand(Operand &out, bool allowScalar);
  std::shared_ptr<WeightRef> parseWeight();
  bool parseOperandList(Operation &op, bool allowScalar, std::string_view what);
  bool parseAttrs(Operation &op);
  bool parseAttrList(Operation &op);
  bool parseOffsets(std::vector<std::optional<uint64_t>> &out,
                    bool many = true);
  Value *lookupValue(const Token &t);
  bool defineValue(Value *v);

  DiagnosticEngine &diag_;
  Lexer mainLexer_;
  Lexer *lexer_ = &mainLexer_; ///< switched to a sub-lexer for template holes
  Token tok_;
  uint32_t prevLine_ = 0;
  bool suppress_ = false; ///< a lexer error is pending in this statement
  Func *func_ = nullptr;
  std::vector<std::map<std::string, Value *>> scopes_;
};

// --- expressions -------------------------------------------------------------

static int binaryPrec(Tok k) {
  switch (k) {
  case Tok::OrOr:
    return 1;
  case Tok::AndAnd:
    return 2;
  case Tok::EqEq:
  case Tok::NotEq:
  case Tok::Less:
  case Tok::LessEq:
  case Tok::Greater:
  case Tok::GreaterEq:
    return 3;
  case Tok::Plus:
  case Tok::Minus:
    return 4;
  case Tok::Star:
  case Tok::Slash:
  case Tok::Percent:
    return 5;
  default:
    return 0;
  }
}

ExprPtr Parser::parseExpr(int depth) { return parseBinary(1, depth); }

ExprPtr Parser::parseBinary(int minPrec, int depth) {
  if (depth > kMaxExprDepth) {
    errorHere("expression nested too deeply");
    return nullptr;
  }
  ExprPtr lhs = parseUnary(depth + 1);
  if (!lhs)
    return nullptr;
  while (true) {
    int prec = binaryPrec(tok_.kind);
    if (prec == 0 || prec < minPrec)
      return lhs;
    Token op = tok_;
    advance();
    // Comparisons do not chain: parse the right side one level tighter.
    ExprPtr rhs = parseBinary(prec + 1, depth + 1);
    if (!rhs)
      return nullptr;
    lhs = Expr::makeBinary(std::string(op.text), lhs, rhs, op.loc);
    if (prec == 3 && binaryPrec(tok_.kind) == 3) {
      errorHere("comparisons do not chain; add parentheses");
      return nullptr;
    }
  }
}

ExprPtr Parser::parseUnary(int depth) {
  if (depth > kMaxExprDepth) {
    errorHere("expression nested too deeply");
    return nullptr;
  }
  if (tok_.is(Tok::Minus) || tok_.is(Tok::Bang)) {
    Token op = tok_;
    advance();
    ExprPtr operand = parseUnary(depth + 1);
    if (!operand)
      return nullptr;
    auto e = std::make_shared<Expr>();
    e->kind = ExprKind::Unary;
    e->s = std::string(op.text);
    e->args = {operand};
    e->loc = op.loc;
    return e;
  }
  ExprPtr base = parsePrimary(depth + 1);
  while (base && tok_.is(Tok::LBracket)) {
    SourceLoc loc = tok_.loc;
    advance();
    ExprPtr idx = parseExpr(depth + 1);
    if (!idx || !expect(Tok::RBracket, "after an index"))
      return nullptr;
    auto e = std::make_shared<Expr>();
    e->kind = ExprKind::Index;
    e->args = {base, idx};
    e->loc = loc;
    base = e;
  }
  return base;
}

ExprPtr Parser::parsePrimary(int depth) {
  Token t = tok_;
  switch (t.kind) {
  case Tok::Int:
    advance();
    return Expr::makeInt(t.intValue, t.loc);
  case Tok::Float:
    advance();
    return Expr::makeFloat(t.floatValue, t.loc);
  case Tok::String:
    advance();
    return parseStringExpr(t, /*allowHoles=*/true);
  case Tok::LParen: {
    advance();
    ExprPtr e = parseExpr(depth + 1);
    if (!e || !expect(Tok::RParen, "to close '('"))
      return nullptr;
    return e;
  }
  case Tok::LBracket: {
    advance();
    auto e = std::make_shared<Expr>();
    e->kind = ExprKind::List;
    e->loc = t.loc;
    if (consumeIf(Tok::RBracket))
      return e;
    while (true) {
      ExprPtr item = parseExpr(depth + 1);
      if (!item)
        return nullptr;
      e->args.push_back(item);
      if (consumeIf(Tok::Comma))
        continue;
      if (!expect(Tok::RBracket, "to close a list"))
        return nullptr;
      return e;
    }
  }
  case Tok::Ident: {
    advance();
    if (t.text == "true" || t.text == "false")
      return Expr::makeBool(t.text == "true", t.loc);
    if (t.text == "inf")
      return Expr::makeFloat(INFINITY, t.loc);
    if (t.text == "nan")
      return Expr::makeFloat(NAN, t.loc);
    if (!tok_.is(Tok::LParen))
      return Expr::makeName(std::string(t.text), t.loc);
    // A builtin call.
    struct Builtin {
      const char *name;
      size_t minArgs, maxArgs;
    };
    static const Builtin kBuiltins[] = {
        {"meta", 1, 2},      {"has_meta", 1, 1},  {"has_weight", 1, 1},
        {"min", 2, 2},       {"max", 2, 2},       {"sqrt", 1, 1},
        {"float", 1, 1},     {"dim", 2, 2},       {"max_context", 0, 0},
        {"max_batch", 0, 0}, {"generation", 0, 0}};
    const Builtin *b = nullptr;
    for (const Builtin &c : kBuiltins)
      if (t.text == c.name)
        b = &c;
    if (!b) {
      errorAt(t.loc,
              fmt::format(
                  "unknown function '{}' in an expression "
                  "(known: meta, has_meta, has_weight, dim, min, max, sqrt, "
                  "float, max_context, max_batch, generation)",
                  t.text));
      return nullptr;
    }
    advance();
    auto e = std::make_shared<Expr>();
    e->kind = ExprKind::Builtin;
    e->s = b->name;
    e->loc = t.loc;
    if (!tok_.is(Tok::RParen)) {
      while (true) {
        ExprPtr a = parseExpr(depth + 1);
        if (!a)
          return nullptr;
        e->args.push_back(a);
        if (!consumeIf(Tok::Comma))
          break;
      }
    }
    if (!expect(Tok::RParen, fmt::format("to close {}(", b->name)))
      return nullptr;
    if (e->args.size() < b->minArgs || e->args.size() > b->maxArgs) {
      errorAt(t.loc, b->minArgs == b->maxArgs
                         ? fmt::format("{}() takes {} argument(s), got {}",
                                       b->name, b->minArgs, e->args.size())
                         : fmt::format("{}() takes {} to {} arguments, got {}",
                                       b->name, b->minArgs, b->maxArgs,
                                       e->args.size()));
      return nullptr;
    }
    if ((e->s == "meta" || e->s == "has_meta") &&
        e->args[0]->kind != ExprKind::Str) {
      errorAt(e->args[0]->loc,
              fmt::format("{}() key must be a string literal", e->s));
      return nullptr;
    }
    return e;
  }
  default:
    errorHere(fmt::format("expected an expression, found {}", describe(t)));
    return nullptr;
  }
}

ExprPtr Parser::parseStringExpr(const Token &t, bool allowHoles) {
  // Decode escapes; `{expr}` holes make a template.
  std::vector<ExprPtr> pieces;
  std::string lit;
  std::string_view body = t.text;
  bool bad = false;
  auto flush = [&]() {
    if (!lit.empty())
      pieces.push_back(Expr::makeStr(lit, t.loc));
    lit.clear();
  };
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    SourceLoc here{t.loc.buffer, t.loc.line, t.loc.col + 1 + uint32_t(i)};
    if (c == '\\') {
      char n = i + 1 < body.size() ? body[i + 1] : '\0';
      ++i;
      switch (n) {
      case 'n':
        lit += '\n';
        break;
      case 't':
        lit += '\t';
        break;
      case '"':
      case '\\':
      case '{':
      case '}':
        lit += n;
        break;
      case 'x': {
        auto hex = [](char h) -> int {
          if (h >= '0' && h <= '9')
            return h - '0';
          if (h >= 'a' && h <= 'f')
            return h - 'a' + 10;
          if (h >= 'A' && h <= 'F')
            return h - 'A' + 10;
          return -1;
        };
        int hi = i + 1 < body.size() ? hex(body[i + 1]) : -1;
        int lo = i + 2 < body.size() ? hex(body[i + 2]) : -1;
        if (hi < 0 || lo < 0) {
          errorAt(here, "bad \\x escape: expected two hex digits");
          bad = true;
          break;
        }
        lit += static_cast<char>(hi * 16 + lo);
        i += 2;
        break;
      }
      default:
        errorAt(here, fmt::format("unknown escape '\\{}'", n));
        bad = true;
      }
      continue;
    }
    if (c == '}') {
      errorAt(here, "unmatched '}' in a string (write \\} for a brace)");
      bad = true;
      continue;
    }
    if (c != '{') {
      lit += c;
      continue;
    }
    size_t close = body.find('}', i);
    if (close == std::string_view::npos) {
      errorAt(here, "unterminated '{' hole in a name template");
      return nullptr;
    }
    if (!allowHoles) {
      errorAt(here, "'{' holes are not allowed in this string");
      bad = true;
      i = close;
      continue;
    }
    flush();
    std::string_view inner = body.substr(i + 1, close - i - 1);
    SourceLoc innerLoc{t.loc.buffer, t.loc.line, here.col + 1};
    Lexer sub(inner, t.loc.buffer, diag_, innerLoc);
    // Parse the hole with a nested parser state over the sub-lexer.
    Lexer *saved = lexer_;
    Token savedTok = tok_;
    lexer_ = &sub;
    advance();
    ExprPtr hole = tok_.is(Tok::Eof) ? nullptr : parseExpr(1);
    if (!tok_.is(Tok::Eof) && hole) {
      errorHere("unexpected text in a name template hole");
      hole = nullptr;
    }
    if (!hole && tok_.is(Tok::Eof) &&
        inner.find_first_not_of(" \t") == std::string_view::npos)
      errorAt(here, "empty '{}' hole in a name template");
    lexer_ = saved;
    tok_ = savedTok;
    if (!hole)
      return nullptr;
    pieces.push_back(hole);
    i = close;
  }
  if (bad)
    return nullptr;
  bool hasHole = false;
  for (const ExprPtr &p : pieces)
    hasHole |= p->kind != ExprKind::Str;
  if (!hasHole) {
    std::string all;
    for (const ExprPtr &p : pieces)
      all += p->s;
    return Expr::makeStr(all + lit, t.loc);
  }
  flush();
  auto e = std::make_shared<Expr>();
  e->kind = ExprKind::Template;
  e->args = std::move(pieces);
  e->loc = t.loc;
  return e;
}

// --- types -------------------------------------------------------------------

std::optional<std::vector<Dim>> Parser::parseDimList() {
  if (!expect(Tok::LBracket, "to start a shape"))
    return std::nullopt;
  std::vector<Dim> dims;
  if (consumeIf(Tok::RBracket))
    return dims;
  while (true) {
    ExprPtr e = parseExpr();
    if (!e)
      return std::nullopt;
    if (e->kind == ExprKind::Float || e->kind == ExprKind::Str ||
        e->kind == ExprKind::Bool || e->kind == ExprKind::List) {
      errorAt(e->loc, "a dimension must be an integer expression");
      return std::nullopt;
    }
    if ((e->kind == ExprKind::Int && e->i < 0) ||
        (e->kind == ExprKind::Unary && e->s == "-" &&
         e->args[0]->kind == ExprKind::Int && e->args[0]->i > 0)) {
      errorAt(e->loc, "a dimension cannot be negative");
      return std::nullopt;
    }
    dims.push_back(Dim::fromExpr(e));
    if (dims.size() > 8) {
      errorAt(e->loc, "tensors have at most 8 dimensions");
      return std::nullopt;
    }
    if (consumeIf(Tok::Comma))
      continue;
    if (!expect(Tok::RBracket, "to close a shape"))
      return std::nullopt;
    return dims;
  }
}

std::optional<Type> Parser::parseType(bool allowScalar) {
  if (!tok_.is(Tok::Ident)) {
    errorHere(fmt::format("expected a type, found {}", describe(tok_)));
    return std::nullopt;
  }
  Token t = tok_;
  advance();
  if (t.text == "int" || t.text == "float") {
    if (!allowScalar) {
      errorAt(t.loc, fmt::format("'{}' is only allowed for function "
                                 "parameters",
                                 t.text));
      return std::nullopt;
    }
    return t.text == "int" ? Type::scalarInt() : Type::scalarFloat();
  }
  auto elem = ElemType::parse(t.text);
  if (!elem) {
    errorAt(t.loc, fmt::format("unknown element type '{}'", t.text));
    return std::nullopt;
  }
  auto dims = parseDimList();
  if (!dims)
    return std::nullopt;
  return Type::tensor(*elem, std::move(*dims));
}

bool Parser::parseTypeList(std::vector<std::optional<Type>> &out) {
  if (consumeIf(Tok::LParen)) {
    while (true) {
      auto t = parseType(false);
      if (!t)
        return false;
      out.push_back(*t);
      if (consumeIf(Tok::Comma))
        continue;
      return expect(Tok::RParen, "to close the type list");
    }
  }
  auto t = parseType(false);
  if (!t)
    return false;
  out.push_back(*t);
  return true;
}

// --- module
// --------------------------------------------------------------------

std::unique_ptr<Module> Parser::parse() {
  auto m = std::make_unique<Module>();
  m->loc = tok_.loc;
  if (!expectIdent("model", "at the start of a model description"))
    return nullptr;
  if (!tok_.is(Tok::Ident)) {
    errorHere(fmt::format("expected the model name, found {}", describe(tok_)));
    return nullptr;
  }
  m->name = std::string(tok_.text);
  advance();
  if (!expect(Tok::LBrace, "after the model name"))
    return nullptr;
  while (!tok_.is(Tok::RBrace) && !tok_.is(Tok::Eof) && !diag_.tooMany()) {
    uint32_t line = tok_.loc.line;
    suppress_ = false;
    bool ok;
    if (tok_.isIdent("let")) {
      ok = parseLet(*m);
    } else if (tok_.isIdent("func")) {
      ok = parseFunc(*m);
    } else {
      ok = errorHere(
          fmt::format("expected 'let' or 'func', found {}", describe(tok_)));
      advance();
    }
    if (!ok)
      recover(line);
  }
  if (!tok_.is(Tok::RBrace)) {
    if (!diag_.tooMany())
      errorHere("expected '}' to close the model (unterminated block)");
    return nullptr;
  }
  advance();
  if (!tok_.is(Tok::Eof))
    errorHere(fmt::format("unexpected {} after the model", describe(tok_)));
  if (diag_.hadError())
    return nullptr;
  return m;
}

bool Parser::parseLet(Module &m) {
  advance(); // let
  if (!tok_.is(Tok::Ident))
    return errorHere(
        fmt::format("expected a name after 'let', found {}", describe(tok_)));
  LetDecl let;
  let.name = std::string(tok_.text);
  let.loc = tok_.loc;
  advance();
  if (!expect(Tok::Equal, "after the let name"))
    return false;
  let.value = parseExpr();
  if (!let.value)
    return false;
  for (const LetDecl &other : m.lets)
    if (other.name == let.name) {
      errorAt(let.loc, fmt::format("redefinition of let '{}'", let.name));
      diag_.note(other.loc, "previous definition is here");
      return true;
    }
  if (let.name == "T") {
    errorAt(let.loc, "'T' is the token dimension and cannot be redefined");
    return true;
  }
  m.lets.push_back(std::move(let));
  return true;
}

bool Parser::parseFunc(Module &m) {
  advance(); // func
  if (!tok_.is(Tok::FuncName))
    return errorHere(fmt::format("expected a function name like @main, found "
                                 "{}",
                                 describe(tok_)));
  auto f = std::make_unique<Func>();
  f->name = std::string(tok_.text);
  f->loc = tok_.loc;
  advance();
  func_ = f.get();
  scopes_.clear();
  scopes_.emplace_back();
  if (!expect(Tok::LParen, "to start the parameter list"))
    return false;
  if (!tok_.is(Tok::RParen)) {
    while (true) {
      Param p;
      p.loc = tok_.loc;
      if (tok_.is(Tok::ValueName)) {
        Token name = tok_;
        advance();
        if (!expect(Tok::Colon, "after a parameter name"))
          return false;
        auto ty = parseType(false);
        if (!ty)
          return false;
        p.value = f->newValue(std::string(name.text), *ty, name.loc);
        std::vector<std::optional<uint64_t>> offsets;
        if (tok_.is(Tok::FuncName)) {
          if (!parseOffsets(offsets, /*many=*/false))
            return false;
          p.value->offset = offsets[0];
        }
        if (!defineValue(p.value))
          return false;
      } else if (tok_.is(Tok::Ident)) {
        p.name = std::string(tok_.text);
        advance();
        if (!expect(Tok::Colon, "after a parameter name"))
          return false;
        auto ty = parseType(true);
        if (!ty)
          return false;
        if (ty->isTensor())
          return errorAt(p.loc, fmt::format("tensor parameter '{}' needs a "
                                            "'%' name",
                                            p.name));
        p.scalarKind = ty->kind;
        for (const Param &q : f->params)
          if (q.isScalar() && q.name == p.name)
            return errorAt(p.loc,
                           fmt::format("duplicate parameter '{}'", p.name));
      } else {
        return errorHere(
            fmt::format("expected a parameter, found {}", describe(tok_)));
      }
      f->params.push_back(std::move(p));
      if (consumeIf(Tok::Comma))
        continue;
      break;
    }
  }
  if (!expect(Tok::RParen, "to close the parameter list") ||
      !expect(Tok::Arrow, "before the result types"))
    return false;
  std::vector<std::optional<Type>> results;
  if (!parseTypeList(results))
    return false;
  for (auto &r : results)
    f->resultTypes.push_back(*r);
  if (!tok_.is(Tok::LBrace))
    return errorHere(fmt::format("expected '{{' to start the body of @{}, "
                                 "found {}",
                                 f->name, describe(tok_)));
  advance();
  bool ok = parseBlock(f->body, 1, true);
  if (Func *prev = m.findFunc(f->name)) {
    errorAt(f->loc, fmt::format("redefinition of function @{}", f->name));
    diag_.note(prev->loc, "previous definition is here");
  } else {
    m.funcs.push_back(std::move(f));
  }
  func_ = nullptr;
  return ok;
}

/// Parses statements up to and including the closing '}'.
bool Parser::parseBlock(Block &block, int depth, bool isFuncBody) {
  if (depth > kMaxBlockDepth)
    return errorHere(
        fmt::format("blocks nested deeper than {}", kMaxBlockDepth));
  while (!tok_.is(Tok::RBrace)) {
    if (tok_.is(Tok::Eof))
      return errorHere("expected '}' before end of file (unterminated block)");
    if (diag_.tooMany())
      return false;
    uint32_t line = tok_.loc.line;
    suppress_ = false;
    if (!parseStatement(block, depth)) {
      if (tok_.is(Tok::Eof))
        return false;
      recover(line);
    }
  }
  advance(); // }
  return true;
}

Value *Parser::lookupValue(const Token &t) {
  std::string name(t.text);
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    auto v = it->find(name);
    if (v != it->end())
      return v->second;
  }
  errorAt(t.loc, fmt::format("use of undefined value '%{}'", name));
  return nullptr;
}

bool Parser::defineValue(Value *v) {
  for (auto &scope : scopes_) {
    auto it = scope.find(v->name);
    if (it != scope.end()) {
      errorAt(v->loc, fmt::format("redefinition of value '%{}'", v->name));
      diag_.note(it->second->loc, "previous definition is here");
      return false;
    }
  }
  scopes_.back().emplace(v->name, v);
  return true;
}

std::shared_ptr<WeightRef> Parser::parseWeight() {
  advance(); // weight
  auto w = std::make_shared<WeightRef>();
  if (consumeIf(Tok::Less)) {
    if (!tok_.is(Tok::Ident)) {
      errorHere("expected an element type in weight<...>");
      return nullptr;
    }
    auto e = ElemType::parse(tok_.text);
    if (!e) {
      errorHere(fmt::format("unknown element type '{}'", tok_.text));
      return nullptr;
    }
    w->elem = e;
    advance();
    if (!expect(Tok::Greater, "to close weight<...>"))
      return nullptr;
  }
  if (!expect(Tok::LParen, "after 'weight'"))
    return nullptr;
  if (!tok_.is(Tok::String)) {
    errorHere(fmt::format("expected the tensor name template as a string, "
                          "found {}",
                          describe(tok_)));
    return nullptr;
  }
  Token name = tok_;
  advance();
  w->name = parseStringExpr(name, true);
  if (!w->name)
    return nullptr;
  if (w->name->kind == ExprKind::Str && w->name->s.empty()) {
    errorAt(name.loc, "empty weight name");
    return nullptr;
  }
  if (consumeIf(Tok::Comma)) {
    auto dims = parseDimList();
    if (!dims)
      return nullptr;
    w->shape = std::move(*dims);
  }
  if (!expect(Tok::RParen, "to close weight(...)"))
    return nullptr;
  return w;
}

bool Parser::parseOperand(Operand &out, bool allowScalar) {
  out.loc = tok_.loc;
  if (tok_.is(Tok::ValueName)) {
    out.value = lookupValue(tok_);
    advance();
    return out.value != nullptr;
  }
  if (tok_.isIdent("weight")) {
    out.weight = parseWeight();
    return out.weight != nullptr;
  }
  if (!allowScalar)
    return errorHere(fmt::format("expected a value (%name) or weight(...), "
                                 "found {}",
                                 describe(tok_)));
  out.scalar = parseExpr();
  return out.scalar != nullptr;
}

/// Parses `operand, ...)` after an opening '(' (already consumed).
bool Parser::parseOperandList(Operation &op, bool allowScalar,
                              std::string_view what) {
  if (!tok_.is(Tok::RParen))
    while (true) {
      Operand o;
      if (!parseOperand(o, allowScalar))
        return false;
      op.operands.push_back(std::move(o));
      if (!consumeIf(Tok::Comma))
        break;
    }
  return expect(Tok::RParen, fmt::format("to close {}", what));
}

bool Parser::parseAttrs(Operation &op) {
  uint32_t line = tok_.loc.line;
  if (parseAttrList(op))
    return true;
  // Skip the rest of the dictionary so its '}' is not taken for the end of
  // the enclosing block by recovery (attribute values contain no braces).
  while (!tok_.is(Tok::Eof) && !tok_.is(Tok::RBrace) && tok_.loc.line == line)
    advance();
  consumeIf(Tok::RBrace);
  return false;
}

bool Parser::parseAttrList(Operation &op) {
  advance(); // {
  if (consumeIf(Tok::RBrace))
    return true;
  while (true) {
    if (!tok_.is(Tok::Ident))
      return errorHere(
          fmt::format("expected an attribute name, found {}", describe(tok_)));
    Attr a;
    a.name = std::string(tok_.text);
    a.loc = tok_.loc;
    advance();
    if (!expect(Tok::Equal, "after the attribute name"))
      return false;
    a.value = parseExpr();
    if (!a.value)
      return false;
    if (op.findAttr(a.name))
      return errorAt(a.loc, fmt::format("duplicate attribute '{}'", a.name));
    op.attrs.push_back(std::move(a));
    if (consumeIf(Tok::Comma))
      continue;
    return expect(Tok::RBrace, "to close the attributes");
  }
}

bool Parser::parseBoundRegion(Operation &op, int depth, const char *argWhat,
                              const char *closeWhat, const char *bodyWhat,
                              bool allowEmpty,
                              std::vector<std::unique_ptr<Block>> &regions) {
  auto body = std::make_unique<Block>();
  std::vector<Token> names;
  while (!(allowEmpty && tok_.is(Tok::RParen))) {
    if (!tok_.is(Tok::ValueName))
      return errorHere(
          fmt::format("expected {}, found {}", argWhat, describe(tok_)));
    names.push_back(tok_);
    advance();
    if (!expect(Tok::Equal, fmt::format("after {}", argWhat)))
      return false;
    Operand init;
    if (!parseOperand(init, false))
      return false;
    op.operands.push_back(std::move(init));
    if (!consumeIf(Tok::Comma))
      break;
  }
  if (!expect(Tok::RParen, closeWhat))
    return false;
  if (!tok_.is(Tok::LBrace))
    return errorHere(fmt::format("expected '{{' to start {}, found {}",
                                 bodyWhat, describe(tok_)));
  advance();
  // The body's arguments are bound to the operands, in a scope of its own.
  scopes_.emplace_back();
  bool ok = true;
  for (const Token &n : names) {
    Value *v = func_->newValue(std::string(n.text), Type::unknown(), n.loc);
    ok = ok && defineValue(v);
    body->args.push_back(v);
  }
  ok = ok && parseBlock(*body, depth + 1, false);
  scopes_.pop_back();
  if (!ok)
    return false;
  regions.push_back(std::move(body));
  return true;
}

bool Parser::parseStatement(Block &block, int depth) {
  auto op = std::make_unique<Operation>();
  op->loc = tok_.loc;
  if (tok_.isIdent("return") || tok_.isIdent("yield")) {
    op->kind = tok_.text == "return" ? OpKind::Return : OpKind::Yield;
    uint32_t line = tok_.loc.line;
    advance();
    // Operands continue on the same line; the next statement starts a line.
    if (tok_.loc.line == line && !tok_.is(Tok::RBrace) && !tok_.is(Tok::Eof)) {
      while (true) {
        Operand o;
        if (!parseOperand(o, false))
          return false;
        op->operands.push_back(std::move(o));
        if (!consumeIf(Tok::Comma))
          break;
      }
    }
    block.ops.push_back(std::move(op));
    return true;
  }
  if (tok_.isIdent("remark")) {
    // remark "text": a fact about the bound model, reported by expand when
    // the statement is reached (e.g. in the branch a file's metadata picks).
    op->kind = OpKind::Remark;
    advance();
    if (!tok_.is(Tok::String))
      return errorHere(fmt::format("expected the remark text as a string, "
                                   "found {}",
                                   describe(tok_)));
    Token text = tok_;
    advance();
    op->cond = parseStringExpr(text, /*allowHoles=*/true);
    if (!op->cond)
      return false;
    block.ops.push_back(std::move(op));
    return true;
  }
  if (!tok_.is(Tok::ValueName))
    return errorHere(fmt::format("expected a statement (%name = ..., return, "
                                 "yield or remark), found {}",
                                 describe(tok_)));
  std::vector<Token> names;
  while (true) {
    if (!tok_.is(Tok::ValueName))
      return errorHere(
          fmt::format("expected a result name, found {}", describe(tok_)));
    names.push_back(tok_);
    advance();
    if (!consumeIf(Tok::Comma))
      break;
  }
  if (!expect(Tok::Equal, "after the result names"))
    return false;
  if (!tok_.is(Tok::Ident))
    return errorHere(
        fmt::format("expected an op name, found {}", describe(tok_)));
  Token opTok = tok_;
  op->loc = opTok.loc;
  advance();
  std::vector<std::unique_ptr<Block>> regions;
  if (opTok.text == "kernel") {
    op->kind = OpKind::Kernel;
    if (!expect(Tok::Less, "after 'kernel'"))
      return false;
    if (!tok_.is(Tok::Ident))
      return errorHere(fmt::format("expected a recipe name in kernel<...>, "
                                   "found {}",
                                   describe(tok_)));
    op->callee = std::string(tok_.text);
    advance();
    if (!expect(Tok::Greater, "to close kernel<...>") ||
        !expect(Tok::LParen, "after kernel<...>"))
      return false;
    if (!parseOperandList(*op, /*allowScalar=*/false, "the operands") ||
        (tok_.is(Tok::LBrace) && !parseAttrs(*op)))
      return false;
  } else if (opTok.text == "call") {
    op->kind = OpKind::Call;
    if (!tok_.is(Tok::FuncName))
      return errorHere(fmt::format("expected a function name after 'call', "
                                   "found {}",
                                   describe(tok_)));
    op->callee = std::string(tok_.text);
    advance();
    if (!expect(Tok::LParen, "to start the call arguments"))
      return false;
    if (!parseOperandList(*op, /*allowScalar=*/true, "the call arguments"))
      return false;
  } else if (opTok.text == "repeat") {
    op->kind = OpKind::Repeat;
    if (!tok_.is(Tok::Ident))
      return errorHere(fmt::format("expected a loop variable after 'repeat', "
                                   "found {}",
                                   describe(tok_)));
    op->loopVar = std::string(tok_.text);
    advance();
    if (!expectIdent("in", "after the loop variable"))
      return false;
    op->lo = parseExpr();
    if (!op->lo || !expect(Tok::DotDot, "between the repeat bounds"))
      return false;
    op->hi = parseExpr();
    if (!op->hi || !expectIdent("carry", "after the repeat bounds") ||
        !expect(Tok::LParen, "after 'carry'"))
      return false;
    if (!parseBoundRegion(*op, depth, "a carried value name",
                          "to close carry(...)", "the repeat body",
                          /*allowEmpty=*/false, regions))
      return false;
  } else if (opTok.text == "fused") {
    op->kind = OpKind::Fused;
    if (!tok_.is(Tok::String))
      return errorHere(fmt::format("expected the kernel name (a string) "
                                   "after 'fused', found {}",
                                   describe(tok_)));
    op->callee = std::string(tok_.text);
    advance();
    if (!expect(Tok::LParen, "after the fused kernel name"))
      return false;
    if (!parseBoundRegion(*op, depth, "an argument name",
                          "to close the fused arguments", "the fused body",
                          /*allowEmpty=*/true, regions))
      return false;
    // The kernel's own attributes follow its body.
    if (tok_.is(Tok::LBrace) && !parseAttrs(*op))
      return false;
  } else if (opTok.text == "if") {
    op->kind = OpKind::If;
    op->cond = parseExpr();
    if (!op->cond)
      return false;
    for (int branch = 0; branch < 2; ++branch) {
      if (branch == 1 && !expectIdent("else", "after the 'if' body (an if "
                                              "with results needs both "
                                              "branches)"))
        return false;
      if (!tok_.is(Tok::LBrace))
        return errorHere(fmt::format("expected '{{' to start a branch, "
                                     "found {}",
                                     describe(tok_)));
      advance();
      auto body = std::make_unique<Block>();
      scopes_.emplace_back();
      bool ok = parseBlock(*body, depth + 1, false);
      scopes_.pop_back();
      if (!ok)
        return false;
      regions.push_back(std::move(body));
    }
  } else {
    const OpInfo *info = lookupOp(opTok.text);
    if (!info)
      return errorAt(opTok.loc, fmt::format("unknown op '{}'", opTok.text));
    op->kind = info->kind;
    if (!expect(Tok::LParen, fmt::format("after '{}'", opTok.text)))
      return false;
    if (!parseOperandList(*op, /*allowScalar=*/false, "the operands") ||
        (tok_.is(Tok::LBrace) && !parseAttrs(*op)))
      return false;
  }
  op->regions = std::move(regions);
  if (op->kind != OpKind::Repeat && op->kind != OpKind::If &&
      consumeIf(Tok::Colon)) {
    if (!parseTypeList(op->declaredTypes))
      return false;
    if (op->declaredTypes.size() != names.size())
      return errorAt(op->loc,
                     fmt::format("{} result type(s) given for {} "
                                 "result(s)",
                                 op->declaredTypes.size(), names.size()));
  }
  op->declaredTypes.resize(names.size());
  std::vector<std::optional<uint64_t>> offsets;
  if (!parseOffsets(offsets))
    return false;
  if (!offsets.empty() && offsets.size() != names.size())
    return errorAt(op->loc, fmt::format("{} arena offset(s) given for {} "
                                        "result(s)",
                                        offsets.size(), names.size()));
  for (size_t k = 0; k < names.size(); ++k) {
    Type t = op->declaredTypes[k] ? *op->declaredTypes[k] : Type::unknown();
    Value *v = func_->newValue(std::string(names[k].text), t, names[k].loc);
    if (!offsets.empty())
      v->offset = offsets[k];
    if (!defineValue(v))
      return true; // diagnosed; the statement itself parsed fine
    op->results.push_back(v);
  }
  block.ops.push_back(std::move(op));
  return true;
}

/// Parses an optional `@N, @N` list of arena offsets (from plan-memory).
bool Parser::parseOffsets(std::vector<std::optional<uint64_t>> &out,
                          bool many) {
  while (tok_.is(Tok::FuncName)) {
    std::string_view digits = tok_.text;
    uint64_t v = 0;
    auto [p, ec] =
        std::from_chars(digits.data(), digits.data() + digits.size(), v);
    if (ec != std::errc() || p != digits.data() + digits.size())
      return errorHere(fmt::format("expected an arena offset like @1024, "
                                   "found '@{}'",
                                   digits));
    out.push_back(v);
    advance();
    if (!many || !tok_.is(Tok::Comma))
      break;
    advance();
  }
  return true;
}

} // namespace

std::unique_ptr<Module> parseModule(const SourceMgr &sm, uint32_t buffer,
                                    DiagnosticEngine &diag) {
  return Parser(sm, buffer, diag).parse();
}

} // namespace strata::ir
