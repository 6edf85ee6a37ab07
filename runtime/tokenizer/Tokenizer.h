//===- Tokenizer.h - the GGUF tokenizer (byte-level BPE) --------*- C++ -*-===//
//
// Text to token ids and back, from the tokenizer.ggml.* metadata of a GGUF,
// giving the ids llama.cpp gives (src/llama-vocab.cpp):
//
//   1. special tokens written in the text are split out first: each special
//      token (CONTROL, USER_DEFINED or UNKNOWN), longest text first, cuts
//      every remaining stretch of raw text at each of its occurrences;
//      without parseSpecial only USER_DEFINED tokens are;
//   2. each stretch of raw text is split into words by the pre-tokenizer's
//      regex (PreTokenizers.def, run by PCRE2);
//   3. each word's bytes, spelled as GPT-2's byte-level code points
//      (ByteLevel.h), are merged pair by pair, lowest merge rank first and
//      leftmost among equal ranks, until no listed merge applies.
//
// Decoding maps each token back to its bytes. A token may end inside a
// UTF-8 character; StreamingDecoder holds such bytes back until the
// character is complete.
//
// Only tokenizer.ggml.model "gpt2" (byte-level BPE) is read; "none",
// "no_vocab" or no key at all load as a tokenizer without a vocabulary,
// whose encode and decode fail saying so.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/format/ModelInfo.h"

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace strata::tokenizer {

class PreTokenizer;

/// A token id; kNoToken where a special token is absent.
using TokenId = int32_t;
inline constexpr TokenId kNoToken = -1;

/// Values of tokenizer.ggml.token_type (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6,
};

/// Token attributes (bits), as llama.cpp derives them from the token type
/// and, for some well-known texts, from the token's text.
enum class TokenAttr : uint32_t {
  None = 0,
  Unknown = 1u << 0,
  Unused = 1u << 1,
  Normal = 1u << 2,
  Control = 1u << 3,
  UserDefined = 1u << 4,
  Byte = 1u << 5,
};

/// How to encode.
struct EncodeOptions {
  /// Recognise special tokens written in the text. When false, CONTROL and
  /// UNKNOWN tokens are read as plain text; USER_DEFINED ones still are
  /// recognised (llama.cpp's parse_special = false).
  bool parseSpecial = true;
  /// Add BOS in front if the vocabulary asks for it
  /// (tokenizer.ggml.add_bos_token) and EOS at the end if it asks for that
  /// (tokenizer.ggml.add_eos_token); llama.cpp's add_special.
  bool addSpecial = true;
};

/// A loaded tokenizer. Immutable after load; encode and decode may run on
/// several threads at once.
class Tokenizer {
public:
  /// Reads the tokenizer of \p info. Returns nullptr and sets \p error to
  /// "<source>: <key>: <what is wrong>" if the metadata is malformed or asks
  /// for something unsupported (a model other than gpt2, a pre-tokenizer not
  /// in PreTokenizers.def, a merge of tokens that do not exist, a special
  /// token id out of range, ...).
  static std::unique_ptr<Tokenizer> load(const format::ModelInfo &info,
                                         std::string &error);
  ~Tokenizer();
  Tokenizer(const Tokenizer &) = delete;
  Tokenizer &operator=(const Tokenizer &) = delete;

  /// False for a file without a tokenizer (model "none" or absent).
  bool hasVocab() const { return hasVocab_; }
  /// The value of tokenizer.ggml.model ("" if absent).
  const std::string &model() const { return model_; }
  /// The value of tokenizer.ggml.pre ("" without a vocabulary).
  const std::string &preTokenizerName() const { return preName_; }
  /// Number of tokens (0 without a vocabulary).
  size_t vocabSize() const { return texts_.size(); }

  TokenId bos() const { return bos_; }
  TokenId eos() const { return eos_; }
  TokenId eot() const { return eot_; }
  TokenId pad() const { return pad_; }
  bool addBos() const { return addBos_; }
  bool addEos() const { return addEos_; }
  /// True if \p id ends generation (EOS, EOT, EOM and the tokens llama.cpp
  /// recognises by their text, such as <|im_end|>).
  bool isEndOfGeneration(TokenId id) const;

