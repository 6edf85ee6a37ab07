//===- Diagnostics.h - source buffers and error reporting -------*- C++ -*-===//
//
// Every user error is `file:line:col: error: message`, the source line, and a
// caret under the column. The engine counts errors, caps their number, and can
// capture instead of print (strata-opt --verify-diagnostics).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <ostream>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace strata::ir {

/// A position in a source buffer; line and col are 1-based, 0 means unknown.
struct SourceLoc {
  uint32_t buffer = 0;
  uint32_t line = 0;
  uint32_t col = 0;
  bool valid() const { return line != 0; }
};

/// Owns the text of every buffer that locations point into.
class SourceMgr {
public:
  /// Adds a buffer; returns its id (ids start at 1, 0 = none).
  uint32_t addBuffer(std::string name, std::string text);
  const std::string &name(uint32_t id) const;
  std::string_view text(uint32_t id) const;
  /// The text of line \p line (1-based) without its newline.
  std::string_view lineText(uint32_t id, uint32_t line) const;

private:
  struct Buffer {
    std::string name;
    std::string text;
    std::vector<uint32_t> lineStarts;
  };
  std::vector<Buffer> buffers_;
};

/// Remarks are one-line facts a description states about the model it was
/// bound to (the `remark` statement); they are not errors.
enum class Severity { Error, Note, Remark };

/// A diagnostic as captured for --verify-diagnostics.
struct Diagnostic {
  Severity severity;
  SourceLoc loc;
  std::string message;
};

/// Reports diagnostics to a stream or captures them.
class DiagnosticEngine {
public:
  DiagnosticEngine(const SourceMgr &sm, std::ostream &out)
      : sm_(sm), out_(out) {}

  /// Reports an error at \p loc. The kMaxErrors-th error is followed by a
  /// "too many errors" line; later errors are dropped.
  void error(SourceLoc loc, std::string_view message);
  /// Attaches a note to the last error (dropped with it if over the cap).
  void note(SourceLoc loc, std::string_view message);
  /// Reports a remark: one line, no source excerpt, each distinct message
  /// once (a remark in an unrolled loop body is reached once per layer).
  void remark(SourceLoc loc, std::string_view message);

  unsigned errorCount() const { return errors_; }
  bool hadError() const { return errors_ != 0; }
  /// True once the error cap is reached; parsers stop recovering then.
  bool tooMany() const { return errors_ >= kMaxErrors; }

  /// Capture diagnostics instead of printing them.
  void setCapture(bool on) { capture_ = on; }
  const std::vector<Diagnostic> &captured() const { return captured_; }
  void clearCaptured() { captured_.clear(); }
  /// Forgets the error count (between --split-input-file chunks).
  void reset() {
    errors_ = 0;
    captured_.clear();
    remarked_.clear();
  }

  static constexpr unsigned kMaxErrors = 20;

  /// Formats one diagnostic with its source line and caret.
  std::string format(Severity sev, SourceLoc loc,
                     std::string_view message) const;

private:
  void emit(Severity sev, SourceLoc loc, std::string_view message);

  const SourceMgr &sm_;
  std::ostream &out_;
  unsigned errors_ = 0;
  bool capture_ = false;
  std::vector<Diagnostic> captured_;
  std::set<std::string> remarked_;
};

} // namespace strata::ir
