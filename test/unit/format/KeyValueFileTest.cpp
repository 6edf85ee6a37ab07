//===- KeyValueFileTest.cpp - key/value text model metadata ---------------===//
#include "runtime/format/KeyValueFile.h"

#include <gtest/gtest.h>

#include <string>

using namespace strata::format;

namespace {

std::unique_ptr<ModelInfo> parseOk(std::string_view text) {
  std::string error;
  std::unique_ptr<ModelInfo> info = parseKeyValueText(text, "t.kv", error);
  EXPECT_TRUE(info) << error;
  EXPECT_TRUE(error.empty()) << error;
  return info;
}

/// The error for \p text, which must fail.
std::string parseError(std::string_view text) {
  std::string error;
  std::unique_ptr<ModelInfo> info = parseKeyValueText(text, "t.kv", error);
  EXPECT_FALSE(info) << "parsed: " << text;
  return error;
}

TEST(KeyValueFileTest, HeaderExample) {
  auto info = parseOk(R"(# comment
general.architecture = "qwen3"
qwen3.block_count = 2                 # integer -> u32 (i32 if negative)
qwen3.attention.layer_norm_rms_epsilon = 1e-6   # float -> f32
qwen3.flag = true
qwen3.attention.head_count_kv = [2, 2, 4]       # array
tensor blk.0.attn_q.weight q8_0 [256, 512]      # ggml order, ne0 first
)");
  ASSERT_TRUE(info);
  EXPECT_EQ(info->source, "t.kv");
  EXPECT_EQ(info->architecture(), "qwen3");
  ASSERT_EQ(info->metadata().size(), 5u);
  EXPECT_EQ(info->metadata()[0].first, "general.architecture");
  EXPECT_EQ(info->metadata()[4].first, "qwen3.attention.head_count_kv");

  const MetaValue *n = info->findMeta("qwen3.block_count");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->type, GgufValueType::UInt32);
  EXPECT_EQ(n->asInt(), 2);

  const MetaValue *eps =
      info->findMeta("qwen3.attention.layer_norm_rms_epsilon");
  ASSERT_TRUE(eps);
  EXPECT_EQ(eps->type, GgufValueType::Float32);
  EXPECT_DOUBLE_EQ(eps->f, 1e-6);

  const MetaValue *flag = info->findMeta("qwen3.flag");
  ASSERT_TRUE(flag);
  EXPECT_EQ(flag->type, GgufValueType::Bool);
  EXPECT_TRUE(flag->b);

  const MetaValue *kv = info->findMeta("qwen3.attention.head_count_kv");
  ASSERT_TRUE(kv);
  EXPECT_EQ(kv->type, GgufValueType::Array);
  EXPECT_EQ(kv->elemType, GgufValueType::UInt32);
  EXPECT_EQ(kv->toString(), "[2, 2, 4]");

  ASSERT_EQ(info->tensors().size(), 1u);
  const TensorInfo &t = info->tensors()[0];
  EXPECT_EQ(t.name, "blk.0.attn_q.weight");
  EXPECT_EQ(t.type, GgmlType::Q8_0);
  EXPECT_EQ(t.dims, (std::vector<uint64_t>{256, 512}));
  EXPECT_EQ(t.numBytes(), 256u / 32 * 34 * 512);
  EXPECT_EQ(info->findTensor("blk.0.attn_q.weight"), &t);
}

TEST(KeyValueFileTest, EmptyTextAndBlankLines) {
  auto info = parseOk("");
  ASSERT_TRUE(info);
  EXPECT_TRUE(info->metadata().empty());
  info = parseOk("\n\n   \t\r\n# only a comment\n");
  ASSERT_TRUE(info);
  EXPECT_TRUE(info->metadata().empty());
  EXPECT_TRUE(info->tensors().empty());
}

TEST(KeyValueFileTest, WindowsLineEndings) {
  auto info = parseOk("a = 1\r\nb = \"x\"\r\n");
  ASSERT_TRUE(info);
  EXPECT_EQ(info->findMeta("a")->asInt(), 1);
  EXPECT_EQ(info->findMeta("b")->s, "x");
}

