//===- Tokenizer.cpp - the GGUF tokenizer (byte-level BPE) ----------------===//
#include "runtime/tokenizer/Tokenizer.h"

#include "runtime/tokenizer/ByteLevel.h"
#include "runtime/tokenizer/PreTokenizer.h"
#include "runtime/tokenizer/Utf8.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <limits>
#include <optional>
#include <queue>

namespace strata::tokenizer {

using format::GgufValueType;
using format::MetaValue;
using format::ModelInfo;

namespace {

constexpr uint32_t bit(TokenAttr a) { return static_cast<uint32_t>(a); }

/// The attributes llama.cpp gives a token_type value (values it does not
/// know are Undefined).
uint32_t attrsOfType(int64_t type) {
  switch (static_cast<TokenType>(type)) {
  case TokenType::Normal:
    return bit(TokenAttr::Normal);
  case TokenType::Unknown:
    return bit(TokenAttr::Unknown);
  case TokenType::Control:
    return bit(TokenAttr::Control);
  case TokenType::UserDefined:
    return bit(TokenAttr::UserDefined);
  case TokenType::Unused:
    return bit(TokenAttr::Unused);
  case TokenType::Byte:
    return bit(TokenAttr::Byte);
  default:
    return 0;
  }
}

std::string quoted(std::string_view s) {
  // Token texts may hold anything; keep messages on one printable line.
  std::string out = "'";
  for (unsigned char c : s) {
    if (c == '\'' || c == '\\')
      out += fmt::format("\\{}", char(c));
    else if (c < 0x20 || c == 0x7F)
      out += fmt::format("\\x{:02x}", c);
    else
      out += char(c);
  }
  return out + "'";
}

/// The bytes a normal token's text spells (llama.cpp's llama_decode_text):
/// each code point maps back to its byte; one that spells no byte becomes
/// "[UNK_BYTE_0x<its UTF-8 in hex><the token's text>]", and an invalid
/// UTF-8 byte counts as U+FFFD.
std::string decodeByteLevel(std::string_view text) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    size_t length;
    uint32_t cp = 0xFFFD;
    if (classifyUtf8(text.substr(i), length) == Utf8Status::Complete)
      cp = decodeUtf8(text.data() + i, length);
    else
      length = 1;
    i += length;
    int b = codepointToByte(cp);
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
      continue;
    }
    std::string utf8;
    appendUtf8(utf8, cp);
    out += "[UNK_BYTE_0x";
    for (unsigned char c : utf8)
      out += fmt::format("{:02x}", c);
    out += text;
    out += "]";
  }
  return out;
}

/// A nonnegative integer metadata value that fits in int64.
std::optional<int64_t> nonNegative(const MetaValue &v) {
  std::optional<int64_t> i = v.asInt();
  if (!i || *i < 0)
    return std::nullopt;
  return i;
}

} // namespace

Tokenizer::~Tokenizer() = default;

std::string Tokenizer::noVocabMessage() const {
  if (model_.empty())
    return fmt::format("{}: has no tokenizer (no tokenizer.ggml.model)",
                       source_);
  return fmt::format("{}: has no tokenizer (tokenizer.ggml.model is '{}')",
                     source_, model_);
}

std::unique_ptr<Tokenizer> Tokenizer::load(const ModelInfo &info,
                                           std::string &error) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  t->source_ = info.source.empty() ? "<metadata>" : info.source;
  const MetaValue *model = info.findMeta("tokenizer.ggml.model");
  if (model && model->type != GgufValueType::String) {
    error = fmt::format("{}: tokenizer.ggml.model: expected a string, got {}",
                        t->source_, format::valueTypeName(model->type));
    return nullptr;
  }
  t->model_ = model ? model->s : "";
  if (!model || model->s == "none" || model->s == "no_vocab")
    return t;
  if (model->s != "gpt2") {
    error = fmt::format("{}: tokenizer.ggml.model: tokenizer '{}' is not "
                        "supported (strata reads 'gpt2', byte-level BPE, and "
                        "'none')",
                        t->source_, model->s);
    return nullptr;
  }
  if (!t->loadVocab(info, error)) {
    error = fmt::format("{}: {}", t->source_, error);
    return nullptr;
  }
  t->hasVocab_ = true;
  return t;
}

