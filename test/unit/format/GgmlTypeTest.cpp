//===- GgmlTypeTest.cpp - ggml type table ---------------------------------===//
//
// Expected values are the ggml ids and block layouts quoted in
// reference/gguf-and-quants.md sections 1.5 and 2.1; gguf_oracle.py checks
// the whole table against gguf.GGML_QUANT_SIZES as well.
//
//===----------------------------------------------------------------------===//
#include "runtime/format/GgmlType.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

using namespace strata::format;

namespace {

struct Expected {
  uint32_t id;
  const char *name;
  const char *irName;
  uint32_t blockSize;
  uint32_t typeSize;
};

// Facts from the reference, not from GgmlTypes.def.
constexpr Expected kExpected[] = {
    {0, "F32", "f32", 1, 4},
    {1, "F16", "f16", 1, 2},
    {2, "Q4_0", "q4_0", 32, 18},
    {8, "Q8_0", "q8_0", 32, 34},
    {12, "Q4_K", "q4_k", 256, 144},
    {13, "Q5_K", "q5_k", 256, 176},
    {14, "Q6_K", "q6_k", 256, 210},
    {16, "IQ2_XXS", "iq2_xxs", 256, 66},
    {18, "IQ3_XXS", "iq3_xxs", 256, 98},
    {20, "IQ4_NL", "iq4_nl", 32, 18},
    {21, "IQ3_S", "iq3_s", 256, 110},
    {23, "IQ4_XS", "iq4_xs", 256, 136},
    {26, "I32", "i32", 1, 4},
    {30, "BF16", "bf16", 1, 2},
    {39, "MXFP4", "mxfp4", 32, 17},
};

TEST(GgmlTypeTest, KnownIdsHaveTheReferenceLayout) {
  for (const Expected &e : kExpected) {
    SCOPED_TRACE(e.name);
    std::optional<GgmlTypeInfo> t = ggmlTypeFromId(e.id);
    ASSERT_TRUE(t.has_value());
    EXPECT_EQ(static_cast<uint32_t>(t->type), e.id);
    EXPECT_STREQ(t->name, e.name);
    EXPECT_STREQ(t->irName, e.irName);
    EXPECT_EQ(t->blockSize, e.blockSize);
    EXPECT_EQ(t->typeSize, e.typeSize);
  }
}

TEST(GgmlTypeTest, RetiredAndUnknownIdsAreRejected) {
  for (uint32_t id :
       {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 40u, 255u, 0xffffffffu})
    EXPECT_FALSE(ggmlTypeFromId(id).has_value()) << id;
}

TEST(GgmlTypeTest, LoadableTypesAreTheOnesTheDesignNames) {
  // DESIGN.md: f32 f16 bf16 i32 and the weight formats we dequantise.
  std::set<std::string> loadable;
  for (uint32_t id = 0; id < 64; ++id)
    if (auto t = ggmlTypeFromId(id); t && t->loadable)
      loadable.insert(t->irName);
  EXPECT_EQ(loadable,
            (std::set<std::string>{"f32", "f16", "bf16", "i32", "q8_0", "q4_0",
                                   "q4_k", "q5_k", "q6_k", "iq4_nl", "iq4_xs",
                                   "iq3_s", "iq3_xxs", "iq2_xxs"}));
}

TEST(GgmlTypeTest, LookupsAgree) {
  for (uint32_t id = 0; id < 64; ++id) {
    std::optional<GgmlTypeInfo> t = ggmlTypeFromId(id);
    if (!t)
      continue;
    SCOPED_TRACE(t->name);
    EXPECT_EQ(ggmlTypeInfo(t->type).name, t->name);
    ASSERT_TRUE(ggmlTypeFromIrName(t->irName).has_value());
    EXPECT_EQ(ggmlTypeFromIrName(t->irName)->type, t->type);
    ASSERT_TRUE(ggmlTypeFromName(t->name).has_value());
    EXPECT_EQ(ggmlTypeFromName(t->name)->type, t->type);
    // Block sizes are 1, 32 or 256 and a block is never empty.
    EXPECT_TRUE(t->blockSize == 1 || t->blockSize == 32 || t->blockSize == 256);
    EXPECT_GT(t->typeSize, 0u);
  }
}

TEST(GgmlTypeTest, NameLookupIgnoresCaseButIrNameDoesNot) {
  ASSERT_TRUE(ggmlTypeFromName("q4_k").has_value());
  EXPECT_EQ(ggmlTypeFromName("q4_k")->type, GgmlType::Q4_K);
  EXPECT_EQ(ggmlTypeFromName("Iq4_Xs")->type, GgmlType::IQ4_XS);
  EXPECT_FALSE(ggmlTypeFromIrName("Q4_K").has_value());
  EXPECT_FALSE(ggmlTypeFromName("q4_k ").has_value());
  EXPECT_FALSE(ggmlTypeFromName("").has_value());
  EXPECT_FALSE(ggmlTypeFromIrName("q4").has_value());
}

} // namespace
