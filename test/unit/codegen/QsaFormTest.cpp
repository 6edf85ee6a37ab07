//===- QsaFormTest.cpp - qsa_select's choice of form ----------------------===//
//
// selectQsaSelect alone: the shared-memory layout of a qsa_select row at
// T = 1, 64, 600 and 16,384 for Qwen4-Exp's indexer (4 heads x 128, a block
// of 4 keys, the top 512 blocks), where the ids stop fitting beside the
// scores, and the longest plan that fits when nothing does. The form does
// not depend on the target (one source; the static budget is the smaller
// target's, Limits.h). The emitted rows are checked by
// test/Codegen/attention-qsa.test, their numbers on the H200 by --check.
//
//===----------------------------------------------------------------------===//
#include "codegen/qsa/QsaForm.h"
#include "codegen/Limits.h"

#include <gtest/gtest.h>

using namespace strata;

namespace {

codegen::QsaSelectProblem qwen4exp(int64_t maxTokens) {
  codegen::QsaSelectProblem p;
  p.maxTokens = maxTokens;
  p.block = 4;
  p.heads = 4;
  p.dims = 128;
  p.top = 512;
  return p;
}

} // namespace

TEST(QsaForm, SortSizeFollowsThePlansLongestRow) {
  // T visible keys make T / 4 blocks, rounded up to a power of two (at
  // least one).
  const std::pair<int64_t, int64_t> cases[] = {
      {1, 1}, {64, 16}, {600, 256}, {16384, 4096}};
  for (auto [tokens, blocks] : cases) {
    SCOPED_TRACE(tokens);
    codegen::QsaSelectForm f = codegen::selectQsaSelect(qwen4exp(tokens));
    EXPECT_EQ(f.blocks, blocks);
    // Scores and ids of every block fit the static budget up to 16K.
    EXPECT_TRUE(f.allIds());
    EXPECT_EQ(f.query, 4 * 128);
    // The top's compacted (score, id) pairs, the radix histogram and scan.
    EXPECT_EQ(f.select, 8 * 512 + 4 * 256 + 64);
    EXPECT_EQ(f.sharedBytes(), 8 * blocks + 4 * 512 + f.select);
    EXPECT_LE(f.sharedBytes() + 256, codegen::staticSharedBudget());
  }
}

TEST(QsaForm, IdsOnlyForTheBitonicRowsPastTheBudget) {
  // 32K tokens: 8,192 blocks' scores and ids (64 KiB) pass the budget;
  // the ids shrink to the top's power of two (the radix select knows a
  // block by its index), and the row fits again.
  codegen::QsaSelectForm f = codegen::selectQsaSelect(qwen4exp(32768));
  EXPECT_EQ(f.blocks, 8192);
  EXPECT_FALSE(f.allIds());
  EXPECT_EQ(f.ids, 512);
  EXPECT_LE(f.sharedBytes() + 256, codegen::staticSharedBudget());
  // Without the radix select (not 256 threads) every id stays.
  codegen::QsaSelectProblem narrow = qwen4exp(32768);
  narrow.threads = 128;
  EXPECT_TRUE(codegen::selectQsaSelect(narrow).allIds());
}

TEST(QsaForm, LongestFittingPlanWhenTheRowDoesNotFit) {
  // 64K tokens: 16,384 scores alone pass the budget; the diagnostic names
  // the longest plan that fits (attention-qsa.test: 32,768 tokens).
  codegen::QsaSelectForm f = codegen::selectQsaSelect(qwen4exp(65536));
  EXPECT_EQ(f.blocks, 16384);
  EXPECT_GT(f.sharedBytes() + 256, codegen::staticSharedBudget());
  EXPECT_EQ(f.longestFitting(256, codegen::staticSharedBudget()), 32768);
  // A row that fits is its own longest plan.
  codegen::QsaSelectForm g = codegen::selectQsaSelect(qwen4exp(16384));
  EXPECT_EQ(g.longestFitting(256, codegen::staticSharedBudget()), 16384);
}
