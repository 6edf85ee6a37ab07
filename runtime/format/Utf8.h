//===- Utf8.h - UTF-8: validity, decoding, printable names ------*- C++ -*-===//
//
// Strict UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing above
// U+10FFFF. Text given to the tokenizer must be valid; decoded token bytes
// need not be, so the streaming decoder asks how much of a buffer is made of
// finished characters. Names and strings from files nobody here controls
// are checked before they are shown or written into JSON: bytes that are
// not UTF-8 are spelt \xNN (escapeBytes) instead of being replaced, so the
// same bytes always print the same text and two names never print alike.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace strata::format {

/// What the bytes at the start of a buffer hold.
enum class Utf8Status {
  /// A whole, valid character (its length is returned beside).
  Complete,
  /// The beginning of a valid character that needs more bytes than remain.
  Truncated,
  /// Bytes that no continuation can make valid (the first byte is bad).
  Invalid,
};

/// Classifies the character at the start of \p bytes (nonempty) and sets
/// \p length to its byte count (Complete) or to 1 (Truncated, Invalid).
Utf8Status classifyUtf8(std::string_view bytes, size_t &length);

/// Byte offset of the first byte of \p text that does not start a valid,
/// complete UTF-8 character, or std::string_view::npos if all of it is valid.
size_t findInvalidUtf8(std::string_view text);

/// Decodes the valid character of \p length bytes at \p p (a Complete
/// classification).
uint32_t decodeUtf8(const char *p, size_t length);

/// Appends the UTF-8 form of \p cp (at most U+10FFFF) to \p out.
template <typename String> void appendUtf8(String &out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

/// \p s with every byte that is not part of well-formed UTF-8, every ASCII
/// control byte, '"' and '\\' escaped (\xNN, \", \\): printable, and
/// distinct strings stay distinct.
std::string escapeBytes(std::string_view s);

} // namespace strata::format
