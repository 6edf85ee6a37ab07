//===- ByteLevel.cpp - GPT-2's byte-to-unicode mapping --------------------===//
#include "runtime/tokenizer/ByteLevel.h"

#include "runtime/tokenizer/Utf8.h"

#include <array>

namespace strata::tokenizer {

namespace {

/// Whether byte \p b is spelled by itself (the printable Latin-1 bytes).
constexpr bool selfSpelled(int b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) ||
         (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  std::array<uint32_t, 256> toCodepoint{};
  // Every spelling lies below U+0144 (256 + 68 remapped bytes).
  std::array<int16_t, 512> toByte{};

  Tables() {
    toByte.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      toCodepoint[b] = selfSpelled(b) ? uint32_t(b) : next++;
      toByte[toCodepoint[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables &tables() {
  static const Tables t;
  return t;
}

} // namespace

uint32_t byteToCodepoint(uint8_t b) { return tables().toCodepoint[b]; }

int codepointToByte(uint32_t cp) { return cp < 512 ? tables().toByte[cp] : -1; }

std::string byteToText(uint8_t b) {
  std::string s;
  appendUtf8(s, byteToCodepoint(b));
  return s;
}

} // namespace strata::tokenizer
