//===- TokenizerTest.cpp - the GGUF tokenizer on hand-built vocabularies --===//
//
// Each vocabulary is written with runtime/format's GGUF writer and read back,
// as a model file would be: the 256 byte tokens first (id = byte), then the
// tokens a test names.
//
//===----------------------------------------------------------------------===//
#include "runtime/tokenizer/Tokenizer.h"
#include "runtime/format/Gguf.h"
#include "runtime/tokenizer/ByteLevel.h"
#include "runtime/tokenizer/PreTokenizer.h"
#include "runtime/tokenizer/Utf8.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <unistd.h>

using namespace strata;
using namespace strata::tokenizer;
using format::GgufValueType;
using format::MetaValue;
using format::ModelInfo;

namespace {

/// Token text in the byte-level spelling: every byte as its code point.
std::string spell(std::string_view bytes) {
  std::string s;
  for (unsigned char b : bytes)
    s += byteToText(b);
  return s;
}

struct VocabSpec {
  std::string model = "gpt2";
  std::string pre = "qwen2";
  /// Tokens after the 256 byte tokens: text (already spelled) and type.
  std::vector<std::pair<std::string, TokenType>> extra;
  /// Merges "LEFT RIGHT" (spelled).
  std::vector<std::string> merges;
  /// Further metadata.
  std::vector<std::pair<std::string, MetaValue>> keys;
  bool withTypes = true;
  bool withByteTokens = true;
};

/// The vocabulary most tests use: "he", "ll", "hell", "hello", "Ġw" and
/// "Ġwo", one CONTROL and one USER_DEFINED token.
VocabSpec basicSpec() {
  VocabSpec v;
  v.extra = {
      {"he", TokenType::Normal},        {"ll", TokenType::Normal},
      {"hell", TokenType::Normal},      {"hello", TokenType::Normal},
      {spell(" w"), TokenType::Normal}, {spell(" wo"), TokenType::Normal},
      {"<|ctl|>", TokenType::Control},  {"<ud>", TokenType::UserDefined}};
  v.merges = {
      "h e", "l l", "he ll", "hell o", spell(" ") + " w", spell(" w") + " o"};
  return v;
}

// Ids of basicSpec's tokens ("ll", "hell" and "Ġw" are only merge steps).
constexpr TokenId kHe = 256, kHello = 259;
constexpr TokenId kSpaceWo = 261, kCtl = 262, kUd = 263;

/// Writes \p spec as a GGUF and loads its tokenizer; nullptr and \p error
/// if the tokenizer refuses it.
std::unique_ptr<Tokenizer> loadSpec(const VocabSpec &spec, std::string &error) {
  ModelInfo info;
  info.addMeta("general.architecture", MetaValue::makeString("qwen2"));
  if (!spec.model.empty())
    info.addMeta("tokenizer.ggml.model", MetaValue::makeString(spec.model));
  if (!spec.pre.empty())
    info.addMeta("tokenizer.ggml.pre", MetaValue::makeString(spec.pre));
  std::vector<MetaValue> tokens, types, merges;
  if (spec.withByteTokens)
    for (int b = 0; b < 256; ++b) {
      tokens.push_back(MetaValue::makeString(byteToText(uint8_t(b))));
      types.push_back(MetaValue::makeInt(1, GgufValueType::Int32));
    }
  for (const auto &[text, type] : spec.extra) {
    tokens.push_back(MetaValue::makeString(text));
    types.push_back(MetaValue::makeInt(int64_t(type), GgufValueType::Int32));
  }
  for (const std::string &m : spec.merges)
    merges.push_back(MetaValue::makeString(m));
  info.addMeta("tokenizer.ggml.tokens",
               MetaValue::makeArray(GgufValueType::String, tokens));
  if (spec.withTypes)
    info.addMeta("tokenizer.ggml.token_type",
                 MetaValue::makeArray(GgufValueType::Int32, types));
  info.addMeta("tokenizer.ggml.merges",
               MetaValue::makeArray(GgufValueType::String, merges));
  for (const auto &[key, value] : spec.keys)
    info.addMeta(key, value);

  static int serial = 0;
  std::string path = (std::filesystem::temp_directory_path() /
                      ("strata-tok-" + std::to_string(getpid()) + "-" +
                       std::to_string(serial++) + ".gguf"))
                         .string();
  if (!format::writeGguf(path, info, {}, error))
    return nullptr;
  auto file = format::GgufFile::open(path, error);
  std::filesystem::remove(path);
  if (!file)
    return nullptr;
  return Tokenizer::load(file->info(), error);
}

std::unique_ptr<Tokenizer> mustLoad(const VocabSpec &spec) {
  std::string error;
  auto t = loadSpec(spec, error);
  EXPECT_TRUE(t) << error;
  return t;
}

std::vector<TokenId> encode(const Tokenizer &t, std::string_view text,
                            bool parseSpecial = true, bool addSpecial = true) {
  std::vector<TokenId> ids;
  std::string error;
  EncodeOptions o;
  o.parseSpecial = parseSpecial;
  o.addSpecial = addSpecial;
  EXPECT_TRUE(t.encode(text, o, ids, error)) << error;
  return ids;
}

std::vector<TokenId> bytesOf(std::string_view s) {
  std::vector<TokenId> ids;
  for (unsigned char c : s)
    ids.push_back(TokenId(c));
  return ids;
}

std::string loadError(const VocabSpec &spec) {
  std::string error;
  EXPECT_FALSE(loadSpec(spec, error));
  return error;
}

} // namespace

