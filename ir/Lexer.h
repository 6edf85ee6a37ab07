//===- Lexer.h - tokens of the strata text format ---------------*- C++ -*-===//
#pragma once

#include "ir/Diagnostics.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace strata::ir {

enum class Tok {
  Eof,
  Error,     ///< a bad character (already diagnosed)
  Ident,     ///< model, let, f32, l, ...
  ValueName, ///< %x (text without '%')
  FuncName,  ///< @f (text without '@')
  Int,
  Float,
  String, ///< text = raw body between the quotes, escapes not decoded
  LParen,
  RParen,
  LBrace,
  RBrace,
  LBracket,
  RBracket,
  Comma,
  Colon,
  Equal,  ///< =
  Arrow,  ///< ->
  DotDot, ///< ..
  Plus,
  Minus,
  Star,
  Slash,
  Percent,
  EqEq,
  NotEq,
  Less,
  LessEq,
  Greater,
  GreaterEq,
  AndAnd,
  OrOr,
  Bang,
};

/// A token with its location and text.
struct Token {
  Tok kind = Tok::Eof;
  SourceLoc loc;
  std::string_view text;
  int64_t intValue = 0;
  double floatValue = 0;
  bool is(Tok k) const { return kind == k; }
  bool isIdent(std::string_view s) const {
    return kind == Tok::Ident && text == s;
  }
};

/// Spelling of a token kind for messages ("'('", "identifier", ...).
const char *tokName(Tok kind);

/// Splits a buffer into tokens; reports bad characters, unterminated strings
/// and out-of-range numbers to the diagnostic engine.
class Lexer {
public:
  /// Lexes \p text; a sub-range of a buffer passes the location of its
  /// first character as \p start so tokens carry buffer positions.
  Lexer(std::string_view text, uint32_t buffer, DiagnosticEngine &diag,
        SourceLoc start = {0, 1, 1})
      : text_(text), buffer_(buffer), diag_(diag), lineOffset_(start.line - 1),
        colOffset_(start.col - 1) {}
  Token next();

private:
  SourceLoc locAt(size_t pos) const;
  void skipSpaceAndComments();
  Token make(Tok kind, size_t begin);
  Token lexNumber(size_t begin);
  Token lexString(size_t begin);

  std::string_view text_;
  uint32_t buffer_;
  DiagnosticEngine &diag_;
  size_t pos_ = 0;
  uint32_t line_ = 1;
  size_t lineStart_ = 0;
  uint32_t lineOffset_ = 0;
  uint32_t colOffset_ = 0;
};

} // namespace strata::ir
