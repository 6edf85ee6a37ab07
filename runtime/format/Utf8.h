//===- Utf8.h - UTF-8 validity and printable names ---------------*- C++
//-*-===//
//
// Names and strings come from files nobody here controls: before one is
// shown to a user or written into JSON it is checked, and bytes that are not
// UTF-8 are spelt as \xNN instead of being replaced (so the same bytes always
// print the same text, and two different names never print alike).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace strata::format {

/// The length of the well-formed UTF-8 sequence at \p s[i] (1..4), or 0 if
/// the bytes there are not one (overlong forms, surrogates and code points
/// past U+10FFFF are not).
size_t utf8SequenceLength(std::string_view s, size_t i);

/// True if \p s is well-formed UTF-8; otherwise sets \p badOffset (if given)
/// to the offset of the first byte that is not.
bool isValidUtf8(std::string_view s, size_t *badOffset = nullptr);

/// \p s with every byte that is not part of well-formed UTF-8, every ASCII
/// control byte, '"' and '\\' escaped (\xNN, \", \\): printable, and
/// distinct strings stay distinct.
std::string escapeBytes(std::string_view s);

} // namespace strata::format