//===----------------------------------------------------------------------===//
// Byte-level spelling and UTF-8
//===----------------------------------------------------------------------===//

TEST(ByteLevel, IsGpt2sMapping) {
  EXPECT_EQ(byteToCodepoint('!'), uint32_t('!'));
  EXPECT_EQ(byteToCodepoint(0xAE), 0xAEu);
  EXPECT_EQ(byteToCodepoint(0), 0x100u);
  EXPECT_EQ(byteToCodepoint(' '), 0x120u);  // 'Ġ'
  EXPECT_EQ(byteToCodepoint('\n'), 0x10Au); // 'Ċ'
  EXPECT_EQ(byteToCodepoint(0xAD), 0x143u); // the last remapped byte
  for (int b = 0; b < 256; ++b)
    EXPECT_EQ(codepointToByte(byteToCodepoint(uint8_t(b))), b);
  EXPECT_EQ(codepointToByte(' '), -1);
  EXPECT_EQ(codepointToByte(0x144), -1);
}

TEST(Utf8, FindsTheFirstInvalidByte) {
  EXPECT_EQ(findInvalidUtf8("plain ascii"), std::string_view::npos);
  EXPECT_EQ(findInvalidUtf8("é中🦙"), std::string_view::npos);
  EXPECT_EQ(findInvalidUtf8("ab\xff"), 2u);
  EXPECT_EQ(findInvalidUtf8("a\xc3"), 1u);            // truncated
  EXPECT_EQ(findInvalidUtf8("a\xc0\x80"), 1u);        // overlong
  EXPECT_EQ(findInvalidUtf8("\xed\xa0\x80"), 0u);     // surrogate
  EXPECT_EQ(findInvalidUtf8("\xf4\x90\x80\x80"), 0u); // above U+10FFFF
  size_t len;
  EXPECT_EQ(classifyUtf8("\xe4\xb8", len), Utf8Status::Truncated);
  EXPECT_EQ(classifyUtf8("\xe4\x41", len), Utf8Status::Invalid);
}

//===----------------------------------------------------------------------===//
// Pre-tokenizers
//===----------------------------------------------------------------------===//

namespace {
std::vector<std::string> split(std::string_view pre, std::string_view text) {
  std::string error;
  auto p = PreTokenizer::create(pre, error);
  EXPECT_TRUE(p) << error;
  std::vector<std::string_view> words;
  EXPECT_TRUE(p->split(text, words, error)) << error;
  return {words.begin(), words.end()};
}
using Words = std::vector<std::string>;
} // namespace

