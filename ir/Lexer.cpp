//===- Lexer.cpp - tokens of the strata text format -----------------------===//
#include "ir/Lexer.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cstdlib>

namespace strata::ir {

const char *tokName(Tok kind) {
  switch (kind) {
  case Tok::Eof:
    return "end of file";
  case Tok::Error:
    return "invalid token";
  case Tok::Ident:
    return "identifier";
  case Tok::ValueName:
    return "value name";
  case Tok::FuncName:
    return "function name";
  case Tok::Int:
    return "integer";
  case Tok::Float:
    return "float";
  case Tok::String:
    return "string";
  case Tok::LParen:
    return "'('";
  case Tok::RParen:
    return "')'";
  case Tok::LBrace:
    return "'{'";
  case Tok::RBrace:
    return "'}'";
  case Tok::LBracket:
    return "'['";
  case Tok::RBracket:
    return "']'";
  case Tok::Comma:
    return "','";
  case Tok::Colon:
    return "':'";
  case Tok::Equal:
    return "'='";
  case Tok::Arrow:
    return "'->'";
  case Tok::DotDot:
    return "'..'";
  case Tok::Plus:
    return "'+'";
  case Tok::Minus:
    return "'-'";
  case Tok::Star:
    return "'*'";
  case Tok::Slash:
    return "'/'";
  case Tok::Percent:
    return "'%'";
  case Tok::EqEq:
    return "'=='";
  case Tok::NotEq:
    return "'!='";
  case Tok::Less:
    return "'<'";
  case Tok::LessEq:
    return "'<='";
  case Tok::Greater:
    return "'>'";
  case Tok::GreaterEq:
    return "'>='";
  case Tok::AndAnd:
    return "'&&'";
  case Tok::OrOr:
    return "'||'";
  case Tok::Bang:
    return "'!'";
  }
  return "token";
}

SourceLoc Lexer::locAt(size_t pos) const {
  uint32_t col = static_cast<uint32_t>(pos - lineStart_ + 1);
  if (line_ == 1)
    col += colOffset_;
  return SourceLoc{buffer_, line_ + lineOffset_, col};
}

void Lexer::skipSpaceAndComments() {
  while (pos_ < text_.size()) {
    char c = text_[pos_];
    if (c == '\n') {
      ++pos_;
      ++line_;
      lineStart_ = pos_;
    } else if (c == ' ' || c == '\t' || c == '\r') {
      ++pos_;
    } else if (c == '/' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '/') {
      while (pos_ < text_.size() && text_[pos_] != '\n')
        ++pos_;
    } else {
      return;
    }
  }
}

Token Lexer::make(Tok kind, size_t begin) {
  Token t;
  t.kind = kind;
  t.loc = locAt(begin);
  t.text = text_.substr(begin, pos_ - begin);
  return t;
}

static bool isIdentStart(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_';
}
static bool isIdentChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

Token Lexer::next() {
  skipSpaceAndComments();
  size_t begin = pos_;
  if (pos_ >= text_.size())
    return make(Tok::Eof, begin);
  char c = text_[pos_];
  if (isIdentStart(c)) {
    while (pos_ < text_.size() && isIdentChar(text_[pos_]))
      ++pos_;
    return make(Tok::Ident, begin);
  }
  if (std::isdigit(static_cast<unsigned char>(c)))
    return lexNumber(begin);
  if (c == '%' || c == '@') {
    ++pos_;
    // Value names may contain dots (`%q.3`, produced by expand).
    while (pos_ < text_.size() &&
           (isIdentChar(text_[pos_]) ||
            (c == '%' && text_[pos_] == '.' && pos_ + 1 < text_.size() &&
             isIdentChar(text_[pos_ + 1]))))
      ++pos_;
    if (pos_ == begin + 1) {
      if (c == '%')
        return make(Tok::Percent, begin);
      diag_.error(locAt(begin), "expected a function name after '@'");
      return make(Tok::Error, begin);
    }
    Token t = make(c == '%' ? Tok::ValueName : Tok::FuncName, begin);
    t.text.remove_prefix(1);
    return t;
  }
  if (c == '"')
    return lexString(begin);
  ++pos_;
  switch (c) {
  case '(':
    return make(Tok::LParen, begin);
  case ')':
    return make(Tok::RParen, begin);
  case '{':
    return make(Tok::LBrace, begin);
  case '}':
    return make(Tok::RBrace, begin);
  case '[':
    return make(Tok::LBracket, begin);
  case ']':
    return make(Tok::RBracket, begin);
  case ',':
    return make(Tok::Comma, begin);
  case ':':
    return make(Tok::Colon, begin);
  case '+':
    return make(Tok::Plus, begin);
  case '*':
    return make(Tok::Star, begin);
  case '/':
    return make(Tok::Slash, begin);
  case '-':
    if (pos_ < text_.size() && text_[pos_] == '>') {
      ++pos_;
      return make(Tok::Arrow, begin);
    }
    return make(Tok::Minus, begin);
  case '.':
    if (pos_ < text_.size() && text_[pos_] == '.') {
      ++pos_;
      return make(Tok::DotDot, begin);
    }
    break;
  case '=':
    if (pos_ < text_.size() && text_[pos_] == '=') {
      ++pos_;
      return make(Tok::EqEq, begin);
    }
    return make(Tok::Equal, begin);
  case '!':
    if (pos_ < text_.size() && text_[pos_] == '=') {
      ++pos_;
      return make(Tok::NotEq, begin);
    }
    return make(Tok::Bang, begin);
  case '<':
    if (pos_ < text_.size() && text_[pos_] == '=') {
      ++pos_;
      return make(Tok::LessEq, begin);
    }
    return make(Tok::Less, begin);
  case '>':
    if (pos_ < text_.size() && text_[pos_] == '=') {
      ++pos_;
      return make(Tok::GreaterEq, begin);
    }
    return make(Tok::Greater, begin);
  case '&':
    if (pos_ < text_.size() && text_[pos_] == '&') {
      ++pos_;
      return make(Tok::AndAnd, begin);
    }
    break;
  case '|':
    if (pos_ < text_.size() && text_[pos_] == '|') {
      ++pos_;
      return make(Tok::OrOr, begin);
    }
    break;
  default:
    break;
  }
  unsigned char uc = static_cast<unsigned char>(c);
  if (uc >= 0x21 && uc < 0x7f)
    diag_.error(locAt(begin), fmt::format("unexpected character '{}'", c));
  else
    diag_.error(locAt(begin),
                fmt::format("unexpected byte 0x{:02x} (not strata text)", uc));
  return make(Tok::Error, begin);
}

Token Lexer::lexNumber(size_t begin) {
  while (pos_ < text_.size() &&
         std::isdigit(static_cast<unsigned char>(text_[pos_])))
    ++pos_;
  bool isFloat = false;
  // `0..L` is a range, so a '.' makes a float only when a digit follows.
  if (pos_ + 1 < text_.size() && text_[pos_] == '.' &&
      std::isdigit(static_cast<unsigned char>(text_[pos_ + 1]))) {
    isFloat = true;
    ++pos_;
    while (pos_ < text_.size() &&
           std::isdigit(static_cast<unsigned char>(text_[pos_])))
      ++pos_;
  }
  if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
    size_t save = pos_;
    ++pos_;
    if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-'))
      ++pos_;
    if (pos_ < text_.size() &&
        std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      isFloat = true;
      while (pos_ < text_.size() &&
             std::isdigit(static_cast<unsigned char>(text_[pos_])))
        ++pos_;
    } else {
      pos_ = save;
    }
  }
  if (pos_ < text_.size() && isIdentChar(text_[pos_])) {
    while (pos_ < text_.size() && isIdentChar(text_[pos_]))
      ++pos_;
    diag_.error(locAt(begin), fmt::format("invalid number '{}'",
                                          text_.substr(begin, pos_ - begin)));
    return make(Tok::Error, begin);
  }
  Token t = make(isFloat ? Tok::Float : Tok::Int, begin);
  if (isFloat) {
    std::string s(t.text);
    t.floatValue = std::strtod(s.c_str(), nullptr);
    return t;
  }
  auto [p, ec] =
      std::from_chars(t.text.data(), t.text.data() + t.text.size(), t.intValue);
  if (ec != std::errc()) {
    diag_.error(t.loc,
                fmt::format("integer '{}' does not fit in 64 bits", t.text));
    t.kind = Tok::Error;
  }
  return t;
}

Token Lexer::lexString(size_t begin) {
  ++pos_; // opening quote
  while (pos_ < text_.size() && text_[pos_] != '"' && text_[pos_] != '\n') {
    if (text_[pos_] == '\\' && pos_ + 1 < text_.size() &&
        text_[pos_ + 1] != '\n')
      ++pos_;
    ++pos_;
  }
  if (pos_ >= text_.size() || text_[pos_] != '"') {
    diag_.error(locAt(begin), "unterminated string");
    return make(Tok::Error, begin);
  }
  ++pos_;
  Token t = make(Tok::String, begin);
  t.text = t.text.substr(1, t.text.size() - 2);
  return t;
}

} // namespace strata::ir
