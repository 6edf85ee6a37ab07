//===- Diagnostics.cpp - source buffers and error reporting ---------------===//
#include "ir/Diagnostics.h"

#include <fmt/format.h>

namespace strata::ir {

uint32_t SourceMgr::addBuffer(std::string name, std::string text) {
  Buffer b;
  b.name = std::move(name);
  b.text = std::move(text);
  b.lineStarts.push_back(0);
  for (uint32_t i = 0; i < b.text.size(); ++i)
    if (b.text[i] == '\n')
      b.lineStarts.push_back(i + 1);
  buffers_.push_back(std::move(b));
  return static_cast<uint32_t>(buffers_.size());
}

const std::string &SourceMgr::name(uint32_t id) const {
  static const std::string kUnknown = "<unknown>";
  return id == 0 || id > buffers_.size() ? kUnknown : buffers_[id - 1].name;
}

std::string_view SourceMgr::text(uint32_t id) const {
  return id == 0 || id > buffers_.size() ? std::string_view()
                                         : buffers_[id - 1].text;
}

std::string_view SourceMgr::lineText(uint32_t id, uint32_t line) const {
  if (id == 0 || id > buffers_.size())
    return {};
  const Buffer &b = buffers_[id - 1];
  if (line == 0 || line > b.lineStarts.size())
    return {};
  uint32_t start = b.lineStarts[line - 1];
  uint32_t end = line < b.lineStarts.size()
                     ? b.lineStarts[line] - 1
                     : static_cast<uint32_t>(b.text.size());
  std::string_view s(b.text.data() + start, end - start);
  if (!s.empty() && s.back() == '\r')
    s.remove_suffix(1);
  return s;
}

std::string DiagnosticEngine::format(Severity sev, SourceLoc loc,
                                     std::string_view message) const {
  const char *kind = sev == Severity::Error  ? "error"
                     : sev == Severity::Note ? "note"
                                             : "remark";
  if (!loc.valid())
    return fmt::format("{}: {}: {}\n", sm_.name(loc.buffer), kind, message);
  std::string out = fmt::format("{}:{}:{}: {}: {}\n", sm_.name(loc.buffer),
                                loc.line, loc.col, kind, message);
  // A remark is one line: it states a fact, there is nothing to point at.
  if (sev == Severity::Remark)
    return out;
  std::string_view line = sm_.lineText(loc.buffer, loc.line);
  // Show at most a window of the line so binary garbage or minified input
  // cannot produce megabytes of output; replace unprintable bytes.
  constexpr size_t kWindow = 160;
  size_t col = loc.col ? loc.col - 1 : 0;
  size_t begin = col > kWindow / 2 ? col - kWindow / 2 : 0;
  if (begin > line.size())
    begin = line.size();
  size_t len = std::min(line.size() - begin, kWindow);
  std::string shown, caret;
  for (size_t i = begin; i < begin + len; ++i) {
    unsigned char c = static_cast<unsigned char>(line[i]);
    shown += c == '\t' ? ' ' : (c < 0x20 || c >= 0x7f ? '?' : char(c));
  }
  caret.assign(col >= begin ? col - begin : 0, ' ');
  out += shown + "\n" + caret + "^\n";
  return out;
}

void DiagnosticEngine::emit(Severity sev, SourceLoc loc,
                            std::string_view message) {
  if (capture_) {
    captured_.push_back({sev, loc, std::string(message)});
    return;
  }
  out_ << format(sev, loc, message);
}

void DiagnosticEngine::error(SourceLoc loc, std::string_view message) {
  if (errors_ >= kMaxErrors)
    return;
  ++errors_;
  emit(Severity::Error, loc, message);
  if (errors_ == kMaxErrors && !capture_)
    out_ << fmt::format("{}: error: too many errors ({}), stopping\n",
                        sm_.name(loc.buffer), kMaxErrors);
}

void DiagnosticEngine::note(SourceLoc loc, std::string_view message) {
  if (errors_ > kMaxErrors)
    return;
  emit(Severity::Note, loc, message);
}

void DiagnosticEngine::remark(SourceLoc loc, std::string_view message) {
  if (!remarked_.insert(std::string(message)).second)
    return;
  emit(Severity::Remark, loc, message);
}

} // namespace strata::ir