TEST(KeyValueFileTest, IntegerTypes) {
  auto info = parseOk("a = 0\n"
                      "b = 4294967295\n"
                      "c = 4294967296\n"
                      "d = 18446744073709551615\n"
                      "e = -1\n"
                      "f = -2147483648\n"
                      "g = -2147483649\n"
                      "h = -9223372036854775808\n");
  ASSERT_TRUE(info);
  auto check = [&](const char *key, GgufValueType type, const char *text) {
    SCOPED_TRACE(key);
    const MetaValue *v = info->findMeta(key);
    ASSERT_TRUE(v);
    EXPECT_EQ(v->type, type);
    EXPECT_EQ(v->toString(), text);
  };
  check("a", GgufValueType::UInt32, "0");
  check("b", GgufValueType::UInt32, "4294967295");
  check("c", GgufValueType::UInt64, "4294967296");
  check("d", GgufValueType::UInt64, "18446744073709551615");
  check("e", GgufValueType::Int32, "-1");
  check("f", GgufValueType::Int32, "-2147483648");
  check("g", GgufValueType::Int64, "-2147483649");
  check("h", GgufValueType::Int64, "-9223372036854775808");
}

TEST(KeyValueFileTest, IntegersOutOfRange) {
  EXPECT_EQ(parseError("a = 18446744073709551616"),
            "t.kv:1:25: '18446744073709551616' is not an integer in range");
  EXPECT_NE(parseError("a = -9223372036854775809").find("not an integer"),
            std::string::npos);
  EXPECT_NE(parseError("a = 12abc").find("'12abc' is not an integer"),
            std::string::npos);
}

TEST(KeyValueFileTest, Floats) {
  auto info = parseOk("a = 0.5\nb = -1.25e-3\nc = 1e+16\nd = 2E3\ne = 1.\n");
  ASSERT_TRUE(info);
  EXPECT_DOUBLE_EQ(info->findMeta("a")->f, 0.5);
  EXPECT_DOUBLE_EQ(info->findMeta("b")->f, -1.25e-3);
  // MetaValue::toString prints large floats as "1e+16": it must parse back.
  EXPECT_DOUBLE_EQ(info->findMeta("c")->f, 1e16);
  EXPECT_DOUBLE_EQ(info->findMeta("d")->f, 2000);
  EXPECT_DOUBLE_EQ(info->findMeta("e")->f, 1);
  for (const auto &[key, v] : info->metadata())
    EXPECT_EQ(v.type, GgufValueType::Float32) << key;
}

TEST(KeyValueFileTest, FloatsOutOfRangeForF32) {
  EXPECT_NE(parseError("a = 1e39").find("out of range for f32"),
            std::string::npos);
  EXPECT_NE(parseError("a = 1e999").find("out of range for f32"),
            std::string::npos);
  EXPECT_NE(parseError("a = 1.5.5").find("is not a number"), std::string::npos);
  EXPECT_NE(parseError("a = 1e").find("is not a number"), std::string::npos);
}

TEST(KeyValueFileTest, PrintedValuesParseBack) {
  // toString is the rendering strata-gguf prints; numbers and flat arrays
  // of them must read back to the same value.
  // (A float with an integral value, say 100, prints as "100" and reads
  // back as an integer: the text format has no float suffix.)
  for (double d : {1e16, 1e-6, -3.5, 0.1f + 0.0, 1.5e-30, 1e30}) {
    std::string text = "k = " + MetaValue::makeFloat(d).toString();
    auto info = parseOk(text);
    ASSERT_TRUE(info) << text;
    EXPECT_EQ(info->findMeta("k")->f, d) << text;
  }
}

TEST(KeyValueFileTest, Strings) {
  auto info = parseOk(R"(a = "hello # not a comment"
b = ""
c = "say \"hi\" \\ there"
)");
  ASSERT_TRUE(info);
  EXPECT_EQ(info->findMeta("a")->s, "hello # not a comment");
  EXPECT_EQ(info->findMeta("b")->s, "");
  EXPECT_EQ(info->findMeta("c")->s, "say \"hi\" \\ there");
  EXPECT_EQ(parseError("a = \"open"), "t.kv:1:10: unterminated string");
}

