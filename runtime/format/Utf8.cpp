//===- Utf8.cpp - UTF-8: validity, decoding, printable names --------------===//
#include "runtime/format/Utf8.h"

#include <fmt/format.h>

namespace strata::format {

Utf8Status classifyUtf8(std::string_view bytes, size_t &length) {
  length = 1;
  const auto b0 = static_cast<uint8_t>(bytes[0]);
  if (b0 < 0x80)
    return Utf8Status::Complete;
  size_t need;
  // The allowed range of the second byte excludes overlong forms (E0, F0),
  // surrogates (ED) and code points above U+10FFFF (F4).
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0)
      lo = 0xA0;
    else if (b0 == 0xED)
      hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0)
      lo = 0x90;
    else if (b0 == 0xF4)
      hi = 0x8F;
  } else {
    return Utf8Status::Invalid; // 80..C1 and F5..FF never start a character
  }
  for (size_t i = 1; i < need; ++i) {
    if (i >= bytes.size())
      return Utf8Status::Truncated;
    const auto b = static_cast<uint8_t>(bytes[i]);
    if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF))
      return Utf8Status::Invalid;
  }
  length = need;
  return Utf8Status::Complete;
}

size_t findInvalidUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    // ASCII runs are the common case: skip them without classifying.
    if (static_cast<uint8_t>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t length;
    if (classifyUtf8(text.substr(i), length) != Utf8Status::Complete)
      return i;
    i += length;
  }
  return std::string_view::npos;
}

uint32_t decodeUtf8(const char *p, size_t length) {
  const auto b = [&](size_t i) { return static_cast<uint32_t>(uint8_t(p[i])); };
  switch (length) {
  case 1:
    return b(0);
  case 2:
    return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
  case 3:
    return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
  default:
    return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) |
           ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

std::string escapeBytes(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = 1;
    const bool valid = classifyUtf8(s.substr(i), n) == Utf8Status::Complete;
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
      ++i;
    } else if (!valid || c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

} // namespace strata::format
