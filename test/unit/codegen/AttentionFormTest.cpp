//===- AttentionFormTest.cpp - attention's form, chosen without printing --===//
//
// codegen::selectAttention on the shapes that matter (qwen4exp's QSA layers:
// 24 heads of 256, 2 KV heads, gated, blocks of 4 tokens, 513 selections;
// a dense GQA layer: qwen3's 4 heads of 64 over 2 KV heads), at T = 1, 64,
// 600 and 16,384 (and 32,768, where QSA's row bitmaps no longer fit), on
// both GPU targets, for both precision policies and under the options that
// change the form.
//
//===----------------------------------------------------------------------===//
#include "codegen/attention/AttentionForm.h"
#include "codegen/Options.h"
#include "codegen/device/attention/AttentionLayouts.h"
#include "runtime/format/Plan.h"

#include <gtest/gtest.h>

using namespace strata;
using codegen::AttentionForm;
using Kind = codegen::AttentionForm::Kind;

namespace {

codegen::AttentionShape qsa(int64_t tokens, bool bf16 = true) {
  codegen::AttentionShape s;
  s.heads = 24, s.headDim = 256, s.kvHeads = 2, s.valueDim = 256;
  s.block = 4, s.selections = 513, s.gated = true, s.causal = true;
  s.matrixUnits = bf16;
  s.qBytes = s.kBytes = s.vBytes = bf16 ? 2 : 4;
  s.maxTokens = tokens;
  return s;
}

codegen::AttentionShape dense(int64_t tokens, bool bf16 = true) {
  codegen::AttentionShape s;
  s.heads = 4, s.headDim = 64, s.kvHeads = 2, s.valueDim = 64;
  s.matrixUnits = bf16;
  s.qBytes = s.kBytes = s.vBytes = bf16 ? 2 : 4;
  s.maxTokens = tokens;
  return s;
}

AttentionForm pick(const codegen::AttentionShape &s, const std::string &t,
                   std::vector<std::string> options = {}) {
  format::Plan plan;
  std::string error;
  for (const std::string &o : options)
    EXPECT_TRUE(codegen::setOption(plan, o, error)) << error;
  return codegen::selectAttention(s, t, plan);
}

} // namespace

TEST(AttentionForm, QsaOnSm90IsWarpSpecialisedAtEveryLength) {
  for (int64_t t : {1, 64, 600, 16384}) {
    SCOPED_TRACE(t);
    AttentionForm f = pick(qsa(t), "sm_90");
    EXPECT_EQ(f.kind, Kind::Ws);
    EXPECT_TRUE(f.sparse);
    EXPECT_FALSE(f.compact); // the row bitmaps fit up to ~20K tokens
    EXPECT_EQ(f.threads, 384);
    EXPECT_EQ(f.headsPerBlock, 12); // the whole KV group
    EXPECT_EQ(f.queryRows, 128 / 12);
    EXPECT_EQ(f.bitmapWords, (t / 4 + 32) / 32);
    EXPECT_GT(f.sharedBytes, 0u);
    EXPECT_LE(f.sharedBytes, 232448u - 1024);
    EXPECT_TRUE(f.rolled);
    EXPECT_EQ(f.smx, 7);
  }
  // Past ~20K tokens the compact tables (bounded by the selections).
  AttentionForm longer = pick(qsa(32768), "sm_90");
  EXPECT_EQ(longer.kind, Kind::Ws);
  EXPECT_TRUE(longer.compact);
}

TEST(AttentionForm, OptionsChangeTheForm) {
  EXPECT_EQ(pick(qsa(16384), "sm_90", {"attn-ws=0"}).kind, Kind::Wg);
  AttentionForm chunks = pick(qsa(16384), "sm_90", {"attn-sparse=0"});
  EXPECT_FALSE(chunks.sparse);
  EXPECT_NE(chunks.kind, Kind::Ws);
  EXPECT_TRUE(pick(qsa(600), "sm_90", {"attn-compact=on"}).compact);
  // Compact tables forbidden at 32K: the row bitmaps do not fit the
  // warpgroup forms, so the matrix-unit form (its union needs no tables).
  AttentionForm noCompact = pick(qsa(32768), "sm_90", {"attn-compact=off"});
  EXPECT_FALSE(noCompact.compact);
  EXPECT_EQ(noCompact.kind, Kind::Gqa);
  EXPECT_TRUE(noCompact.sparse);
  AttentionForm ab = pick(qsa(600), "sm_90",
                          {"attn-pingpong=1", "attn-smx=3", "attn-rolled=0"});
  EXPECT_TRUE(ab.pingpong);
  EXPECT_EQ(ab.smx, 3);
  EXPECT_FALSE(ab.rolled);
}