TEST(PreTokenizer, Qwen2Splits) {
  EXPECT_EQ(split("qwen2", "Hello world's  x"),
            (Words{"Hello", " world", "'s", " ", " x"}));
  // Contractions in either case; long s and Kelvin are not folded.
  EXPECT_EQ(split("qwen2", "I'M it'Ll a'ſ"),
            (Words{"I", "'M", " it", "'Ll", " a", "'ſ"}));
  // Digits one at a time; punctuation takes one leading space and trailing
  // newlines; whitespace before a newline goes with it.
  EXPECT_EQ(split("qwen2", "2024 !?\n\n  \n\tx"),
            (Words{"2", "0", "2", "4", " !?\n\n", "  \n", "\tx"}));
  // A whitespace run before a word leaves its last character to the word,
  // and keeps all of it at the end.
  EXPECT_EQ(split("qwen2", "a   b   "), (Words{"a", "  ", " b", "   "}));
  // U+180E is not White_Space (PCRE2's \s would take it).
  EXPECT_EQ(split("qwen2", "\u180e "), (Words{"\u180e", " "}));
  // Combining marks break letter runs in qwen2 (one mark may lead the next
  // run, like any non-letter) ...
  EXPECT_EQ(split("qwen2", "cafe\u0301s"), (Words{"cafe", "\u0301s"}));
  EXPECT_EQ(split("qwen2", "e\u0301\u0301"), (Words{"e", "\u0301\u0301"}));
  // ... and belong to them in qwen35.
  EXPECT_EQ(split("qwen35", "cafe\u0301s"), (Words{"cafe\u0301s"}));
  EXPECT_EQ(split("qwen35", " \u0301!"), (Words{" \u0301", "!"}));
}

TEST(PreTokenizer, RefusesUnknownNames) {
  std::string error;
  EXPECT_FALSE(PreTokenizer::create("llama3", error));
  EXPECT_NE(error.find("pre-tokenizer 'llama3' is not supported"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("qwen35"), std::string::npos) << error;
}

//===----------------------------------------------------------------------===//
// Encoding
//===----------------------------------------------------------------------===//

TEST(Tokenizer, MergesByRank) {
  auto t = mustLoad(basicSpec());
  ASSERT_TRUE(t);
  EXPECT_TRUE(t->hasVocab());
  EXPECT_EQ(t->vocabSize(), 264u);
  EXPECT_EQ(encode(*t, "hello"), (std::vector<TokenId>{kHello}));
  EXPECT_EQ(encode(*t, "hello world"),
            (std::vector<TokenId>{kHello, kSpaceWo, 'r', 'l', 'd'}));
  EXPECT_EQ(encode(*t, "hel"), (std::vector<TokenId>{kHe, 'l'}));
  // Bytes outside any merge are their byte tokens.
  EXPECT_EQ(encode(*t, "\x01\xc3\xa9"), bytesOf("\x01\xc3\xa9"));
}

TEST(Tokenizer, LowerRankFirstLeftmostOnTies) {
  VocabSpec v;
  v.extra = {{"ab", TokenType::Normal},
             {"bc", TokenType::Normal},
             {"aa", TokenType::Normal}};
  v.merges = {"b c", "a b", "a a"};
  auto t = mustLoad(v);
  ASSERT_TRUE(t);
  // "b c" (rank 0) wins over "a b" (rank 1).
  EXPECT_EQ(encode(*t, "abc"), (std::vector<TokenId>{'a', 257}));
  // Equal ranks: the leftmost pair merges first.
  EXPECT_EQ(encode(*t, "aaa"), (std::vector<TokenId>{258, 'a'}));
  v.merges = {"a b", "b c", "a a"};
  t = mustLoad(v);
  ASSERT_TRUE(t);
  EXPECT_EQ(encode(*t, "abc"), (std::vector<TokenId>{256, 'c'}));
}

TEST(Tokenizer, SpecialTokensInText) {
  auto t = mustLoad(basicSpec());
  ASSERT_TRUE(t);
  EXPECT_EQ(encode(*t, "hello<|ctl|>hello<ud>"),
            (std::vector<TokenId>{kHello, kCtl, kHello, kUd}));
  // Without parsing, control tokens are text; user-defined ones are still
  // recognised (llama.cpp's parse_special = false).
  std::vector<TokenId> want = bytesOf("<|ctl|");
  want.push_back('>');
  want.push_back(kUd);
  EXPECT_EQ(encode(*t, "<|ctl|><ud>", /*parseSpecial=*/false), want);
}

TEST(Tokenizer, LongerSpecialTokensCutFirst) {
  // llama.cpp cuts the text by each special token in turn, longest first,
  // not leftmost first: "abcd" is "a" + "bcd", although "ab" starts earlier.
  VocabSpec v;
  v.extra = {{"ab", TokenType::UserDefined}, {"bcd", TokenType::UserDefined}};
  auto t = mustLoad(v);
  ASSERT_TRUE(t);
  EXPECT_EQ(encode(*t, "abcd"), (std::vector<TokenId>{'a', 257}));
  EXPECT_EQ(encode(*t, "abab"), (std::vector<TokenId>{256, 256}));
}

TEST(Tokenizer, ControlLookingTextsBecomeControl) {
  // As in llama.cpp: <|im_end|> ends generation and is a control token
  // whatever its type says.
  VocabSpec v;
  v.extra = {{"<|im_end|>", TokenType::Normal}};
  auto t = mustLoad(v);
  ASSERT_TRUE(t);
  EXPECT_TRUE(t->hasAttr(256, TokenAttr::Control));
  EXPECT_TRUE(t->isEndOfGeneration(256));
  EXPECT_EQ(t->eot(), 256);
  EXPECT_EQ(encode(*t, "<|im_end|>"), (std::vector<TokenId>{256}));
}

TEST(Tokenizer, AddsBosWhereTheVocabularyAsks) {
  VocabSpec v = basicSpec();
  v.keys = {{"tokenizer.ggml.bos_token_id", MetaValue::makeUInt(kCtl)},
            {"tokenizer.ggml.add_bos_token", MetaValue::makeBool(true)}};
  auto t = mustLoad(v);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->bos(), kCtl);
  EXPECT_EQ(encode(*t, "hello"), (std::vector<TokenId>{kCtl, kHello}));
  EXPECT_EQ(encode(*t, "hello", true, /*addSpecial=*/false),
            (std::vector<TokenId>{kHello}));
  // Without the key, BPE vocabularies add nothing (Qwen's case).
  t = mustLoad(basicSpec());
  ASSERT_TRUE(t);
  EXPECT_FALSE(t->addBos());
  EXPECT_EQ(encode(*t, "hello"), (std::vector<TokenId>{kHello}));
}