bool Tokenizer::loadVocab(const ModelInfo &info, std::string &error) {
  // The pre-tokenizer: llama.cpp falls back to a default regex where the key
  // is missing; strata supports only the ones it checks against llama.cpp.
  const MetaValue *pre = info.findMeta("tokenizer.ggml.pre");
  if (!pre) {
    error = fmt::format("tokenizer.ggml.pre: missing (the pre-tokenizer; "
                        "supported: {})",
                        PreTokenizer::supportedNames());
    return false;
  }
  if (pre->type != GgufValueType::String) {
    error = fmt::format("tokenizer.ggml.pre: expected a string, got {}",
                        format::valueTypeName(pre->type));
    return false;
  }
  preName_ = pre->s;
  pre_ = PreTokenizer::create(pre->s, error);
  if (!pre_) {
    error = "tokenizer.ggml.pre: " + error;
    return false;
  }

  // Token texts.
  const MetaValue *tokens = info.findMeta("tokenizer.ggml.tokens");
  if (!tokens) {
    error = "tokenizer.ggml.tokens: missing";
    return false;
  }
  if (tokens->type != GgufValueType::Array ||
      tokens->elemType != GgufValueType::String) {
    error = "tokenizer.ggml.tokens: expected an array of strings";
    return false;
  }
  const size_t n = tokens->array.size();
  if (n == 0) {
    error = "tokenizer.ggml.tokens: empty";
    return false;
  }
  if (n > size_t(std::numeric_limits<TokenId>::max())) {
    error = fmt::format("tokenizer.ggml.tokens: {} tokens, more than token "
                        "ids can number",
                        n);
    return false;
  }
  texts_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const MetaValue &v = tokens->array[i];
    if (v.type != GgufValueType::String) {
      error = fmt::format("tokenizer.ggml.tokens[{}]: not a string", i);
      return false;
    }
    // llama.cpp renames empty tokens so that every text stays unique.
    texts_[i] = v.s.empty() ? fmt::format("[EMPTY_{}]", i) : v.s;
  }
  idOfText_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    auto [it, inserted] = idOfText_.emplace(texts_[i], TokenId(i));
    if (!inserted) {
      error = fmt::format("tokenizer.ggml.tokens[{}]: text {} is also token "
                          "{}",
                          i, quoted(texts_[i]), it->second);
      return false;
    }
  }

  // Token types: all normal where the key is absent.
  attrs_.assign(n, bit(TokenAttr::Normal));
  if (const MetaValue *types = info.findMeta("tokenizer.ggml.token_type")) {
    if (types->type != GgufValueType::Array ||
        (!types->array.empty() && !types->array[0].isInteger())) {
      error = "tokenizer.ggml.token_type: expected an array of integers";
      return false;
    }
    if (types->array.size() < n) {
      error = fmt::format("tokenizer.ggml.token_type: {} entries for {} "
                          "tokens",
                          types->array.size(), n);
      return false;
    }
    for (size_t i = 0; i < n; ++i) {
      std::optional<int64_t> type = types->array[i].asInt();
      if (!types->array[i].isInteger() || !type) {
        error = fmt::format("tokenizer.ggml.token_type[{}]: not an integer", i);
        return false;
      }
      attrs_[i] = attrsOfType(*type);
    }
  }
  for (size_t i = 0; i < n; ++i) {
    // llama.cpp reads a byte token's value from its text "<0xHH>".
    if (!(attrs_[i] & bit(TokenAttr::Byte)))
      continue;
    const std::string &s = texts_[i];
    if (s.size() != 6 || s.compare(0, 3, "<0x") != 0 || s[5] != '>' ||
        !std::isxdigit(uint8_t(s[3])) || !std::isxdigit(uint8_t(s[4]))) {
      error = fmt::format("tokenizer.ggml.tokens[{}]: byte token {} is not "
                          "spelled <0xHH>",
                          i, quoted(s));
      return false;
    }
  }

  // The tokens that spell one byte each, where BPE starts.
  for (int b = 0; b < 256; ++b) {
    auto it = idOfText_.find(byteToText(uint8_t(b)));
    byteTokens_[b] = it == idOfText_.end() ? kNoToken : it->second;
  }

  // Merges "LEFT RIGHT", rank = position. Both halves and their
  // concatenation must be tokens: BPE works on token ids here.
  const MetaValue *merges = info.findMeta("tokenizer.ggml.merges");
  if (!merges) {
    error = "tokenizer.ggml.merges: missing";
    return false;
  }
  if (merges->type != GgufValueType::Array ||
      merges->elemType != GgufValueType::String) {
    error = "tokenizer.ggml.merges: expected an array of strings";
    return false;
  }
  if (merges->array.size() > size_t(std::numeric_limits<int32_t>::max())) {
    error = "tokenizer.ggml.merges: more merges than ranks can number";
    return false;
  }
  merges_.reserve(merges->array.size());
  std::string joined;
  for (size_t r = 0; r < merges->array.size(); ++r) {
    const MetaValue &v = merges->array[r];
    if (v.type != GgufValueType::String) {
      error = fmt::format("tokenizer.ggml.merges[{}]: not a string", r);
      return false;
    }
    const std::string &m = v.s;
    // llama.cpp splits at the first space after the first byte.
    size_t space = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    if (space == std::string::npos) {
      error = fmt::format("tokenizer.ggml.merges[{}] {}: not two tokens "
                          "separated by a space",
                          r, quoted(m));
      return false;
    }
    std::string_view left(m.data(), space);
    std::string_view right(m.data() + space + 1, m.size() - space - 1);
    auto l = idOfText_.find(left);
    auto rt = idOfText_.find(right);
    joined.assign(left);
    joined.append(right);
    auto j = idOfText_.find(joined);
    std::string_view missing = l == idOfText_.end()    ? left
                               : rt == idOfText_.end() ? right
                               : j == idOfText_.end() ? std::string_view(joined)
                                                      : std::string_view();
    if (l == idOfText_.end() || rt == idOfText_.end() || j == idOfText_.end()) {
      error = fmt::format("tokenizer.ggml.merges[{}] {}: {} is not a token", r,
                          quoted(m), quoted(missing));
      return false;
    }
    // A repeated pair keeps its first (lowest) rank, as in llama.cpp.
    merges_.emplace(pairKey(l->second, rt->second),
                    Merge{int32_t(r), j->second});
  }

  // Special token ids. llama.cpp defaults BOS and EOS to 11 for gpt2
  // vocabularies (where that id exists).
  if (n > 11)
    bos_ = eos_ = 11;
  struct SpecialKey {
    const char *key;
    TokenId Tokenizer::*field;
  };
  static const SpecialKey kSpecialKeys[] = {
#define STRATA_SPECIAL_ID(Field, KEY) {KEY, &Tokenizer::Field##_},
#include "runtime/tokenizer/SpecialTokens.def"
  };
  for (const SpecialKey &k : kSpecialKeys) {
    const MetaValue *v = info.findMeta(k.key);
    if (!v)
      continue;
    std::optional<int64_t> id = v->isInteger() ? nonNegative(*v) : std::nullopt;
    if (!id) {
      error = fmt::format("{}: expected a nonnegative integer, got {}", k.key,
                          v->toString());
      return false;
    }
    if (size_t(*id) >= n) {
      error = fmt::format("{}: token id {} is out of range (vocabulary of {} "
                          "tokens)",
                          k.key, *id, n);
      return false;
    }
    this->*k.field = TokenId(*id);
  }
  for (auto [key, field] :
       {std::pair{"tokenizer.ggml.add_bos_token", &addBos_},
        std::pair{"tokenizer.ggml.add_eos_token", &addEos_}}) {
    const MetaValue *v = info.findMeta(key);
    if (!v)
      continue;
    if (v->type != GgufValueType::Bool) {
      error = fmt::format("{}: expected a bool, got {}", key,
                          format::valueTypeName(v->type));
      return false;
    }
    *field = v->b;
  }
  if (addBos_ && bos_ == kNoToken) {
    error = "tokenizer.ggml.add_bos_token: true, but there is no BOS token";
    return false;
  }
  if (addEos_ && eos_ == kNoToken) {
    error = "tokenizer.ggml.add_eos_token: true, but there is no EOS token";
    return false;
  }

  deriveAttributes();

  // Special tokens recognised in text: longest first. (llama.cpp's sort is
  // not stable; among equal lengths strata takes the lower id first.)
  for (size_t i = 0; i < n; ++i)
    if (attrs_[i] & (bit(TokenAttr::Control) | bit(TokenAttr::UserDefined) |
                     bit(TokenAttr::Unknown)))
      specialTokens_.push_back(TokenId(i));
  std::sort(specialTokens_.begin(), specialTokens_.end(),
            [&](TokenId a, TokenId b) {
              if (texts_[a].size() != texts_[b].size())
                return texts_[a].size() > texts_[b].size();
              return a < b;
            });

  // Every token's bytes, once.
  pieces_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t a = attrs_[i];
    if (a & (bit(TokenAttr::Unknown) | bit(TokenAttr::Control) |
             bit(TokenAttr::UserDefined)))
      pieces_[i] = texts_[i];
    else if (a & bit(TokenAttr::Normal))
      pieces_[i] = decodeByteLevel(texts_[i]);
    else if (a & bit(TokenAttr::Byte))
      pieces_[i] =
          std::string(1, char(std::stoi(texts_[i].substr(3, 2), nullptr, 16)));
  }
  return true;
}

