//===- PreTokenizer.cpp - regex word splitting through PCRE2 --------------===//
#include "runtime/tokenizer/PreTokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <fmt/format.h>

namespace strata::tokenizer {

namespace {

struct PreTokenizerDef {
  const char *name;
  const char *regex;
};

constexpr PreTokenizerDef kPreTokenizers[] = {
#define STRATA_PRE_TOKENIZER(Id, NAME, REGEX) {NAME, REGEX},
#include "runtime/tokenizer/PreTokenizers.def"
};

std::string pcre2Message(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof(buf)) < 0)
    return fmt::format("PCRE2 error {}", code);
  return reinterpret_cast<const char *>(buf);
}

/// Matching state of one thread: the match data (one ovector pair is all
/// the splitter reads) and a JIT stack. Lookaheads over long whitespace
/// runs backtrack, so the stack may grow past PCRE2's 32 KiB default.
struct MatchState {
  pcre2_match_data *data = nullptr;
  pcre2_match_context *context = nullptr;
  pcre2_jit_stack *stack = nullptr;

  MatchState() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    if (context && stack)
      pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~MatchState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  MatchState(const MatchState &) = delete;
  MatchState &operator=(const MatchState &) = delete;
};

MatchState &matchState() {
  thread_local MatchState state;
  return state;
}

} // namespace

struct PreTokenizer::Impl {
  pcre2_code *code = nullptr;
  ~Impl() { pcre2_code_free(code); }
};

PreTokenizer::~PreTokenizer() = default;

std::string PreTokenizer::supportedNames() {
  std::string names;
  for (const PreTokenizerDef &d : kPreTokenizers)
    names += names.empty() ? d.name : fmt::format(", {}", d.name);
  return names;
}

std::unique_ptr<PreTokenizer> PreTokenizer::create(std::string_view ggufName,
                                                   std::string &error) {
  const PreTokenizerDef *def = nullptr;
  for (const PreTokenizerDef &d : kPreTokenizers)
    if (ggufName == d.name)
      def = &d;
  if (!def) {
    error = fmt::format("pre-tokenizer '{}' is not supported (supported: {})",
                        ggufName, supportedNames());
    return nullptr;
  }
  int code;
  PCRE2_SIZE offset;
  pcre2_code *re = pcre2_compile(
      reinterpret_cast<PCRE2_SPTR>(def->regex), PCRE2_ZERO_TERMINATED,
      PCRE2_UTF | PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C, &code, &offset, nullptr);
  if (!re) {
    error = fmt::format("pre-tokenizer '{}': regex does not compile at {}: {}",
                        def->name, offset, pcre2Message(code));
    return nullptr;
  }
  // Without JIT (a build of PCRE2 that lacks it) pcre2_match interprets the
  // same pattern with the same results, only slower.
  pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
  std::unique_ptr<PreTokenizer> p(new PreTokenizer());
  p->name_ = def->name;
  p->impl_ = std::make_unique<Impl>();
  p->impl_->code = re;
  return p;
}

bool PreTokenizer::split(std::string_view text,
                         std::vector<std::string_view> &words,
                         std::string &error) const {
  MatchState &state = matchState();
  if (!state.data || !state.context) {
    error = "out of memory for PCRE2 match data";
    return false;
  }
  const auto *subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    // The caller validated the text, so PCRE2 need not check it again at
    // every start offset.
    int rc = pcre2_match(impl_->code, subject, text.size(), pos,
                         PCRE2_NO_UTF_CHECK, state.data, state.context);
    if (rc == PCRE2_ERROR_NOMATCH) {
      words.push_back(text.substr(pos));
      return true;
    }
    if (rc < 0) {
      error = fmt::format("pre-tokenizer '{}': matching at byte {} failed: {}",
                          name_, pos, pcre2Message(rc));
      return false;
    }
    const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(state.data);
    size_t start = ov[0], end = ov[1];
    // Text the regex skipped is a word of its own (llama.cpp's generic
    // splitter does the same); none of the supported regexes skips any.
    if (start > pos)
      words.push_back(text.substr(pos, start - pos));
    if (end <= start) {
      // An empty match cannot happen with these regexes (every alternative
      // consumes a character); take one character so the loop advances.
      end = start + 1;
      while (end < text.size() && (uint8_t(text[end]) & 0xC0) == 0x80)
        ++end;
    }
    words.push_back(text.substr(start, end - start));
    pos = end;
  }
  return true;
}

} // namespace strata::tokenizer
