//===- PromptLookup.h - draft tokens by prompt lookup -----------*- C++ -*-===//
//
// Speculative decoding without a draft model: the next tokens are guessed
// from the sequence itself (prompt lookup decoding; llama.cpp's "lookup",
// HF's prompt_lookup_num_tokens). Text that quotes, edits or repeats its
// prompt (code, summaries, lists, chat templates) often continues the way
// an earlier occurrence of its last few tokens continued.
//
// The rule, for a sequence x[0..L) and a draft of at most K tokens:
//
//   for n = min(maxNgram, L - 1) down to 1:
//     the suffix is x[L-n..L); find the largest i < L - n with
//     x[i..i+n) == x[L-n..L) (its most recent earlier occurrence; it may
//     overlap the suffix);
//     if there is one, the draft is d[j] = y[i + n + j] for j < K, where y
//     is x followed by the draft itself, and the search ends;
//   no n matched: no draft.
//
// Longer n-grams first, because a longer match predicts better; the most
// recent occurrence, because recent text predicts the next better than old
// text. Reading the draft from x extended by itself (i + n + j may pass
// L - 1) continues a period shorter than K: after "a b c a b c a b" the
// suffix "c a b" last occurred at 2, and a draft of 5 is "c a b c a"
// rather than the 3 tokens before the sequence's end.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace strata::runtime {

/// Drafts the tokens that may follow a sequence (see the file comment).
class PromptLookup {
public:
  /// The longest n-gram tried by default.
  static constexpr int kDefaultMaxNgram = 3;

  /// A drafter that matches n-grams of at most \p maxNgram tokens (>= 1).
  explicit PromptLookup(int maxNgram = kDefaultMaxNgram);

  /// Up to \p maxDrafts tokens to follow \p sequence: empty when no suffix
  /// of it occurred before (or \p maxDrafts is 0), else exactly
  /// \p maxDrafts.
  std::vector<int32_t> draft(std::span<const int32_t> sequence,
                             size_t maxDrafts) const;

  int maxNgram() const { return maxNgram_; }

private:
  int maxNgram_;
};

} // namespace strata::runtime