  /// The token's text as the GGUF spells it. \p id must be in range.
  const std::string &tokenText(TokenId id) const { return texts_[id]; }
  /// The token's attributes. \p id must be in range.
  uint32_t tokenAttrs(TokenId id) const { return attrs_[id]; }
  bool hasAttr(TokenId id, TokenAttr a) const {
    return (attrs_[id] & static_cast<uint32_t>(a)) != 0;
  }

  /// Appends the ids of \p text to \p ids. Fails (returning false and
  /// setting \p error) without a vocabulary, and on text that is not valid
  /// UTF-8: "invalid UTF-8 at byte offset N".
  bool encode(std::string_view text, const EncodeOptions &options,
              std::vector<TokenId> &ids, std::string &error) const;

  /// The bytes of one token: the decoded text of a normal token, the text
  /// of a USER_DEFINED token, and of a CONTROL or UNKNOWN token only when
  /// \p renderSpecial (else nothing). \p id must be in range.
  std::string_view piece(TokenId id, bool renderSpecial) const;

  /// Appends the bytes of \p ids to \p out (which may then end inside a
  /// UTF-8 character). Fails without a vocabulary and on an id out of
  /// range ("token id N at position P is out of range (vocabulary of V
  /// tokens)").
  bool decode(std::span<const TokenId> ids, bool renderSpecial,
              std::string &out, std::string &error) const;

private:
  Tokenizer() = default;
  struct Merge {
    int32_t rank;
    TokenId result;
  };
  static uint64_t pairKey(TokenId left, TokenId right) {
    return (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
  }
  /// An error message for a tokenizer without a vocabulary.
  std::string noVocabMessage() const;
  bool loadVocab(const format::ModelInfo &info, std::string &error);
  /// llama.cpp's guesses from token texts: special ids not given by keys,
  /// CONTROL for end-of-generation tokens, and a few model quirks.
  void deriveAttributes();
  /// Byte-level BPE over one word, appending its ids.
  void encodeWord(std::string_view word, std::vector<TokenId> &ids) const;

  std::string source_;
  bool hasVocab_ = false;
  std::string model_;
  std::string preName_;
  std::unique_ptr<PreTokenizer> pre_;
  std::vector<std::string> texts_;
  std::vector<uint32_t> attrs_;
  /// Bytes of each token with specials rendered (piece(id, true)).
  std::vector<std::string> pieces_;
  std::unordered_map<std::string_view, TokenId> idOfText_;
  std::unordered_map<uint64_t, Merge> merges_;
  /// The token that spells each byte alone, or kNoToken.
  std::array<TokenId, 256> byteTokens_{};
  /// Special tokens recognised in text, longest text first (ties by id).
  std::vector<TokenId> specialTokens_;
  std::vector<bool> endOfGeneration_;
  TokenId bos_ = kNoToken, eos_ = kNoToken, eot_ = kNoToken, eom_ = kNoToken;
  TokenId unk_ = kNoToken, sep_ = kNoToken, pad_ = kNoToken, mask_ = kNoToken;
  TokenId fimPre_ = kNoToken, fimSuf_ = kNoToken, fimMid_ = kNoToken;
  TokenId fimPad_ = kNoToken, fimRep_ = kNoToken, fimSep_ = kNoToken;
  bool addBos_ = false;
  bool addEos_ = false;
};

/// Decodes a stream of tokens into text, one token at a time, emitting only
/// whole UTF-8 characters: the bytes of a character split over tokens are
/// held back until its last byte arrives. Bytes that can never form a
/// character (invalid UTF-8) are passed on as they are.
class StreamingDecoder {
public:
  explicit StreamingDecoder(const Tokenizer &tokenizer,
                            bool renderSpecial = true)
      : tokenizer_(tokenizer), renderSpecial_(renderSpecial) {}

  /// Appends to \p out the characters completed by token \p id. Fails like
  /// Tokenizer::decode (nothing is appended then).
  bool push(TokenId id, std::string &out, std::string &error);
  /// Returns the bytes still held (an unfinished character) and forgets
  /// them.
  std::string flush();
  /// Bytes currently held back.
  size_t pendingBytes() const { return pending_.size(); }

private:
  const Tokenizer &tokenizer_;
  bool renderSpecial_;
  size_t position_ = 0;
  std::string pending_;
};

} // namespace strata::tokenizer
