//===- TokenizerFuzzer.cpp - libFuzzer target for the tokenizer -----------===//
//
// The first byte picks what the rest is:
//
//   bit 7 clear: text for a small built-in vocabulary (bit 0: the qwen35
//     pre-tokenizer, else qwen2; bit 1: parse special tokens; bit 2: add
//     BOS/EOS, which the vocabulary asks for under bit 3). Valid UTF-8 must
//     encode and decode back to itself, whole and streamed token by token,
//     the stream emitting only whole characters; invalid UTF-8 must be
//     refused at the first bad byte.
//   bit 7 set, bit 6 clear: little-endian int32 token ids to decode, whole
//     and streamed: ids out of range are errors, nothing else is.
//   bits 7 and 6 set: a GGUF image whose tokenizer is loaded (hostile
//     metadata must give errors, not crashes) and, if it loads, used on a
//     fixed text.
//
//===----------------------------------------------------------------------===//
#include "runtime/format/Gguf.h"
#include "runtime/tokenizer/ByteLevel.h"
#include "runtime/tokenizer/Tokenizer.h"
#include "runtime/tokenizer/Utf8.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

using namespace strata;
using namespace strata::tokenizer;
using format::GgufValueType;
using format::MetaValue;

namespace {

[[noreturn]] void die(const char *what, const std::string &detail) {
  std::fprintf(stderr, "TokenizerFuzzer: %s: %s\n", what, detail.c_str());
  std::abort();
}

std::string spell(std::string_view bytes) {
  std::string s;
  for (unsigned char b : bytes)
    s += byteToText(b);
  return s;
}

/// The built-in vocabulary: the 256 byte tokens, every prefix of a few
/// words (each made by merging the previous prefix with one byte, so BPE
/// has chains to follow), a CONTROL and a USER_DEFINED token.
std::unique_ptr<Tokenizer> builtIn(const char *pre, bool addBos) {
  format::ModelInfo info;
  info.source = "built-in";
  std::vector<MetaValue> tokens, types, merges;
  std::set<std::string> have;
  auto add = [&](const std::string &text, int type) {
    if (!have.insert(text).second)
      return;
    tokens.push_back(MetaValue::makeString(text));
    types.push_back(MetaValue::makeInt(type, GgufValueType::Int32));
  };
  for (int b = 0; b < 256; ++b)
    add(byteToText(uint8_t(b)), 1);
  for (std::string_view w :
       {"the", " the", "ing", "hello", " world", "'s", "  ", "\n\n", "12",
        "\xe4\xb8\xad", "\xe6\x96\x87", "\xf0\x9f\xa6\x99", "e\xcc\x81"}) {
    for (size_t k = 2; k <= w.size(); ++k) {
      std::string left = spell(w.substr(0, k - 1)),
                  right = spell(w.substr(k - 1, 1));
      if (have.count(left + right))
        continue;
      add(left + right, 1);
      merges.push_back(MetaValue::makeString(left + " " + right));
    }
  }
  add("<|c|>", 3);
  add("<u>", 4);
  add("<|im_end|>", 1); // made CONTROL by its text, as in llama.cpp
  info.addMeta("tokenizer.ggml.model", MetaValue::makeString("gpt2"));
  info.addMeta("tokenizer.ggml.pre", MetaValue::makeString(pre));
  info.addMeta("tokenizer.ggml.tokens",
               MetaValue::makeArray(GgufValueType::String, tokens));
  info.addMeta("tokenizer.ggml.token_type",
               MetaValue::makeArray(GgufValueType::Int32, types));
  info.addMeta("tokenizer.ggml.merges",
               MetaValue::makeArray(GgufValueType::String, merges));
  info.addMeta("tokenizer.ggml.bos_token_id",
               MetaValue::makeUInt(tokens.size() - 3));
  info.addMeta("tokenizer.ggml.add_bos_token", MetaValue::makeBool(addBos));
  std::string error;
  auto t = Tokenizer::load(info, error);
  if (!t)
    die("the built-in vocabulary does not load", error);
  return t;
}

const Tokenizer &vocab(int which) {
  static std::unique_ptr<Tokenizer> t[4] = {
      builtIn("qwen2", false), builtIn("qwen35", false), builtIn("qwen2", true),
      builtIn("qwen35", true)};
  return *t[which];
}

/// Decodes \p ids whole and streamed; both must agree and the stream must
/// emit whole characters only where the whole text is valid UTF-8.
std::string decodeBoth(const Tokenizer &t, const std::vector<TokenId> &ids,
                       bool mustBeValid) {
  std::string whole, streamed, error;
  bool inRange = true;
  for (TokenId id : ids)
    inRange = inRange && id >= 0 && size_t(id) < t.vocabSize();
  if (t.decode(ids, true, whole, error) != inRange)
    die("decode's success does not match the ids' range", error);
  StreamingDecoder d(t);
  for (TokenId id : ids) {
    size_t before = streamed.size();
    if (!d.push(id, streamed, error)) {
      if (inRange)
        die("a streamed id in range failed", error);
      return whole;
    }
    if (mustBeValid && findInvalidUtf8(std::string_view(streamed).substr(
                           before)) != std::string_view::npos)
      die("the stream emitted part of a character", streamed);
  }
  streamed += d.flush();
  if (inRange && streamed != whole)
    die("streamed and whole decodes differ", whole);
  return whole;
}

void fuzzText(uint8_t mode, std::string_view text) {
  const Tokenizer &t = vocab((mode & 1) | ((mode >> 2) & 2));
  EncodeOptions o;
  o.parseSpecial = mode & 2;
  o.addSpecial = mode & 4;
  std::vector<TokenId> ids;
  std::string error;
  size_t bad = findInvalidUtf8(text);
  bool ok = t.encode(text, o, ids, error);
  if (bad != std::string_view::npos) {
    if (ok)
      die("invalid UTF-8 was encoded", std::string(text));
    if (error.find("byte offset " + std::to_string(bad) + " ") ==
        std::string::npos)
      die("the error names the wrong offset", error);
    return;
  }
  if (!ok)
    die("valid text failed to encode", error);
  for (TokenId id : ids)
    if (id < 0 || size_t(id) >= t.vocabSize())
      die("encode produced an id out of range", std::to_string(id));
  std::string back = decodeBoth(t, ids, true);
  std::string want(text);
  if (o.addSpecial && t.addBos())
    want = t.tokenText(t.bos()) + want;
  if (back != want)
    die("decode(encode(text)) != text", want);
}

void fuzzIds(const uint8_t *data, size_t size) {
  std::vector<TokenId> ids(size / 4);
  if (!ids.empty())
    std::memcpy(ids.data(), data, ids.size() * 4);
  // Keep most ids near the vocabulary so that decoding gets exercised.
  const Tokenizer &t = vocab(0);
  for (TokenId &id : ids)
    if (id >= 0)
      id %= TokenId(t.vocabSize() + 2);
  decodeBoth(t, ids, false);
}

void fuzzGguf(const uint8_t *data, size_t size) {
  std::string error;
  auto file = format::GgufFile::fromBytes(data, size, "fuzz", error,
                                          format::GgufContents::Shapes);
  if (!file)
    return;
  auto t = Tokenizer::load(file->info(), error);
  if (!t)
    return;
  std::vector<TokenId> ids;
  if (!t->encode("Hello <|im_end|> w\xc3\xb6rld 123 \xf0\x9f\xa6\x99\n", {},
                 ids, error)) {
    if (t->hasVocab())
      die("a loaded vocabulary failed on valid text", error);
    return;
  }
  decodeBoth(*t, ids, false);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  uint8_t mode = data[0];
  if (!(mode & 0x80))
    fuzzText(mode, std::string_view(reinterpret_cast<const char *>(data + 1),
                                    size - 1));
  else if (!(mode & 0x40))
    fuzzIds(data + 1, size - 1);
  else
    fuzzGguf(data + 1, size - 1);
  return 0;
}
