//===- RowFormTest.cpp - the row family's choice of form ------------------===//
//
// selectRow alone: conv1d_causal (+ silu) takes blocks of 32 rows x 1,024
// channels; any other body a block a row, its shared memory the
// reductions', the routes' logits and qsa_select's (by the plan's longest
// row: T = 1, 64, 600, 16,384 and past the budget), its temporaries there
// while they fit, else in the workspace. The form does not depend on the
// target (the static budget is the smaller target's, Limits.h). The
// emitted rows are checked by the byte-identity manifest and, on the H200,
// by --check.
//
//===----------------------------------------------------------------------===//
#include "codegen/row/RowForm.h"
#include "codegen/Limits.h"

#include <gtest/gtest.h>

using namespace strata;
using codegen::RowForm;
using Kind = RowForm::Kind;

TEST(RowForm, ConvBodiesTakeBlocksOfRows) {
  codegen::RowProblem p;
  p.convBody = true;
  p.channels = 8192; // qwen4exp's delta-rule conv (q, k, v channels)
  RowForm f = codegen::selectRow(p);
  EXPECT_EQ(f.kind, Kind::ConvRows);
  EXPECT_EQ(f.rowsPerBlock, 32);
  EXPECT_EQ(f.channelsPerBlock, 1024);
  // Channels not a multiple of 4: a block a row.
  p.channels = 8190;
  EXPECT_EQ(codegen::selectRow(p).kind, Kind::Rows);
}

TEST(RowForm, SharedMemoryByTheBodysOps) {
  // An rms_norm of 2,560 f32 values with a stored temporary row: 256 bytes
  // of reduction words and the row (10 KiB) in shared memory.
  codegen::RowProblem norm;
  norm.tempBytes = 2560 * 4;
  RowForm f = codegen::selectRow(norm);
  EXPECT_EQ(f.kind, Kind::Rows);
  EXPECT_EQ(f.fixedBytes, 256);
  EXPECT_TRUE(f.fits);
  EXPECT_FALSE(f.tempsInWorkspace);
  // Temporaries past the budget: in the workspace, a row a block.
  norm.tempBytes = codegen::staticSharedBudget();
  EXPECT_TRUE(codegen::selectRow(norm).tempsInWorkspace);
  // A route over 512 experts: their logits beside the reductions.
  codegen::RowProblem route;
  route.routeExperts = {512};
  EXPECT_EQ(codegen::selectRow(route).fixedBytes, 256 + 4 * 512);
}

TEST(RowForm, QsaSelectByThePlansLongestRow) {
  // Qwen4-Exp's indexer (4 heads x 128, blocks of 4 keys, the top 512).
  auto qsaRow = [](int64_t maxTokens) {
    codegen::RowProblem p;
    codegen::QsaSelectProblem q;
    q.maxTokens = maxTokens;
    q.block = 4;
    q.heads = 4;
    q.dims = 128;
    q.top = 512;
    p.qsa = q;
    return codegen::selectRow(p);
  };
  const std::pair<int64_t, int64_t> cases[] = {
      {1, 1}, {64, 16}, {600, 256}, {16384, 4096}};
  for (auto [tokens, blocks] : cases) {
    SCOPED_TRACE(tokens);
    RowForm f = qsaRow(tokens);
    EXPECT_EQ(f.kind, Kind::Rows);
    EXPECT_EQ(f.qsa.blocks, blocks);
    EXPECT_EQ(f.fixedBytes, 256 + f.qsa.sharedBytes());
    EXPECT_TRUE(f.fits);
  }
  // 64K tokens: the sort no longer fits; the kernel is refused (naming
  // the longest plan that fits: QsaFormTest).
  EXPECT_FALSE(qsaRow(65536).fits);
}
