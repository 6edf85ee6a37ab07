//===- DeltaFormTest.cpp - the delta rule's form, chosen without printing -===//
//
// codegen::selectDelta on qwen4exp's gated delta layers (48 value heads
// over 16 key heads, key and value dims 128) and qwen3next's tiny ones (4
// over 2, 64), on both GPU targets and both precision policies. The form
// does not depend on T (the chunked forms loop over T's chunks).
//
//===----------------------------------------------------------------------===//
#include "codegen/delta/DeltaForm.h"

#include <gtest/gtest.h>

using namespace strata;
using Kind = codegen::DeltaForm::Kind;

namespace {

codegen::DeltaShape shape(int64_t h, int64_t hk, int64_t dk, int64_t dv,
                          bool bf16, bool valueAligned = true) {
  codegen::DeltaShape s;
  s.heads = h, s.keyHeads = hk, s.keyDim = dk, s.valueDim = dv;
  s.matrixUnits = bf16 && dk % 32 == 0;
  s.valueAligned = valueAligned;
  s.qBytes = s.kBytes = s.vBytes = bf16 ? 2 : 4;
  return s;
}

} // namespace

TEST(DeltaForm, Bf16TakesTheTwoPassForm) {
  // qwen4exp: delta_prep + delta_seq, 32-token chunks; the sequential pass
  // double-buffers where the H200's 227 KiB allow, not in 64 KiB of LDS.
  codegen::DeltaForm sm90 =
      codegen::selectDelta(shape(48, 16, 128, 128, true), "sm_90");
  EXPECT_EQ(sm90.kind, Kind::TwoPass);
  EXPECT_EQ(sm90.chunk, 32);
  EXPECT_EQ(sm90.buffers, 2);
  EXPECT_EQ(sm90.threads, 128);
  EXPECT_EQ(sm90.recordBytes, 4 * 32 * 32 * 2 + 4 * 32);
  EXPECT_LE(sm90.sharedBytes, 232448u - 1024);
  EXPECT_LE(sm90.prepSharedBytes, 232448u - 1024);
  codegen::DeltaForm gfx =
      codegen::selectDelta(shape(48, 16, 128, 128, true), "gfx1151");
  EXPECT_EQ(gfx.kind, Kind::TwoPass);
  EXPECT_EQ(gfx.buffers, 1);
  EXPECT_LE(gfx.sharedBytes, 65536u - 1024);
  // qwen3next tiny (key dim 64): two buffers need 66 KiB, over gfx1151's
  // LDS too.
  for (const char *t : {"sm_90", "gfx1151"}) {
    codegen::DeltaForm f = codegen::selectDelta(shape(4, 2, 64, 64, true), t);
    EXPECT_EQ(f.kind, Kind::TwoPass) << t;
    EXPECT_EQ(f.buffers, std::string(t) == "sm_90" ? 2 : 1) << t;
  }
}

TEST(DeltaForm, UnalignedValuesTakeTheMatrixUnitForm) {
  // V's rows not copyable by 16-byte pieces: delta_mma, 32-token chunks on
  // sm_90, 16 where 32 do not fit gfx1151's LDS at key dim 128.
  codegen::DeltaForm sm90 = codegen::selectDelta(
      shape(48, 16, 128, 128, true, /*valueAligned=*/false), "sm_90");
  EXPECT_EQ(sm90.kind, Kind::Mma);
  EXPECT_EQ(sm90.chunk, 32);
  codegen::DeltaForm gfx = codegen::selectDelta(
      shape(48, 16, 128, 128, true, /*valueAligned=*/false), "gfx1151");
  EXPECT_EQ(gfx.kind, Kind::Mma);
  EXPECT_EQ(gfx.chunk, 16);
  EXPECT_LE(gfx.sharedBytes, 65536u - 1024);
}

TEST(DeltaForm, F32PolicyTakesTheChunkedFmaForm) {
  for (const char *t : {"sm_90", "gfx1151"}) {
    SCOPED_TRACE(t);
    // Key dim 128: 16 rows a thread, 8 threads a column, 32 columns; f32
    // keys at 128 dims fit 16-token chunks in the static budget.
    codegen::DeltaForm f =
        codegen::selectDelta(shape(48, 16, 128, 128, false), t);
    EXPECT_EQ(f.kind, Kind::Chunked);
    EXPECT_EQ(f.rows, 16);
    EXPECT_EQ(f.split, 8);
    EXPECT_EQ(f.columns, 32);
    EXPECT_EQ(f.threads, 256);
    EXPECT_EQ(f.chunk, 16);
    EXPECT_EQ(f.sharedBytes, 0u);
    EXPECT_EQ(f.unsupported, "");
    EXPECT_EQ(codegen::selectDelta(shape(4, 2, 64, 64, false), t).chunk, 32);
  }
  // A key dim that does not split into powers of two: no form.
  EXPECT_NE(
      codegen::selectDelta(shape(4, 2, 48, 64, false), "sm_90").unsupported,
      "");
}