TEST(AttentionForm, Gfx1151TakesTheGqaForm) {
  // No warpgroup forms: the matrix-unit form with as many heads of the KV
  // group a block as its 64 KiB of LDS hold: two of 256 while the row
  // bitmaps are small, one at 16K tokens.
  for (int64_t t : {1, 64, 600, 16384}) {
    SCOPED_TRACE(t);
    AttentionForm f = pick(qsa(t), "gfx1151");
    EXPECT_EQ(f.kind, Kind::Gqa);
    EXPECT_TRUE(f.sparse); // chunks of the union of the tile's blocks
    EXPECT_EQ(f.keyChunk % 4, 0);
    EXPECT_FALSE(pick(qsa(t), "gfx1151", {"attn-sparse=0"}).sparse);
    EXPECT_EQ(f.rowGroups, t == 16384 ? 1 : 2);
    EXPECT_EQ(f.splits, 2); // value dim 256 in two halves of 128
    EXPECT_EQ(f.headsPerBlock, f.rowGroups);
    EXPECT_LE(f.sharedBytes, 65536u - 1024);
    AttentionForm d = pick(dense(t), "gfx1151");
    EXPECT_EQ(d.kind, Kind::Gqa);
    EXPECT_FALSE(d.sparse);
    EXPECT_EQ(d.rowGroups, 2); // both query heads of a KV head
  }
}

TEST(AttentionForm, PortableFormsPutSm90OnGfx1151sForm) {
  // portable-forms: sm_90 takes attention_gqa as gfx1151 does (QSA's union
  // included), the same tiles, for the differential suite.
  for (int64_t t : {1, 64, 600, 16384}) {
    SCOPED_TRACE(t);
    for (bool isQsa : {true, false}) {
      const codegen::AttentionShape s = isQsa ? qsa(t) : dense(t);
      AttentionForm f = pick(s, "sm_90", {"portable-forms=1"});
      AttentionForm g = pick(s, "gfx1151");
      EXPECT_EQ(f.kind, Kind::Gqa);
      EXPECT_EQ(f.sparse, isQsa);
      // sm_90's 227 KiB may take more heads a block; the algorithm is one.
      EXPECT_EQ(f.keyChunk % 16, 0);
      EXPECT_EQ(g.sparse, f.sparse);
    }
  }
}

TEST(AttentionForm, DenseOnSm90IsTheWarpgroupForm) {
  for (int64_t t : {1, 64, 600, 16384}) {
    SCOPED_TRACE(t);
    AttentionForm f = pick(dense(t), "sm_90");
    EXPECT_EQ(f.kind, Kind::Wg);
    EXPECT_FALSE(f.sparse);
    EXPECT_EQ(f.threads, 256);
    EXPECT_EQ(f.groupHeads, 2);
    EXPECT_EQ(f.queryRows, 64);
  }
}

TEST(AttentionForm, F32PolicyTakesTheFmaTile) {
  for (const std::string target : {"sm_90", "gfx1151"})
    for (int64_t t : {1, 64, 600, 16384}) {
      SCOPED_TRACE(target + " " + std::to_string(t));
      AttentionForm f = pick(qsa(t, false), target);
      EXPECT_EQ(f.kind, Kind::Tile);
      EXPECT_EQ(f.sharedBytes, 0u); // static shared memory only
      EXPECT_EQ(f.threads, 128);
      EXPECT_EQ(f.queryRows, 16);
      EXPECT_TRUE(f.keyChunk == 8 || f.keyChunk == 16 || f.keyChunk == 32);
      EXPECT_EQ(pick(dense(t, false), target).keyChunk, 32);
    }
}

namespace {

/// attention_cached of the full Qwen4-Exp (24 query heads over 2 KV heads
/// of dim 256) over \p slots slots a row, in a plan of \p rows rows.
codegen::CachedAttentionShape cachedShape(int64_t slots, int64_t rows) {
  codegen::CachedAttentionShape s;
  s.heads = 24;
  s.headDim = 256;
  s.kvHeads = 2;
  s.valueDim = 256;
  s.maxSlots = slots;
  s.maxTokens = rows;
  return s;
}

} // namespace

