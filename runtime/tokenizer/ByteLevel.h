//===- ByteLevel.h - GPT-2's byte-to-unicode mapping ------------*- C++ -*-===//
//
// Byte-level BPE vocabularies (tokenizer.ggml.model "gpt2") spell every byte
// as one printable code point, so that token texts are printable strings:
// bytes '!'..'~', U+00A1..U+00AC and U+00AE..U+00FF stand for themselves and
// the other 68 bytes (controls, space, DEL, U+0080..U+00A0, soft hyphen) take
// U+0100, U+0101, ... in byte order. This is GPT-2's bytes_to_unicode().
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <string>

namespace strata::tokenizer {

/// The code point that spells byte \p b in a byte-level vocabulary.
uint32_t byteToCodepoint(uint8_t b);

/// The byte spelled by code point \p cp, or -1 if \p cp spells no byte.
int codepointToByte(uint32_t cp);

/// The UTF-8 text that spells byte \p b (one code point, 1 or 2 bytes).
std::string byteToText(uint8_t b);

} // namespace strata::tokenizer
