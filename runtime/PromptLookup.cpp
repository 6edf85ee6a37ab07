//===- PromptLookup.cpp - draft tokens by prompt lookup -------------------===//
//
// A linear scan per n-gram length: a sequence holds at most the plan's
// context, and a scan of it costs far less than the model run the draft
// saves.
//
//===----------------------------------------------------------------------===//
#include "runtime/PromptLookup.h"

#include <algorithm>
#include <cassert>

namespace strata::runtime {

PromptLookup::PromptLookup(int maxNgram) : maxNgram_(std::max(maxNgram, 1)) {}

std::vector<int32_t> PromptLookup::draft(std::span<const int32_t> sequence,
                                         size_t maxDrafts) const {
  std::vector<int32_t> out;
  const size_t len = sequence.size();
  if (maxDrafts == 0 || len < 2)
    return out;
  size_t longest = std::min<size_t>(static_cast<size_t>(maxNgram_), len - 1);
  for (size_t n = longest; n >= 1; --n) {
    std::span<const int32_t> suffix = sequence.subspan(len - n);
    // The most recent earlier start: i from L - n - 1 down to 0.
    for (size_t i = len - n; i-- > 0;) {
      if (!std::equal(suffix.begin(), suffix.end(), sequence.begin() + i))
        continue;
      // The continuation, read from the sequence followed by the draft.
      size_t from = i + n;
      out.reserve(maxDrafts);
      for (size_t j = 0; j < maxDrafts; ++j) {
        size_t at = from + j;
        assert(at < len + j);
        out.push_back(at < len ? sequence[at] : out[at - len]);
      }
      return out;
    }
  }
  return out;
}

} // namespace strata::runtime
