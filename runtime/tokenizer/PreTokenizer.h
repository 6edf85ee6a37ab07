//===- PreTokenizer.h - regex word splitting through PCRE2 ------*- C++ -*-===//
//
// Splits raw text into the words that BPE merges within, by one of the
// regexes of PreTokenizers.def, compiled by PCRE2 in UTF mode with Unicode
// properties (UCP) and JIT. Unicode classes come from PCRE2's tables (10.42:
// Unicode 14), never from tables of our own.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace strata::tokenizer {

/// A compiled pre-tokenizer regex. Thread-safe: matching state is per call.
class PreTokenizer {
public:
  /// The pre-tokenizer named \p ggufName (a tokenizer.ggml.pre value of
  /// PreTokenizers.def). Returns nullptr and sets \p error if the name is
  /// unknown ("pre-tokenizer 'x' is not supported (supported: ...)") or the
  /// regex does not compile.
  static std::unique_ptr<PreTokenizer> create(std::string_view ggufName,
                                              std::string &error);
  /// The supported names, comma-separated, for messages.
  static std::string supportedNames();
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer &) = delete;
  PreTokenizer &operator=(const PreTokenizer &) = delete;

  /// Appends to \p words the consecutive matches that cover \p text (valid
  /// UTF-8, checked by the caller); text the regex does not match becomes
  /// words of its own, so the words always concatenate to \p text. Returns
  /// false and sets \p error if PCRE2 fails (a resource limit).
  bool split(std::string_view text, std::vector<std::string_view> &words,
             std::string &error) const;

  const std::string &name() const { return name_; }

private:
  PreTokenizer() = default;
  std::string name_;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace strata::tokenizer