TEST(Tokenizer, InvalidUtf8IsAnErrorNamingTheOffset) {
  auto t = mustLoad(basicSpec());
  ASSERT_TRUE(t);
  std::vector<TokenId> ids;
  std::string error;
  EXPECT_FALSE(t->encode("hello \xe4\xb8", {}, ids, error));
  EXPECT_EQ(error, "invalid UTF-8 at byte offset 6 (byte 0xe4)");
}

//===----------------------------------------------------------------------===//
// Decoding
//===----------------------------------------------------------------------===//

TEST(Tokenizer, DecodesBytesAndSpecials) {
  auto t = mustLoad(basicSpec());
  ASSERT_TRUE(t);
  std::string out, error;
  std::vector<TokenId> ids = {kHello, kSpaceWo, kCtl, kUd, 0xC3, 0xA9};
  ASSERT_TRUE(t->decode(ids, true, out, error)) << error;
  EXPECT_EQ(out, "hello wo<|ctl|><ud>é");
  out.clear();
  ASSERT_TRUE(t->decode(ids, false, out, error)) << error;
  EXPECT_EQ(out, "hello wo<ud>é");
  out.clear();
  std::vector<TokenId> bad = {kHello, 264};
  EXPECT_FALSE(t->decode(bad, true, out, error));
  EXPECT_EQ(error, "token id 264 at position 1 is out of range (vocabulary "
                   "of 264 tokens)");
}

TEST(StreamingDecoder, HoldsASplitCharacterUntilItsLastByte) {
  auto t = mustLoad(basicSpec());
  ASSERT_TRUE(t);
  StreamingDecoder d(*t);
  std::string out, error;
  // "é🦙" as single bytes: nothing comes out until a character is whole.
  ASSERT_TRUE(d.push(0xC3, out, error));
  EXPECT_EQ(out, "");
  EXPECT_EQ(d.pendingBytes(), 1u);
  ASSERT_TRUE(d.push(0xA9, out, error));
  EXPECT_EQ(out, "é");
  for (TokenId b : {0xF0, 0x9F, 0xA6})
    ASSERT_TRUE(d.push(b, out, error));
  EXPECT_EQ(out, "é");
  ASSERT_TRUE(d.push(0x99, out, error));
  EXPECT_EQ(out, "é🦙");
  // A byte that can never complete a character is not held.
  ASSERT_TRUE(d.push(0xFF, out, error));
  EXPECT_EQ(out, "é🦙\xff");
  // The end flushes an unfinished character.
  ASSERT_TRUE(d.push(0xE4, out, error));
  EXPECT_EQ(d.flush(), "\xe4");
  EXPECT_EQ(d.pendingBytes(), 0u);
  EXPECT_FALSE(d.push(9999, out, error));
  EXPECT_EQ(error, "token id 9999 at position 8 is out of range (vocabulary "
                   "of 264 tokens)");
}

