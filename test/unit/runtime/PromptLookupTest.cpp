//===- PromptLookupTest.cpp - the drafting rule of speculative decoding ---===//
#include "runtime/PromptLookup.h"

#include <gtest/gtest.h>

#include <vector>

using strata::runtime::PromptLookup;
using Ids = std::vector<int32_t>;

namespace {

Ids draft(const Ids &sequence, size_t k, int maxNgram = 3) {
  return PromptLookup(maxNgram).draft(sequence, k);
}

} // namespace

TEST(PromptLookup, NothingToDraftFrom) {
  EXPECT_EQ(draft({}, 4), Ids{});
  EXPECT_EQ(draft({7}, 4), Ids{}) << "one token has no earlier occurrence";
  EXPECT_EQ(draft({1, 2, 3, 4}, 4), Ids{}) << "no token repeats";
  EXPECT_EQ(draft({1, 2, 1}, 0), Ids{}) << "no room";
}

TEST(PromptLookup, LongerNgramsFirst) {
  // "1 2 3" occurred at 0 (then 9); "2 3" more recently at 5 (then 8): the
  // trigram wins.
  Ids seq = {1, 2, 3, 9, 7, 2, 3, 8, 5, 1, 2, 3};
  EXPECT_EQ(draft(seq, 4), (Ids{9, 7, 2, 3}));
  // Capped at bigrams, the most recent "2 3" wins.
  EXPECT_EQ(draft(seq, 2, 2), (Ids{8, 5}));
  // Unigrams only: the latest earlier 3 is at 6.
  EXPECT_EQ(draft(seq, 3, 1), (Ids{8, 5, 1}));
}

TEST(PromptLookup, MostRecentOccurrence) {
  // "6 1 2" never occurred; "1 2" at 0 and 3: the later one, then 6.
  EXPECT_EQ(draft({1, 2, 5, 1, 2, 6, 1, 2}, 3), (Ids{6, 1, 2}));
  // A unigram when nothing longer matches.
  EXPECT_EQ(draft({4, 9, 5, 6, 7, 4}, 2), (Ids{9, 5}));
}

TEST(PromptLookup, ExactlyKTokensReadThroughTheDraft) {
  // "3 1 2" last at 2: 3 1 2 from the sequence, then the draft's own 3 1.
  EXPECT_EQ(draft({1, 2, 3, 1, 2, 3, 1, 2}, 5), (Ids{3, 1, 2, 3, 1}));
  // A run of one token continues itself.
  EXPECT_EQ(draft({4, 4}, 3), (Ids{4, 4, 4}));
  EXPECT_EQ(draft({0, 4, 4, 4}, 2), (Ids{4, 4}));
  // A match right before the suffix (overlapping it) is an occurrence.
  EXPECT_EQ(draft({5, 1, 1, 1}, 1), (Ids{1}));
}

TEST(PromptLookup, MaxNgramIsAtLeastOne) {
  EXPECT_EQ(PromptLookup(0).maxNgram(), 1);
  EXPECT_EQ(PromptLookup(-3).draft(Ids{2, 8, 2}, 1), Ids{8});
  EXPECT_EQ(PromptLookup().maxNgram(), PromptLookup::kDefaultMaxNgram);
}