TEST(KeyValueFileTest, Bools) {
  auto info = parseOk("a = true\nb = false\n");
  ASSERT_TRUE(info);
  EXPECT_EQ(info->findMeta("a")->type, GgufValueType::Bool);
  EXPECT_TRUE(info->findMeta("a")->b);
  EXPECT_FALSE(info->findMeta("b")->b);
  EXPECT_EQ(parseError("a = True"), "t.kv:1:9: 'True' is not a value (strings "
                                    "are quoted, bools are true or false)");
  EXPECT_EQ(parseError("a = [x]"), "t.kv:1:7: 'x' is not a value (strings are "
                                   "quoted, bools are true or false)");
}

/// Every element of \p v (recursively) has the array's element type.
void expectHomogeneous(const MetaValue &v) {
  if (v.type != GgufValueType::Array)
    return;
  for (const MetaValue &e : v.array) {
    EXPECT_EQ(e.type, v.elemType) << v.toString();
    expectHomogeneous(e);
  }
}

TEST(KeyValueFileTest, ArrayElementTypes) {
  auto info = parseOk("u32 = [1, 2]\n"
                      "i32 = [1, -2]\n"
                      "u64 = [1, 4294967296]\n"
                      "i64 = [-1, 2147483648]\n"
                      "i64b = [-2147483649, 1]\n"
                      "f32 = [1, 2.5]\n"
                      "str = [\"a\", \"b\"]\n"
                      "bool = [true, false]\n"
                      "nested = [[1, 2], [-3]]\n"
                      "empty = []\n");
  ASSERT_TRUE(info);
  auto check = [&](const char *key, GgufValueType elem, const char *text) {
    SCOPED_TRACE(key);
    const MetaValue *v = info->findMeta(key);
    ASSERT_TRUE(v);
    ASSERT_EQ(v->type, GgufValueType::Array);
    EXPECT_EQ(v->elemType, elem);
    EXPECT_EQ(v->toString(), text);
    expectHomogeneous(*v);
  };
  check("u32", GgufValueType::UInt32, "[1, 2]");
  check("i32", GgufValueType::Int32, "[1, -2]");
  // Before the fix these kept u64/i64 elements in a u32/i32 array.
  check("u64", GgufValueType::UInt64, "[1, 4294967296]");
  check("i64", GgufValueType::Int64, "[-1, 2147483648]");
  check("i64b", GgufValueType::Int64, "[-2147483649, 1]");
  check("f32", GgufValueType::Float32, "[1, 2.5]");
  check("str", GgufValueType::String, "[\"a\", \"b\"]");
  check("bool", GgufValueType::Bool, "[true, false]");
  check("nested", GgufValueType::Array, "[[1, 2], [-3]]");
  check("empty", GgufValueType::UInt32, "[]");
  EXPECT_EQ(info->findMeta("nested")->array[0].elemType, GgufValueType::UInt32);
  EXPECT_EQ(info->findMeta("nested")->array[1].elemType, GgufValueType::Int32);
}

TEST(KeyValueFileTest, ArrayErrors) {
  EXPECT_EQ(parseError("a = [1, \"x\"]"),
            "t.kv:1:13: array elements must all have the same type");
  EXPECT_EQ(parseError("a = [1 2]"), "t.kv:1:8: expected ',' or ']' in array");
  EXPECT_EQ(parseError("a = [1,"), "t.kv:1:8: expected a value");
  EXPECT_NE(parseError("a = [-1, 18446744073709551615]").find("INT64_MAX"),
            std::string::npos);
}

TEST(KeyValueFileTest, ArrayNestingMatchesTheGgufLimit) {
  // 8 levels are what the GGUF reader accepts; 9 are refused here too.
  auto info = parseOk("a = [[[[[[[[1]]]]]]]]");
  ASSERT_TRUE(info);
  EXPECT_EQ(parseError("a = [[[[[[[[[1]]]]]]]]]"),
            "t.kv:1:13: arrays nested too deeply");
}