TEST(Tokenizer, RoundTripsText) {
  auto t = mustLoad(basicSpec());
  ASSERT_TRUE(t);
  const char *text = "hello<|ctl|> world\n\t 😀 e\u0301 <ud>!";
  std::string out, error;
  ASSERT_TRUE(t->decode(encode(*t, text), true, out, error)) << error;
  EXPECT_EQ(out, text);
}

//===----------------------------------------------------------------------===//
// Files without a tokenizer, and hostile ones
//===----------------------------------------------------------------------===//

TEST(Tokenizer, NoVocabularyLoadsButRefusesText) {
  for (const char *model : {"none", ""}) {
    VocabSpec v;
    v.model = model;
    auto t = mustLoad(v);
    ASSERT_TRUE(t);
    EXPECT_FALSE(t->hasVocab());
    std::vector<TokenId> ids;
    std::string error;
    EXPECT_FALSE(t->encode("hi", {}, ids, error));
    EXPECT_NE(error.find("has no tokenizer"), std::string::npos) << error;
    std::string out;
    EXPECT_FALSE(t->decode(ids, true, out, error));
  }
}

TEST(Tokenizer, RefusesOtherModelsAndPreTokenizersByName) {
  VocabSpec v = basicSpec();
  v.model = "llama";
  EXPECT_NE(loadError(v).find("tokenizer.ggml.model: tokenizer 'llama' is "
                              "not supported"),
            std::string::npos);
  v = basicSpec();
  v.pre = "llama3";
  EXPECT_NE(loadError(v).find("tokenizer.ggml.pre: pre-tokenizer 'llama3' is "
                              "not supported"),
            std::string::npos);
  v.pre = "";
  EXPECT_NE(loadError(v).find("tokenizer.ggml.pre: missing"),
            std::string::npos);
}

TEST(Tokenizer, HostileVocabularies) {
  VocabSpec v = basicSpec();
  v.merges.push_back("he zz");
  EXPECT_NE(loadError(v).find("tokenizer.ggml.merges[6] 'he zz': 'zz' is "
                              "not a token"),
            std::string::npos)
      << loadError(v);
  v = basicSpec();
  v.merges.push_back("o w");
  EXPECT_NE(loadError(v).find("tokenizer.ggml.merges[6] 'o w': 'ow' is not "
                              "a token"),
            std::string::npos);
  v = basicSpec();
  v.merges.push_back("hello");
  EXPECT_NE(loadError(v).find("tokenizer.ggml.merges[6] 'hello': not two "
                              "tokens separated by a space"),
            std::string::npos);
  v = basicSpec();
  v.keys = {{"tokenizer.ggml.eos_token_id", MetaValue::makeUInt(264)}};
  EXPECT_NE(loadError(v).find("tokenizer.ggml.eos_token_id: token id 264 is "
                              "out of range (vocabulary of 264 tokens)"),
            std::string::npos);
  v = basicSpec();
  v.keys = {{"tokenizer.ggml.bos_token_id", MetaValue::makeInt(-1)}};
  EXPECT_NE(loadError(v).find("tokenizer.ggml.bos_token_id: expected a "
                              "nonnegative integer"),
            std::string::npos);
  v = basicSpec();
  v.extra.push_back({"he", TokenType::Normal});
  EXPECT_NE(loadError(v).find("tokenizer.ggml.tokens[264]: text 'he' is also "
                              "token 256"),
            std::string::npos);
  v = basicSpec();
  v.extra.push_back({"<0xZZ>", TokenType::Byte});
  EXPECT_NE(loadError(v).find("byte token '<0xZZ>' is not spelled <0xHH>"),
            std::string::npos);
  v = basicSpec();
  v.keys = {{"tokenizer.ggml.add_bos_token", MetaValue::makeUInt(1)}};
  EXPECT_NE(loadError(v).find("tokenizer.ggml.add_bos_token: expected a bool"),
            std::string::npos);
}

TEST(Tokenizer, MissingByteTokensDropBytesAsLlamaCppDoes) {
  // Without byte tokens a byte that no merge covers has no token; llama.cpp
  // then drops it (after trying its spelling's bytes as one-byte tokens).
  VocabSpec v;
  v.withByteTokens = false;
  v.extra = {{"a", TokenType::Normal}, {"b", TokenType::Normal}};
  v.merges = {};
  auto t = mustLoad(v);
  ASSERT_TRUE(t);
  EXPECT_EQ(encode(*t, "abc"), (std::vector<TokenId>{0, 1}));
}