TEST(CachedAttentionForm, ChunksByRowsOnEachTarget) {
  // One row over a 16K context: two blocks a unit over the two KV heads
  // (the H200's 132 SMs: 132 chunks; gfx1151's 40 CUs: 40); the workspace
  // record of a row is 24 x 258 floats a chunk.
  for (const char *target : {"sm_90", "gfx1151"}) {
    SCOPED_TRACE(target);
    const int64_t units = std::string(target) == "sm_90" ? 132 : 40;
    codegen::CachedAttentionForm f =
        codegen::selectCachedAttention(cachedShape(16640, 1), target);
    EXPECT_EQ(f.group, 12);
    EXPECT_EQ(f.cols, 2);
    EXPECT_EQ(f.pieces, 4);
    EXPECT_EQ(f.chunks, units);
    EXPECT_EQ(f.rowFloats, 24 * units * 258);
    // Plans of more rows keep the partials of every row within 64 MiB:
    // 64 rows x 24,768 bytes a chunk allow 42 chunks, 600 rows 4, 16,384
    // rows 1 (a chunk each: the plan's long runs prefill, not decode).
    const std::pair<int64_t, int64_t> byRows[] = {
        {64, std::min<int64_t>(units, 42)}, {600, 4}, {16384, 1}};
    for (auto [rows, chunks] : byRows)
      EXPECT_EQ(codegen::selectCachedAttention(cachedShape(16640, rows), target)
                    .chunks,
                chunks)
          << rows;
  }
  // A short context: no chunk below 32 slots (QSA's 2,052 slots a row:
  // 65 chunks at most).
  EXPECT_EQ(
      codegen::selectCachedAttention(cachedShape(2052, 1), "sm_90").chunks, 65);
  EXPECT_EQ(codegen::selectCachedAttention(cachedShape(100, 1), "sm_90").chunks,
            4);
  // attn-decode-chunk: chunks of at least 8 slots split 100 slots 13 ways.
  codegen::CachedAttentionShape s = cachedShape(100, 1);
  s.minChunk = 8;
  EXPECT_EQ(codegen::selectCachedAttention(s, "sm_90").chunks, 13);
}

TEST(CachedAttentionForm, ShapesTheFormCannotHoldAreRefused) {
  codegen::CachedAttentionShape s = cachedShape(4096, 1);
  s.kvHeads = 5; // 24 heads are no multiple of 5
  EXPECT_THROW(codegen::selectCachedAttention(s, "sm_90"), std::runtime_error);
  s = cachedShape(4096, 1);
  s.headDim = 512;
  EXPECT_THROW(codegen::selectCachedAttention(s, "sm_90"), std::runtime_error);
  s = cachedShape(4096, 1);
  s.heads = 96; // a group of 48 heads of dim 256: 61 KiB of shared memory
  s.kvHeads = 2;
  EXPECT_THROW(codegen::selectCachedAttention(s, "gfx1151"),
               std::runtime_error);
}

TEST(AttentionForm, GqaSharedMemoryIsTheKernelsLayout) {
  // The Gqa form's size is AttentionLayouts.h's, the layout the kernel carves:
  // Q [16][136], K [64][136], V^T [128][72], P [16][72] (2 bytes each),
  // two waves' maxima and sums [2][16] f32, no QSA bitmap.
  constexpr gqa_layout l = gqa_layout_of(1, 2, 64, 128, 128, 0);
  static_assert(l.bytes ==
                    2 * (16 * 136 + 64 * 136 + 128 * 72 + 16 * 72) + 8 * 2 * 16,
                "gqa_layout");
  EXPECT_EQ(l.k, 2 * 16 * 136);
  EXPECT_EQ(l.sel, l.bytes);
  // With QSA: the bitmap's 16 rows of NBW words after the rest; the sparse
  // form adds the union's NBW words and a chunk's EPC block ids.
  EXPECT_EQ(gqa_layout_of(1, 2, 64, 128, 128, 3).bytes, l.bytes + 16 * 3 * 4);
  constexpr gqa_layout u = gqa_layout_of(1, 2, 64, 128, 128, 3, 16);
  EXPECT_EQ(u.uni, l.bytes + 16 * 3 * 4);
  EXPECT_EQ(u.ids, u.uni + 3 * 4);
  EXPECT_EQ(u.bytes, u.ids + 16 * 4);
  // A form the select chose is sized by it.
  codegen::AttentionShape s;
  s.heads = 8;
  s.headDim = 128;
  s.kvHeads = 2;
  s.valueDim = 128;
  s.matrixUnits = true;
  s.maxTokens = 64;
  format::Plan plan;
  const AttentionForm f = codegen::selectAttention(s, "gfx1151", plan);
  ASSERT_EQ(f.kind, Kind::Gqa);
  EXPECT_EQ(
      f.sharedBytes,
      static_cast<uint64_t>(
          gqa_layout_of(f.rowGroups, f.splits, f.keyChunk, 128, 128, 0).bytes));
}