TEST(KeyValueFileTest, KeyErrors) {
  EXPECT_EQ(parseError("= 1"), "t.kv:1:1: expected a key, found '='");
  EXPECT_EQ(parseError("a 1"), "t.kv:1:3: expected '=' after key 'a'");
  EXPECT_EQ(parseError("a ="), "t.kv:1:4: expected a value");
  EXPECT_EQ(parseError("a = 1 2"), "t.kv:1:7: unexpected text after the value");
  EXPECT_EQ(parseError("a = 1\nb = 2\na = 3\n"), "t.kv:3:1: duplicate key 'a'");
  EXPECT_EQ(parseError("a = @"), "t.kv:1:5: unexpected character '@' in value");
}

TEST(KeyValueFileTest, Tensors) {
  auto info = parseOk("tensor a f32 [3]\n"
                      "tensor b q4_k [512, 2, 8]\n"
                      "tensor c bf16 [2, 3, 4, 5]\n");
  ASSERT_TRUE(info);
  ASSERT_EQ(info->tensors().size(), 3u);
  EXPECT_EQ(info->tensors()[1].type, GgmlType::Q4_K);
  EXPECT_EQ(info->tensors()[1].numBytes(), 2u * 144 * 2 * 8);
  EXPECT_EQ(info->tensors()[2].numElements(), 120u);
}

TEST(KeyValueFileTest, TensorErrors) {
  EXPECT_EQ(parseError("tensor"), "t.kv:1:7: expected a tensor name after "
                                  "'tensor'");
  EXPECT_EQ(parseError("tensor a q9 [1]"),
            "t.kv:1:10: unknown tensor type 'q9'");
  EXPECT_EQ(parseError("tensor a Q4_K [256]"),
            "t.kv:1:10: unknown tensor type 'Q4_K'");
  EXPECT_EQ(parseError("tensor a f32 3"),
            "t.kv:1:14: expected '[' and the tensor's dims (ggml order)");
  EXPECT_EQ(parseError("tensor a f32 []"),
            "t.kv:1:14: a tensor has 1 to 4 dims");
  EXPECT_EQ(parseError("tensor a f32 [1, 1, 1, 1, 1]"),
            "t.kv:1:14: a tensor has 1 to 4 dims");
  EXPECT_EQ(parseError("tensor a f32 [0]"),
            "t.kv:1:14: tensor dims must be positive integers");
  EXPECT_EQ(parseError("tensor a f32 [1.5]"),
            "t.kv:1:14: tensor dims must be positive integers");
  EXPECT_EQ(parseError("tensor a f32 [2199023255553]"),
            "t.kv:1:14: tensor dims must be positive integers");
  EXPECT_EQ(parseError("tensor a q4_k [100, 2]"),
            "t.kv:1:15: first dim 100 is not a multiple of the Q4_K block "
            "size 256");
  EXPECT_EQ(parseError("tensor a f32 [1] x"),
            "t.kv:1:18: unexpected text after the tensor dims");
  EXPECT_EQ(parseError("tensor a f32 [1]\ntensor a f32 [2]"),
            "t.kv:2:8: duplicate tensor 'a'");
  // Four dims of 2^40 each multiply past 64 bits.
  EXPECT_EQ(parseError("tensor a f32 [1099511627776, 1099511627776, "
                       "1099511627776, 1099511627776]"),
            "t.kv:1:14: tensor has more than INT64_MAX elements");
  // 2^62 f32 elements fit INT64_MAX, but their 2^64 bytes do not fit 64 bits
  // (numBytes() used to wrap around to 0).
  EXPECT_EQ(parseError("tensor a f32 [1099511627776, 4194304]"),
            "t.kv:1:14: tensor data size overflows 64 bits");
  // ggml's GGML_MAX_NAME, as the GGUF reader.
  EXPECT_TRUE(parseOk("tensor " + std::string(63, 'n') + " f32 [1]"));
  EXPECT_EQ(parseError("tensor " + std::string(64, 'n') + " f32 [1]"),
            "t.kv:1:8: tensor name of 64 bytes is longer than ggml's limit of "
            "63 bytes");
}

TEST(KeyValueFileTest, ErrorsNameTheLine) {
  std::string error = parseError("a = 1\n\n# c\nb = ?\n");
  EXPECT_EQ(error, "t.kv:4:5: unexpected character '?' in value");
}

} // namespace