void Tokenizer::deriveAttributes() {
  const size_t n = texts_.size();
  const uint32_t control = bit(TokenAttr::Control);
  auto findText = [&](std::string_view text) {
    auto it = idOfText_.find(text);
    return it == idOfText_.end() ? kNoToken : it->second;
  };

  // Special tokens guessed from their text where no key named them.
  struct SpecialText {
    TokenId Tokenizer::*field;
    const char *text;
  };
  static const SpecialText kSpecialTexts[] = {
#define STRATA_SPECIAL_TEXT(Field, TEXT) {&Tokenizer::Field##_, TEXT},
#include "runtime/tokenizer/SpecialTokens.def"
  };
  for (size_t i = 0; i < n; ++i) {
    for (const SpecialText &s : kSpecialTexts) {
      if (this->*s.field != kNoToken || texts_[i] != s.text)
        continue;
      this->*s.field = TokenId(i);
      attrs_[i] |= control;
    }
  }
  // Control tokens named "unused" are unused.
  for (size_t i = 0; i < n; ++i)
    if ((attrs_[i] & control) && texts_[i].find("unused") != std::string::npos)
      attrs_[i] |= bit(TokenAttr::Unused);

  // End-of-generation tokens.
  endOfGeneration_.assign(n, false);
  for (TokenId id : {fimPad_, fimRep_, fimSep_})
    if (id != kNoToken)
      endOfGeneration_[id] = true;
  static const char *const kEogTexts[] = {
#define STRATA_EOG_TEXT(TEXT) TEXT,
#include "runtime/tokenizer/SpecialTokens.def"
  };
  for (const char *text : kEogTexts) {
    TokenId id = findText(text);
    if (id == kNoToken)
      continue;
    endOfGeneration_[id] = true;
    attrs_[id] |= control;
  }
  // gpt-oss: these are always rendered (llama.cpp makes them USER_DEFINED).
  for (const char *text :
       {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"})
    if (TokenId id = findText(text); id != kNoToken)
      attrs_[id] = bit(TokenAttr::UserDefined);
  for (TokenId id : {eos_, eot_, eom_})
    if (id != kNoToken)
      endOfGeneration_[id] = true;
  // o200k_harmony and solar-open: <|end|> does not end generation where
  // <|return|> and <|call|> (or <|calls|> and <|flush|>) do.
  auto eogText = [&](const char *text) {
    TokenId id = findText(text);
    return id != kNoToken && endOfGeneration_[id];
  };
  bool hasCall = eogText("<|call|>") || eogText("<|calls|>");
  if (eogText("<|end|>") && hasCall &&
      (eogText("<|return|>") || eogText("<|flush|>"))) {
    TokenId end = findText("<|end|>");
    endOfGeneration_[end] = false;
    attrs_[end] = bit(TokenAttr::UserDefined);
  }
  // gemma4 and plamo2: </s> is a normal token.
  if (eogText("</s>") &&
      (eogText("<|tool_response>") || eogText("<|plamo:eos|>"))) {
    TokenId s = findText("</s>");
    endOfGeneration_[s] = false;
    attrs_[s] = bit(TokenAttr::Normal);
  }
}

bool Tokenizer::isEndOfGeneration(TokenId id) const {
  return id >= 0 && size_t(id) < endOfGeneration_.size() &&
         endOfGeneration_[id];
}

void Tokenizer::encodeWord(std::string_view word,
                           std::vector<TokenId> &ids) const {
  // One symbol per byte, linked in a list; a heap of candidate merges
  // ordered by (rank, position of the left symbol). A candidate is stale
  // once either symbol changed; it is then skipped, as in llama.cpp.
  struct Symbol {
    TokenId id;
    int32_t prev, next;
    uint8_t byte; ///< the first byte (for a symbol without a token)
  };
  struct Candidate {
    int32_t rank, left, right;
    TokenId leftId, rightId, result;
    bool operator>(const Candidate &o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  const int32_t n = int32_t(word.size());
  if (n == 0)
    return;
  std::vector<Symbol> sym(n);
  for (int32_t i = 0; i < n; ++i)
    sym[i] = {byteTokens_[uint8_t(word[i])], i - 1, i + 1 < n ? i + 1 : -1,
              uint8_t(word[i])};
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0)
      return;
    TokenId l = sym[left].id, r = sym[right].id;
    if (l == kNoToken || r == kNoToken)
      return;
    auto it = merges_.find(pairKey(l, r));
    if (it == merges_.end())
      return;
    heap.push({it->second.rank, left, right, l, r, it->second.result});
  };
  for (int32_t i = 0; i + 1 < n; ++i)
    consider(i, i + 1);
  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    Symbol &l = sym[c.left];
    if (l.id != c.leftId || l.next != c.right || sym[c.right].id != c.rightId)
      continue;
    l.id = c.result;
    Symbol &r = sym[c.right];
    l.next = r.next;
    if (r.next >= 0)
      sym[r.next].prev = c.left;
    r.id = kNoToken; // dead: no longer linked
    r.prev = r.next = -1;
    consider(l.prev, c.left);
    consider(c.left, l.next);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) {
    if (sym[i].id != kNoToken) {
      ids.push_back(sym[i].id);
      continue;
    }
    // A byte whose spelling is not a token: llama.cpp then looks up each
    // byte of the spelling as a one-byte token and drops those it lacks.
    for (char c : byteToText(sym[i].byte)) {
      auto it = idOfText_.find(std::string_view(&c, 1));
      if (it != idOfText_.end())
        ids.push_back(it->second);
    }
  }
}

bool Tokenizer::encode(std::string_view text, const EncodeOptions &options,
                       std::vector<TokenId> &ids, std::string &error) const {
  if (!hasVocab_) {
    error = noVocabMessage();
    return false;
  }
  if (size_t bad = findInvalidUtf8(text); bad != std::string_view::npos) {
    error = fmt::format("invalid UTF-8 at byte offset {} (byte 0x{:02x})", bad,
                        uint8_t(text[bad]));
    return false;
  }
  if (text.size() > size_t(std::numeric_limits<int32_t>::max())) {
    error = "text longer than 2 GiB";
    return false;
  }

  // Fragments: a token, or a stretch [offset, offset + length) of raw text.
  struct Fragment {
    TokenId token;
    uint32_t offset, length;
  };
  std::vector<Fragment> fragments, next;
  if (!text.empty())
    fragments.push_back({kNoToken, 0, uint32_t(text.size())});
  const uint32_t skipUnlessParsing =
      bit(TokenAttr::Control) | bit(TokenAttr::Unknown);
  for (TokenId special : specialTokens_) {
    if (!options.parseSpecial && (attrs_[special] & skipUnlessParsing))
      continue;
    const std::string &s = texts_[special];
    next.clear();
    bool changed = false;
    for (const Fragment &f : fragments) {
      if (f.token != kNoToken || f.length < s.size()) {
        next.push_back(f);
        continue;
      }
      std::string_view raw = text.substr(f.offset, f.length);
      size_t from = 0;
      for (size_t at; (at = raw.find(s, from)) != std::string_view::npos;
           from = at + s.size()) {
        if (at > from)
          next.push_back(
              {kNoToken, uint32_t(f.offset + from), uint32_t(at - from)});
        next.push_back({special, 0, 0});
        changed = true;
      }
      if (from < raw.size())
        next.push_back(
            {kNoToken, uint32_t(f.offset + from), uint32_t(raw.size() - from)});
    }
    if (changed)
      fragments.swap(next);
  }

  if (options.addSpecial && addBos_)
    ids.push_back(bos_);
  std::vector<std::string_view> words;
  for (const Fragment &f : fragments) {
    if (f.token != kNoToken) {
      ids.push_back(f.token);
      continue;
    }
    words.clear();
    if (!pre_->split(text.substr(f.offset, f.length), words, error))
      return false;
    for (std::string_view w : words)
      encodeWord(w, ids);
  }
  if (options.addSpecial && addEos_)
    ids.push_back(eos_);
  return true;
}

std::string_view Tokenizer::piece(TokenId id, bool renderSpecial) const {
  if (!renderSpecial &&
      (attrs_[id] & (bit(TokenAttr::Control) | bit(TokenAttr::Unknown))))
    return {};
  return pieces_[id];
}

bool Tokenizer::decode(std::span<const TokenId> ids, bool renderSpecial,
                       std::string &out, std::string &error) const {
  if (!hasVocab_) {
    error = noVocabMessage();
    return false;
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || size_t(ids[i]) >= texts_.size()) {
      error = fmt::format("token id {} at position {} is out of range "
                          "(vocabulary of {} tokens)",
                          ids[i], i, texts_.size());
      return false;
    }
  }
  for (TokenId id : ids)
    out += piece(id, renderSpecial);
  return true;
}

bool StreamingDecoder::push(TokenId id, std::string &out, std::string &error) {
  std::string bytes;
  const TokenId one[] = {id};
  if (!tokenizer_.decode(one, renderSpecial_, bytes, error)) {
    // Name the token's place in the whole stream, not in this one-id call.
    if (tokenizer_.hasVocab())
      error = fmt::format("token id {} at position {} is out of range "
                          "(vocabulary of {} tokens)",
                          id, position_, tokenizer_.vocabSize());
    return false;
  }
  ++position_;
  pending_ += bytes;
  // Emit everything up to the first character that is still unfinished at
  // the end of the buffer; invalid bytes cannot be finished and go out.
  size_t i = 0;
  while (i < pending_.size()) {
    size_t length;
    Utf8Status st = classifyUtf8(std::string_view(pending_).substr(i), length);
    if (st == Utf8Status::Truncated)
      break;
    i += length;
  }
  out.append(pending_, 0, i);
  pending_.erase(0, i);
  return true;
}

std::string StreamingDecoder::flush() {
  std::string rest;
  rest.swap(pending_);
  return rest;
}

} // namespace strata::tokenizer
