//===- GgufTest.cpp - GGUF v3 reader and writer ---------------------------===//
//
// Reader tests build images byte by byte (reference/gguf-and-quants.md §1), so
// they do not depend on the writer, and check the exact error for each
// defect. Writer tests read their output back and compare a hand-laid file.
// test/golden/gguf_oracle.py checks both against the PyPI gguf package.
//
//===----------------------------------------------------------------------===//
#include "runtime/format/Gguf.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <regex>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

using namespace strata::format;
namespace fs = std::filesystem;

namespace {

constexpr uint32_t kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5,
                   kF32 = 6, kBool = 7, kString = 8, kArray = 9, kU64 = 10,
                   kI64 = 11, kF64 = 12;

/// A little-endian GGUF image under construction.
class Image {
public:
  std::vector<uint8_t> bytes;

  size_t size() const { return bytes.size(); }

  template <typename T> Image &put(T x) {
    uint8_t b[sizeof(T)];
    std::memcpy(b, &x, sizeof(T));
    bytes.insert(bytes.end(), b, b + sizeof(T));
    return *this;
  }
  Image &u8(uint8_t x) { return put(x); }
  Image &u32(uint32_t x) { return put(x); }
  Image &u64(uint64_t x) { return put(x); }
  Image &str(std::string_view s) {
    u64(s.size());
    bytes.insert(bytes.end(), s.begin(), s.end());
    return *this;
  }
  Image &header(uint64_t tensors, uint64_t kvs, uint32_t version = 3) {
    bytes.insert(bytes.end(), {'G', 'G', 'U', 'F'});
    return u32(version).u64(tensors).u64(kvs);
  }
  /// A key and its value type; the caller appends the value.
  Image &key(std::string_view k, uint32_t type) { return str(k).u32(type); }
  Image &tensor(std::string_view name, std::vector<uint64_t> dims,
                uint32_t type, uint64_t offset) {
    str(name).u32(dims.size());
    for (uint64_t d : dims)
      u64(d);
    return u32(type).u64(offset);
  }
  Image &padTo(uint64_t alignment) {
    while (bytes.size() % alignment)
      bytes.push_back(0);
    return *this;
  }
  Image &fill(size_t n, uint8_t first = 0) {
    for (size_t k = 0; k < n; ++k)
      bytes.push_back(static_cast<uint8_t>(first + k));
    return *this;
  }
};

std::unique_ptr<GgufFile> read(const Image &image, std::string &error) {
  return GgufFile::fromBytes(image.bytes.data(), image.size(), "t.gguf", error);
}

std::unique_ptr<GgufFile> readOk(const Image &image) {
  std::string error;
  std::unique_ptr<GgufFile> file = read(image, error);
  EXPECT_TRUE(file) << error;
  return file;
}

/// The error for \p image without the "t.gguf: " prefix; it must fail.
std::string readError(const Image &image) {
  std::string error;
  std::unique_ptr<GgufFile> file = read(image, error);
  EXPECT_FALSE(file);
  EXPECT_EQ(error.rfind("t.gguf: ", 0), 0u) << error;
  return error.size() > 8 ? error.substr(8) : error;
}

/// A file with one key of every kind and three tensors, the last of which
/// ends exactly at the end of the file.
Image richImage() {
  Image f;
  f.header(3, 17);
  f.key("general.architecture", kString).str("llama");
  f.key("u8", kU8).u8(250);
  f.key("i8", kI8).put<int8_t>(-7);
  f.key("u16", kU16).put<uint16_t>(65535);
  f.key("i16", kI16).put<int16_t>(-32768);
  f.key("u32", kU32).u32(4000000000u);
  f.key("i32", kI32).put<int32_t>(-123456);
  f.key("f32", kF32).put<float>(0.1f);
  f.key("bool", kBool).u8(1);
  f.key("string", kString).str(std::string("a\0b\"c", 5));
  f.key("u64", kU64).u64(UINT64_MAX);
  f.key("i64", kI64).put<int64_t>(INT64_MIN);
  f.key("f64", kF64).put<double>(-2.5e-300);
  f.key("arr.str", kArray).u32(kString).u64(2).str("x").str("");
  f.key("arr.empty", kArray).u32(kF64).u64(0);
  // [[1, 2], [], [[true]]] with differently typed inner arrays.
  f.key("arr.nested", kArray).u32(kArray).u64(3);
  f.u32(kI32).u64(2).put<int32_t>(1).put<int32_t>(2);
  f.u32(kU8).u64(0);
  f.u32(kArray).u64(1).u32(kBool).u64(1).u8(1);
  f.key("general.alignment", kU32).u32(64);
  f.tensor("tok", {4, 3}, /*F32*/ 0, 0);
  f.tensor("blk.0.q", {256, 2}, /*Q4_K*/ 12, 64);
  f.tensor("w8", {32}, /*Q8_0*/ 8, 64 + 320);
  f.padTo(64);
  f.fill(48, 1).padTo(64);  // tok: 4*3*4 = 48 bytes
  f.fill(288, 2).padTo(64); // blk.0.q: 2 rows * 144
  f.fill(34, 3);            // w8: one block, no trailing padding
  return f;
}

TEST(GgufReaderTest, ReadsEveryValueType) {
  Image f = richImage();
  std::unique_ptr<GgufFile> file = readOk(f);
  ASSERT_TRUE(file);
  const ModelInfo &info = file->info();
  EXPECT_EQ(info.source, "t.gguf");
  EXPECT_EQ(file->version(), 3u);
  EXPECT_EQ(info.architecture(), "llama");
  ASSERT_EQ(info.metadata().size(), 17u);
  std::vector<std::string> keys;
  for (const auto &kv : info.metadata())
    keys.push_back(kv.first);
  EXPECT_EQ(keys,
            (std::vector<std::string>{
                "general.architecture", "u8", "i8", "u16", "i16", "u32", "i32",
                "f32", "bool", "string", "u64", "i64", "f64", "arr.str",
                "arr.empty", "arr.nested", "general.alignment"}));
  auto meta = [&](const char *k) {
    const MetaValue *v = info.findMeta(k);
    EXPECT_TRUE(v) << k;
    return v ? *v : MetaValue();
  };
  EXPECT_EQ(meta("u8").type, GgufValueType::UInt8);
  EXPECT_EQ(meta("u8").u, 250u);
  EXPECT_EQ(meta("i8").type, GgufValueType::Int8);
  EXPECT_EQ(meta("i8").i, -7);
  EXPECT_EQ(meta("u16").u, 65535u);
  EXPECT_EQ(meta("i16").i, -32768);
  EXPECT_EQ(meta("u32").u, 4000000000u);
  EXPECT_EQ(meta("i32").type, GgufValueType::Int32);
  EXPECT_EQ(meta("i32").i, -123456);
  EXPECT_EQ(meta("f32").type, GgufValueType::Float32);
  EXPECT_EQ(meta("f32").f, static_cast<double>(0.1f));
  EXPECT_EQ(meta("bool").type, GgufValueType::Bool);
  EXPECT_TRUE(meta("bool").b);
  EXPECT_EQ(meta("string").s, std::string("a\0b\"c", 5));
  EXPECT_EQ(meta("string").toString(), "\"a\\x00b\\\"c\"");
  EXPECT_EQ(meta("u64").type, GgufValueType::UInt64);
  EXPECT_EQ(meta("u64").u, UINT64_MAX);
  EXPECT_EQ(meta("i64").i, INT64_MIN);
  EXPECT_EQ(meta("f64").type, GgufValueType::Float64);
  EXPECT_EQ(meta("f64").f, -2.5e-300);
  EXPECT_EQ(meta("arr.str").elemType, GgufValueType::String);
  EXPECT_EQ(meta("arr.str").toString(), "[\"x\", \"\"]");
  EXPECT_EQ(meta("arr.empty").elemType, GgufValueType::Float64);
  EXPECT_TRUE(meta("arr.empty").array.empty());
  MetaValue nested = meta("arr.nested");
  EXPECT_EQ(nested.elemType, GgufValueType::Array);
  EXPECT_EQ(nested.toString(), "[[1, 2], [], [[true]]]");
  ASSERT_EQ(nested.array.size(), 3u);
  EXPECT_EQ(nested.array[0].elemType, GgufValueType::Int32);
  EXPECT_EQ(nested.array[0].array[1].type, GgufValueType::Int32);
  EXPECT_EQ(nested.array[1].elemType, GgufValueType::UInt8);
  EXPECT_EQ(nested.array[2].array[0].elemType, GgufValueType::Bool);
}

TEST(GgufReaderTest, ReadsTensorInfosAndData) {
  Image f = richImage();
  std::unique_ptr<GgufFile> file = readOk(f);
  ASSERT_TRUE(file);
  EXPECT_EQ(file->alignment(), 64u);
  EXPECT_EQ(file->dataOffset() % 64, 0u);
  EXPECT_EQ(file->dataOffset() + 64 + 320 + 34, f.size());
  const std::vector<TensorInfo> &ts = file->info().tensors();
  ASSERT_EQ(ts.size(), 3u);
  EXPECT_EQ(ts[0].name, "tok");
  EXPECT_EQ(ts[0].type, GgmlType::F32);
  EXPECT_EQ(ts[0].dims, (std::vector<uint64_t>{4, 3}));
  EXPECT_EQ(ts[0].offset, 0u);
  EXPECT_EQ(ts[1].type, GgmlType::Q4_K);
  EXPECT_EQ(ts[1].numBytes(), 288u);
  EXPECT_EQ(ts[2].type, GgmlType::Q8_0);
  EXPECT_EQ(ts[2].offset, 384u);
  EXPECT_EQ(file->info().findTensor("blk.0.q"), &ts[1]);
  // Data pointers land on the bytes laid down for each tensor.
  const uint8_t *base = f.bytes.data();
  EXPECT_EQ(file->tensorData(ts[0]), base + file->dataOffset());
  EXPECT_EQ(file->tensorData(ts[0])[47], 48);
  EXPECT_EQ(file->tensorData(ts[1])[0], 2);
  EXPECT_EQ(file->tensorData(ts[2])[33], 3 + 33);
}

TEST(GgufReaderTest, MinimalFileAndDefaultAlignment) {
  Image f;
  f.header(0, 0);
  std::unique_ptr<GgufFile> file = readOk(f);
  ASSERT_TRUE(file);
  EXPECT_EQ(file->alignment(), 32u);
  // The data section starts at the next multiple of 32, even past the end
  // of a file that has no tensors.
  EXPECT_EQ(file->dataOffset(), 32u);
  EXPECT_TRUE(file->info().metadata().empty());
  EXPECT_TRUE(file->info().tensors().empty());
}

TEST(GgufReaderTest, DataSectionAlignsToDefault) {
  Image f;
  f.header(1, 0).tensor("w", {2}, 0, 0).padTo(32).fill(8);
  std::unique_ptr<GgufFile> file = readOk(f);
  ASSERT_TRUE(file);
  EXPECT_EQ(file->dataOffset(), 64u);
  EXPECT_EQ(file->tensorData(file->info().tensors()[0])[7], 7);
}

TEST(GgufReaderTest, BadMagic) {
  Image f;
  f.header(0, 0);
  f.bytes[3] = 'X';
  EXPECT_EQ(readError(f), "offset 0: magic: bad magic 47 47 55 58 (expected "
                          "'GGUF' = 47 47 55 46)");
}

TEST(GgufReaderTest, EmptyAndTinyInputs) {
  Image f;
  EXPECT_EQ(readError(f), "offset 0: magic: truncated: needs 4 bytes, 0 left");
  f.bytes = {'G', 'G'};
  EXPECT_EQ(readError(f), "offset 0: magic: truncated: needs 4 bytes, 2 left");
  std::string error;
  EXPECT_FALSE(GgufFile::fromBytes(nullptr, 0, "t.gguf", error));
  EXPECT_EQ(error, "t.gguf: offset 0: magic: truncated: needs 4 bytes, 0 left");
}

TEST(GgufReaderTest, Versions) {
  Image f;
  f.header(0, 0, 2);
  EXPECT_EQ(readError(f),
            "offset 4: version: GGUF version 2 is not supported; only version "
            "3 is");
  f = Image();
  f.header(0, 0, 1);
  EXPECT_EQ(readError(f), "offset 4: version: unsupported version 1; only "
                          "version 3 is supported");
  f = Image();
  f.header(0, 0, 4);
  EXPECT_EQ(readError(f), "offset 4: version: unsupported version 4; only "
                          "version 3 is supported");
  f = Image();
  f.header(0, 0, 0x03000000);
  EXPECT_EQ(readError(f),
            "offset 4: version: version 0x03000000 is byte-swapped: big-endian "
            "GGUF files are not supported");
}

TEST(GgufReaderTest, TruncatedHeader) {
  Image f;
  f.header(0, 0);
  f.bytes.resize(20);
  EXPECT_EQ(readError(f), "offset 16: metadata_kv_count: truncated: needs 8 "
                          "bytes, 4 left");
  f.bytes.resize(9);
  EXPECT_EQ(readError(f),
            "offset 8: tensor_count: truncated: needs 8 bytes, 1 left");
}

TEST(GgufReaderTest, CountsBoundedByBytesLeft) {
  Image f;
  f.header(0, 2).key("a", kU8).u8(1);
  EXPECT_EQ(readError(f), "offset 16: metadata_kv_count: 2 key/value pairs "
                          "cannot fit in the 14 bytes left");
  f = Image();
  f.header(UINT64_MAX, UINT64_MAX);
  EXPECT_EQ(readError(f), "offset 16: metadata_kv_count: 18446744073709551615 "
                          "key/value pairs cannot fit in the 0 bytes left");
  f = Image();
  f.header(UINT64_MAX, 0).fill(100);
  EXPECT_EQ(readError(f), "offset 8: tensor_count: 18446744073709551615 "
                          "tensor infos cannot fit in the 100 bytes left");
  // 13 bytes per key/value pair are set aside before tensor infos count.
  f = Image();
  f.header(1, 1).key("a", kU8).u8(1).fill(30);
  EXPECT_EQ(readError(f), "offset 8: tensor_count: 1 tensor infos cannot fit "
                          "in the 44 bytes left");
}

TEST(GgufReaderTest, StringLengths) {
  Image f;
  f.header(0, 1).u64(UINT64_MAX).fill(13);
  EXPECT_EQ(readError(f), "offset 24: metadata[0] key: string length "
                          "18446744073709551615 exceeds the 13 bytes left");
  f = Image();
  f.header(0, 1).key("k", kString).u64(6).fill(5);
  EXPECT_EQ(readError(f), "offset 37: metadata 'k': string length 6 exceeds "
                          "the 5 bytes left");
}

TEST(GgufReaderTest, EmptyKey) {
  // ggml refuses empty keys.
  Image f;
  f.header(0, 1).key("", kU8).u8(1);
  EXPECT_EQ(readError(f), "offset 24: metadata[0] key: empty key");
}

TEST(GgufReaderTest, UnknownValueType) {
  Image f;
  f.header(0, 1).key("a", 13).u32(0);
  EXPECT_EQ(readError(f), "offset 33: metadata 'a': unknown value type 13");
  f = Image();
  f.header(0, 1).key("a", kArray).u32(0xffffffff).u64(0);
  EXPECT_EQ(readError(f),
            "offset 37: metadata 'a': unknown array element type 4294967295");
}

TEST(GgufReaderTest, TruncatedScalar) {
  Image f;
  f.header(0, 1).key("a", kF64).fill(7);
  EXPECT_EQ(readError(f),
            "offset 37: metadata 'a': truncated: needs 8 bytes, 7 left");
}

TEST(GgufReaderTest, InvalidBool) {
  Image f;
  f.header(0, 1).key("a", kBool).u8(2);
  EXPECT_EQ(readError(f), "offset 37: metadata 'a': invalid bool byte 0x02 "
                          "(must be 0 or 1)");
  f = Image();
  f.header(0, 1).key("a", kArray).u32(kBool).u64(3).u8(0).u8(1).u8(0xff);
  EXPECT_EQ(readError(f), "offset 51: metadata 'a'[2]: invalid bool byte "
                          "0xff (must be 0 or 1)");
}

TEST(GgufReaderTest, ArrayCounts) {
  Image f;
  f.header(0, 1).key("a", kArray).u32(kU32).u64(4).fill(15);
  EXPECT_EQ(readError(f), "offset 41: metadata 'a': 4 elements of type u32 "
                          "cannot fit in the 15 bytes left");
  f = Image();
  f.header(0, 1).key("a", kArray).u32(kArray).u64(UINT64_MAX).fill(100);
  EXPECT_EQ(readError(f),
            "offset 41: metadata 'a': 18446744073709551615 elements of type "
            "array cannot fit in the 100 bytes left");
  // Nested: the inner count is bounded by what is left after it.
  f = Image();
  f.header(0, 1).key("a", kArray).u32(kArray).u64(1);
  f.u32(kString).u64(2).str("abc");
  EXPECT_EQ(readError(f), "offset 53: metadata 'a'[0]: 2 elements of type "
                          "string cannot fit in the 11 bytes left");
}

TEST(GgufReaderTest, TotalElementsAreCapped) {
  uint64_t n = GgufFile::kMaxMetaElements + 1;
  Image f;
  f.header(0, 1).key("a", kArray).u32(kU8).u64(n);
  f.bytes.resize(f.size() + n);
  EXPECT_EQ(readError(f), "offset 41: metadata 'a': 8388609 more elements "
                          "exceed the limit of 8388608 metadata array "
                          "elements per file");
}

/// A key "a" holding \p depth nested arrays around one u8.
Image nestedImage(int depth, size_t &innermostTypeAt) {
  Image f;
  f.header(0, 1).key("a", kArray);
  for (int d = 1; d < depth; ++d)
    f.u32(kArray).u64(1);
  innermostTypeAt = f.size();
  f.u32(kU8).u64(1).u8(7);
  return f;
}

TEST(GgufReaderTest, ArrayNestingDepth) {
  size_t at = 0;
  Image ok = nestedImage(GgufFile::kMaxArrayDepth, at);
  std::unique_ptr<GgufFile> file = readOk(ok);
  ASSERT_TRUE(file);
  EXPECT_EQ(file->info().findMeta("a")->toString(), "[[[[[[[[7]]]]]]]]");

  Image deep = nestedImage(GgufFile::kMaxArrayDepth + 1, at);
  EXPECT_EQ(readError(deep),
            fmt::format("offset {}: metadata 'a'[0][0][0][0][0][0][0][0]: "
                        "arrays nested more than 8 deep",
                        at));
  // Deep nesting far beyond the limit stops at the limit, not the stack.
  Image deeper = nestedImage(100000, at);
  EXPECT_NE(readError(deeper).find("nested more than 8 deep"),
            std::string::npos);
}

TEST(GgufReaderTest, DuplicateKey) {
  Image f;
  f.header(0, 2).key("a", kU8).u8(1).key("a", kU8).u8(2);
  EXPECT_EQ(readError(f), "offset 38: metadata[1] key: duplicate key 'a'");
}

TEST(GgufReaderTest, KeysAreQuotedSafely) {
  Image f;
  std::string key = "bad\n'key\x01" + std::string(100, 'x');
  f.header(0, 1).key(key, 13);
  std::string error = readError(f);
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  EXPECT_NE(error.find("metadata 'bad\\x0a\\'key\\x01xxx"), std::string::npos)
      << error;
  EXPECT_NE(error.find("x...': unknown value type 13"), std::string::npos)
      << error;
}

TEST(GgufReaderTest, Alignment) {
  Image f;
  f.header(0, 1).key("general.alignment", kI32).put<int32_t>(32);
  EXPECT_EQ(readError(f),
            "offset 49: metadata 'general.alignment': must be u32, not i32");
  for (uint32_t bad : {0u, 4u, 24u, 33u, 0x80000001u}) {
    f = Image();
    f.header(0, 1).key("general.alignment", kU32).u32(bad);
    EXPECT_EQ(readError(f),
              fmt::format("offset 53: metadata 'general.alignment': {} is not "
                          "a nonzero power of two and a multiple of 8",
                          bad));
  }
  for (uint32_t good : {8u, 16u, 4096u, 0x80000000u}) {
    f = Image();
    f.header(0, 1).key("general.alignment", kU32).u32(good);
    std::unique_ptr<GgufFile> file = readOk(f);
    ASSERT_TRUE(file);
    EXPECT_EQ(file->alignment(), good);
    EXPECT_EQ(file->dataOffset(), (f.size() + good - 1) / good * good);
  }
}

TEST(GgufReaderTest, TensorNDims) {
  Image f;
  f.header(1, 0).str("w").u32(0).u32(0).u64(0).fill(16);
  EXPECT_EQ(readError(f), "offset 33: tensor 'w' n_dims: n_dims 0 is not in "
                          "1..4");
  f = Image();
  f.header(1, 0).tensor("w", {1, 1, 1, 1, 1}, 0, 0);
  EXPECT_EQ(readError(f), "offset 33: tensor 'w' n_dims: n_dims 5 is not in "
                          "1..4");
}

TEST(GgufReaderTest, TensorDims) {
  Image f;
  f.header(1, 0).tensor("w", {4, 0}, 0, 0);
  EXPECT_EQ(readError(f), "offset 45: tensor 'w' dims: dims[1] is zero");
  f = Image();
  f.header(1, 0).tensor("w", {uint64_t(INT64_MAX) + 1}, 0, 0);
  EXPECT_EQ(readError(f), "offset 37: tensor 'w' dims: dims[0] = "
                          "9223372036854775808 exceeds INT64_MAX");
  f = Image();
  f.header(1, 0).tensor("w", {uint64_t(1) << 32, uint64_t(1) << 32}, 0, 0);
  EXPECT_EQ(readError(f),
            "offset 37: tensor 'w' dims: element count overflows INT64_MAX");
  f = Image();
  f.header(1, 0).tensor("w", {uint64_t(1) << 31, uint64_t(1) << 31}, 0, 0);
  EXPECT_EQ(readError(f),
            "offset 37: tensor 'w' dims: byte size overflows 64 bits");
  // One row of 2^62 f32s: the row's 2^64 bytes used to wrap around to 0, so
  // the tensor took no bytes and passed every bounds check.
  f = Image();
  f.header(1, 0).tensor("w", {uint64_t(1) << 62}, 0, 0).padTo(32);
  EXPECT_EQ(readError(f),
            "offset 37: tensor 'w' dims: byte size overflows 64 bits");
}

TEST(GgufReaderTest, TensorBlockSize) {
  Image f;
  f.header(1, 0).tensor("w", {100, 2}, /*Q4_K*/ 12, 0);
  EXPECT_EQ(readError(f), "offset 37: tensor 'w' dims: first extent 100 is "
                          "not a multiple of the Q4_K block size 256");
  // Only the first extent is in blocks.
  f = Image();
  f.header(1, 0).tensor("w", {32, 3}, /*Q8_0*/ 8, 0).padTo(32).fill(102);
  EXPECT_TRUE(readOk(f));
}

TEST(GgufReaderTest, TensorType) {
  for (uint32_t bad : {4u, 5u, 31u, 40u, 0xffffffffu}) {
    Image f;
    f.header(1, 0).tensor("w", {32}, bad, 0);
    EXPECT_EQ(readError(f),
              fmt::format("offset 45: tensor 'w' type: unknown ggml type id {}",
                          bad));
  }
}

TEST(GgufReaderTest, TensorNameLength) {
  // ggml's GGML_MAX_NAME is 64 bytes with the NUL: 63 bytes fit, 64 do not.
  Image f;
  f.header(1, 0).tensor(std::string(63, 'n'), {8}, 0, 0).padTo(32).fill(32);
  EXPECT_TRUE(readOk(f));
  f = Image();
  f.header(1, 0).tensor(std::string(64, 'n'), {8}, 0, 0).padTo(32).fill(32);
  EXPECT_EQ(readError(f), "offset 24: tensor[0] name: name of 64 bytes is "
                          "longer than ggml's limit of 63 bytes");
}

TEST(GgufReaderTest, DuplicateTensorName) {
  Image f;
  f.header(2, 0).tensor("w", {8}, 0, 0).tensor("w", {8}, 0, 32);
  EXPECT_EQ(readError(f), "offset 57: tensor[1] name: duplicate tensor name "
                          "'w'");
}

TEST(GgufReaderTest, TruncatedTensorInfo) {
  Image f;
  f.header(1, 0).tensor("weight", {8}, 0, 0);
  f.bytes.resize(f.size() - 3);
  EXPECT_EQ(readError(f), "offset 54: tensor 'weight' offset: truncated: needs "
                          "8 bytes, 5 left");
}

TEST(GgufReaderTest, TensorOffsetMisaligned) {
  Image f;
  f.header(1, 0).tensor("w", {8}, 0, 16).padTo(32).fill(64);
  EXPECT_EQ(readError(f), "offset 49: tensor 'w' offset: 16 is not a multiple "
                          "of the alignment 32");
}

TEST(GgufReaderTest, TensorDataOutsideFile) {
  Image f;
  f.header(1, 0).tensor("w", {8}, 0, 0).padTo(32).fill(31);
  EXPECT_EQ(readError(f),
            "offset 49: tensor 'w' offset: tensor data (data section at 64 + "
            "offset 0, 32 bytes) lies outside the file (95 bytes)");
  // A size near 2^64 must not wrap around into the file.
  f = Image();
  f.header(1, 0).tensor("w", {uint64_t(1) << 60}, 0, 0).padTo(32).fill(32);
  EXPECT_EQ(readError(f), "offset 49: tensor 'w' offset: tensor data (data "
                          "section at 64 + offset 0, 4611686018427387904 "
                          "bytes) lies outside the file (96 bytes)");
  // The data section itself may start past the end of the file.
  f = Image();
  f.header(1, 0).tensor("w", {8}, 0, 0);
  EXPECT_NE(readError(f).find("lies outside the file (57 bytes)"),
            std::string::npos);
}

TEST(GgufReaderTest, TensorDataIsPackedInFileOrder) {
  // ggml (gguf_init_from_file_impl) requires each offset to be the sum of
  // the padded sizes before it: in order, aligned, no gaps, no overlaps.
  Image f;
  f.header(2, 0).tensor("a", {8}, 0, 0).tensor("b", {2}, 0, 32);
  f.padTo(32).fill(40);
  EXPECT_TRUE(readOk(f));
  // Reordered.
  f = Image();
  f.header(2, 0).tensor("a", {8}, 0, 32).tensor("b", {8}, 0, 0);
  f.padTo(32).fill(64);
  EXPECT_EQ(readError(f), "offset 49: tensor 'a' offset: 32 is not 0: tensor "
                          "data must follow in file order, each tensor "
                          "padded to the alignment 32, with no gaps or "
                          "overlaps (as ggml requires)");
  // Shared (overlapping).
  f = Image();
  f.header(2, 0).tensor("a", {8}, 0, 0).tensor("b", {8}, 0, 0);
  f.padTo(32).fill(64);
  EXPECT_NE(readError(f).find("tensor 'b' offset: 0 is not 32: "),
            std::string::npos);
  // A gap.
  f = Image();
  f.header(2, 0).tensor("a", {8}, 0, 0).tensor("b", {8}, 0, 64);
  f.padTo(32).fill(96);
  EXPECT_NE(readError(f).find("tensor 'b' offset: 64 is not 32: "),
            std::string::npos);
  // Padded to a custom alignment: 8 f32s take 32 bytes, padded to 64.
  f = Image();
  f.header(2, 1).key("general.alignment", kU32).u32(64);
  f.tensor("a", {8}, 0, 0).tensor("b", {8}, 0, 32);
  f.padTo(64).fill(96);
  EXPECT_NE(readError(f).find("tensor 'b' offset: 32 is not a multiple of "
                              "the alignment 64"),
            std::string::npos);
  // Shapes-only files follow the same layout.
  f = Image();
  f.header(2, 1).key(kShapesOnlyKey, kBool).u8(1);
  f.tensor("a", {8}, 0, 0).tensor("b", {8}, 0, 64).padTo(32);
  std::string error;
  EXPECT_FALSE(GgufFile::fromBytes(f.bytes.data(), f.size(), "t.gguf", error,
                                   GgufContents::Shapes));
  EXPECT_NE(error.find("tensor 'b' offset: 64 is not 32: "), std::string::npos)
      << error;
}

const std::regex kErrorFormat("t\\.gguf: offset (\\d+): [^:\n]+(: [^\n]+)+");

TEST(GgufReaderTest, EveryTruncationFailsCleanly) {
  Image full = richImage();
  for (size_t n = 0; n < full.size(); ++n) {
    Image f;
    f.bytes.assign(full.bytes.begin(), full.bytes.begin() + n);
    std::string error;
    // A copy of exactly n bytes lets AddressSanitizer see any overread.
    std::vector<uint8_t> exact(f.bytes);
    EXPECT_FALSE(GgufFile::fromBytes(exact.data(), n, "t.gguf", error)) << n;
    std::smatch m;
    ASSERT_TRUE(std::regex_match(error, m, kErrorFormat)) << n << ": " << error;
    EXPECT_LE(std::stoull(m[1]), n) << error;
  }
}

TEST(GgufReaderTest, EveryByteMutationFailsCleanlyOrReads) {
  Image full = richImage();
  size_t accepted = 0, rejected = 0;
  for (size_t k = 0; k < full.size(); ++k) {
    for (uint8_t delta : {1, 0x7f, 0x80, 0xff}) {
      std::vector<uint8_t> bytes = full.bytes;
      bytes[k] = static_cast<uint8_t>(bytes[k] + delta);
      std::string error;
      std::unique_ptr<GgufFile> file =
          GgufFile::fromBytes(bytes.data(), bytes.size(), "t.gguf", error);
      if (!file) {
        ++rejected;
        EXPECT_TRUE(std::regex_match(error, kErrorFormat))
            << k << ": " << error;
        continue;
      }
      ++accepted;
      for (const TensorInfo &t : file->info().tensors()) {
        const uint8_t *p = file->tensorData(t);
        ASSERT_GE(p, bytes.data());
        ASSERT_LE(p + t.numBytes(), bytes.data() + bytes.size());
      }
      for (const auto &kv : file->info().metadata())
        EXPECT_FALSE(kv.second.toString().empty());
    }
  }
  // Most bytes are structure; data and some values change harmlessly.
  EXPECT_GT(rejected, 0u);
  EXPECT_GT(accepted, 0u);
}

//===----------------------------------------------------------------------===//
// Files
//===----------------------------------------------------------------------===//

/// A fresh directory, removed with its contents at the end of the test.
class TempDir {
public:
  TempDir() {
    std::string templ = ::testing::TempDir() + "strata-gguf-test-XXXXXX";
    EXPECT_NE(::mkdtemp(templ.data()), nullptr);
    path = templ;
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string &name) const { return path + "/" + name; }
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto &e : fs::directory_iterator(path))
      names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  std::string path;
};

std::vector<uint8_t> slurp(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

void spit(const std::string &path, const std::vector<uint8_t> &bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char *>(bytes.data()), bytes.size());
}

TEST(GgufFileTest, OpenMapsAndValidates) {
  TempDir dir;
  Image f = richImage();
  spit(dir.file("m.gguf"), f.bytes);
  std::string error;
  std::unique_ptr<GgufFile> file = GgufFile::open(dir.file("m.gguf"), error);
  ASSERT_TRUE(file) << error;
  EXPECT_EQ(file->info().source, dir.file("m.gguf"));
  EXPECT_EQ(file->info().tensors().size(), 3u);
  EXPECT_EQ(file->tensorData(file->info().tensors()[2])[33], 36);

  // The ModelInfo can be taken while the data stays mapped.
  ModelInfo taken = std::move(file->mutableInfo());
  EXPECT_EQ(taken.architecture(), "llama");
}

TEST(GgufFileTest, OpenErrors) {
  TempDir dir;
  std::string error;
  EXPECT_FALSE(GgufFile::open(dir.file("missing.gguf"), error));
  EXPECT_EQ(error, dir.file("missing.gguf") +
                       ": cannot open: No such file or directory");
  EXPECT_FALSE(GgufFile::open(dir.path, error));
  EXPECT_EQ(error, dir.path + ": not a GGUF file (it is a directory)");
  spit(dir.file("empty.gguf"), {});
  EXPECT_FALSE(GgufFile::open(dir.file("empty.gguf"), error));
  EXPECT_EQ(error, dir.file("empty.gguf") + ": not a GGUF file (the file is "
                                            "empty)");
  // A device is judged by its open descriptor, never read.
  EXPECT_FALSE(GgufFile::open("/dev/zero", error));
  EXPECT_EQ(error, "/dev/zero: not a regular file");
  Image f;
  f.header(0, 0, 2);
  spit(dir.file("v2.gguf"), f.bytes);
  EXPECT_FALSE(GgufFile::open(dir.file("v2.gguf"), error));
  EXPECT_EQ(error, dir.file("v2.gguf") + ": offset 4: version: GGUF version 2 "
                                         "is not supported; only version 3 is");
}

TEST(GgufFileTest, LoadModelInfoDispatchesOnMagic) {
  TempDir dir;
  spit(dir.file("m.gguf"), richImage().bytes);
  std::string error;
  std::unique_ptr<ModelInfo> info = loadModelInfo(dir.file("m.gguf"), error);
  ASSERT_TRUE(info) << error;
  EXPECT_EQ(info->architecture(), "llama");
  EXPECT_EQ(info->tensors().size(), 3u);
  std::vector<uint8_t> bad = richImage().bytes;
  bad.resize(100);
  spit(dir.file("bad.gguf"), bad);
  EXPECT_FALSE(loadModelInfo(dir.file("bad.gguf"), error));
  EXPECT_EQ(error.rfind(dir.file("bad.gguf") + ": offset ", 0), 0u) << error;
}

TEST(GgufFileTest, LoadModelInfoRefusesWhatIsNotAFile) {
  // /dev/zero used to be read as key/value text until memory ran out; a
  // directory or an empty file gave an empty model (and later a missing
  // metadata key).
  TempDir dir;
  std::string error;
  EXPECT_FALSE(loadModelInfo("/dev/zero", error));
  EXPECT_EQ(error, "/dev/zero: not a regular file");
  EXPECT_FALSE(loadModelInfo(dir.path, error));
  EXPECT_EQ(error, dir.path + ": not a GGUF file (it is a directory)");
  spit(dir.file("empty"), {});
  EXPECT_FALSE(loadModelInfo(dir.file("empty"), error));
  EXPECT_EQ(error, dir.file("empty") + ": not a GGUF file (the file is empty)");
  EXPECT_FALSE(loadModelInfo(dir.file("missing"), error));
  EXPECT_EQ(error, dir.file("missing") + ": cannot open: No such file or "
                                         "directory");
  // Key/value text still loads.
  std::string kv = "general.architecture = \"toy\"\n";
  spit(dir.file("m.kv"), std::vector<uint8_t>(kv.begin(), kv.end()));
  std::unique_ptr<ModelInfo> info = loadModelInfo(dir.file("m.kv"), error);
  ASSERT_TRUE(info) << error;
  EXPECT_EQ(info->architecture(), "toy");
}

TEST(GgufFileTest, StringsOverGgmlsLimit) {
  // ggml refuses strings over GGUF_MAX_STRING_LENGTH (1 GiB) even where the
  // file holds them; a sparse file makes one cheaply.
  TempDir dir;
  Image f;
  f.header(0, 1).key("k", kString).u64((uint64_t(1) << 30) + 1);
  spit(dir.file("big.gguf"), f.bytes);
  ASSERT_EQ(::truncate(dir.file("big.gguf").c_str(),
                       static_cast<off_t>(f.size() + (uint64_t(1) << 30) + 1)),
            0);
  std::string error;
  EXPECT_FALSE(GgufFile::open(dir.file("big.gguf"), error));
  EXPECT_EQ(error, dir.file("big.gguf") + ": offset 37: metadata 'k': string "
                                          "length 1073741825 exceeds ggml's "
                                          "limit of 1073741824 bytes");
}

//===----------------------------------------------------------------------===//
// Writer
//===----------------------------------------------------------------------===//

GgufTensorData tensor(std::string name, GgmlType type,
                      std::vector<uint64_t> dims, uint8_t seed) {
  GgufTensorData t;
  t.info.name = std::move(name);
  t.info.type = type;
  t.info.dims = std::move(dims);
  t.bytes.resize(t.info.numBytes());
  for (size_t k = 0; k < t.bytes.size(); ++k)
    t.bytes[k] = static_cast<uint8_t>(seed + k * 7);
  return t;
}

/// Metadata with every value type.
ModelInfo richInfo() {
  ModelInfo info;
  using T = GgufValueType;
  info.addMeta("general.architecture", MetaValue::makeString("qwen3"));
  info.addMeta("u8", MetaValue::makeUInt(255, T::UInt8));
  info.addMeta("i8", MetaValue::makeInt(-128, T::Int8));
  info.addMeta("u16", MetaValue::makeUInt(65535, T::UInt16));
  info.addMeta("i16", MetaValue::makeInt(32767, T::Int16));
  info.addMeta("u32", MetaValue::makeUInt(UINT32_MAX, T::UInt32));
  info.addMeta("i32", MetaValue::makeInt(INT32_MIN, T::Int32));
  info.addMeta("u64", MetaValue::makeUInt(UINT64_MAX, T::UInt64));
  info.addMeta("i64", MetaValue::makeInt(INT64_MIN, T::Int64));
  info.addMeta("f32", MetaValue::makeFloat(1e-6f, T::Float32));
  info.addMeta("f64", MetaValue::makeFloat(0.1, T::Float64));
  info.addMeta("nan", MetaValue::makeFloat(NAN, T::Float32));
  info.addMeta("bool", MetaValue::makeBool(false));
  info.addMeta("str", MetaValue::makeString(std::string("\0x\xff", 3)));
  info.addMeta(
      "arr", MetaValue::makeArray(T::Int16, {MetaValue::makeInt(-1, T::Int16),
                                             MetaValue::makeInt(2, T::Int16)}));
  info.addMeta("empty", MetaValue::makeArray(T::String, {}));
  info.addMeta(
      "nested",
      MetaValue::makeArray(
          T::Array,
          {MetaValue::makeArray(T::String, {MetaValue::makeString("a")}),
           MetaValue::makeArray(T::Bool, {MetaValue::makeBool(true)})}));
  return info;
}

bool sameValue(const MetaValue &a, const MetaValue &b) {
  if (a.type != b.type)
    return false;
  switch (a.type) {
  case GgufValueType::Float32:
  case GgufValueType::Float64:
    return a.f == b.f || (std::isnan(a.f) && std::isnan(b.f));
  case GgufValueType::Bool:
    return a.b == b.b;
  case GgufValueType::String:
    return a.s == b.s;
  case GgufValueType::Array:
    if (a.elemType != b.elemType || a.array.size() != b.array.size())
      return false;
    for (size_t k = 0; k < a.array.size(); ++k)
      if (!sameValue(a.array[k], b.array[k]))
        return false;
    return true;
  default:
    return a.asInt() == b.asInt() && a.u == b.u && a.i == b.i;
  }
}

void expectSameMetadata(const ModelInfo &a, const ModelInfo &b) {
  ASSERT_EQ(a.metadata().size(), b.metadata().size());
  for (size_t k = 0; k < a.metadata().size(); ++k) {
    EXPECT_EQ(a.metadata()[k].first, b.metadata()[k].first);
    EXPECT_TRUE(sameValue(a.metadata()[k].second, b.metadata()[k].second))
        << a.metadata()[k].first << ": " << a.metadata()[k].second.toString()
        << " vs " << b.metadata()[k].second.toString();
  }
}

TEST(GgufWriterTest, RoundTrip) {
  TempDir dir;
  ModelInfo info = richInfo();
  std::vector<GgufTensorData> tensors = {
      tensor("token_embd.weight", GgmlType::Q4_K, {256, 3}, 1),
      tensor("blk.0.ffn_down_exps.weight", GgmlType::Q6_K, {256, 2, 4}, 2),
      tensor("norm", GgmlType::F32, {5}, 3),
      tensor("pos", GgmlType::I32, {1, 2, 3, 4}, 4),
      tensor("b", GgmlType::BF16, {7}, 5)};
  std::string error;
  ASSERT_TRUE(writeGguf(dir.file("o.gguf"), info, tensors, error)) << error;
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"o.gguf"});

  std::unique_ptr<GgufFile> file = GgufFile::open(dir.file("o.gguf"), error);
  ASSERT_TRUE(file) << error;
  expectSameMetadata(info, file->info());
  EXPECT_EQ(file->alignment(), 32u);
  EXPECT_FALSE(file->info().findMeta("general.alignment"));
  const std::vector<TensorInfo> &ts = file->info().tensors();
  ASSERT_EQ(ts.size(), tensors.size());
  uint64_t offset = 0;
  for (size_t k = 0; k < ts.size(); ++k) {
    SCOPED_TRACE(ts[k].name);
    EXPECT_EQ(ts[k].name, tensors[k].info.name);
    EXPECT_EQ(ts[k].type, tensors[k].info.type);
    EXPECT_EQ(ts[k].dims, tensors[k].info.dims);
    EXPECT_EQ(ts[k].offset, offset);
    EXPECT_EQ(0, std::memcmp(file->tensorData(ts[k]), tensors[k].bytes.data(),
                             tensors[k].bytes.size()));
    offset += (tensors[k].bytes.size() + 31) / 32 * 32;
  }
  // Every tensor is padded, the last included.
  EXPECT_EQ(fs::file_size(dir.file("o.gguf")), file->dataOffset() + offset);
}

TEST(GgufWriterTest, ExactBytesOfASmallFile) {
  TempDir dir;
  ModelInfo info;
  info.addMeta("general.architecture", MetaValue::makeString("x"));
  GgufTensorData t;
  t.info.name = "w";
  t.info.type = GgmlType::F32;
  t.info.dims = {2};
  t.info.offset = 12345; // assigned by the writer
  t.bytes = {1, 2, 3, 4, 5, 6, 7, 8};
  std::string error;
  ASSERT_TRUE(writeGguf(dir.file("s.gguf"), info, {t}, error)) << error;
  Image want;
  want.header(1, 1).key("general.architecture", kString).str("x");
  want.tensor("w", {2}, 0, 0).padTo(32);
  want.bytes.insert(want.bytes.end(), t.bytes.begin(), t.bytes.end());
  want.padTo(32);
  EXPECT_EQ(want.size(), 160u);
  EXPECT_EQ(slurp(dir.file("s.gguf")), want.bytes);
}

TEST(GgufWriterTest, RewriteIsByteIdentical) {
  TempDir dir;
  Image f = richImage();
  // richImage leaves the last tensor unpadded; canonical files pad it.
  f.padTo(64);
  spit(dir.file("in.gguf"), f.bytes);
  std::string error;
  std::unique_ptr<GgufFile> in = GgufFile::open(dir.file("in.gguf"), error);
  ASSERT_TRUE(in) << error;
  std::vector<GgufTensorData> tensors;
  for (const TensorInfo &t : in->info().tensors()) {
    const uint8_t *p = in->tensorData(t);
    tensors.push_back({t, std::vector<uint8_t>(p, p + t.numBytes())});
  }
  ASSERT_TRUE(writeGguf(dir.file("out.gguf"), in->info(), tensors, error))
      << error;
  EXPECT_EQ(slurp(dir.file("out.gguf")), f.bytes);
}

TEST(GgufWriterTest, HonoursCustomAlignment) {
  TempDir dir;
  ModelInfo info;
  info.addMeta("general.architecture", MetaValue::makeString("llama"));
  info.addMeta("general.alignment", MetaValue::makeUInt(256));
  std::vector<GgufTensorData> tensors = {tensor("a", GgmlType::F16, {3}, 1),
                                         tensor("b", GgmlType::Q8_0, {64}, 2),
                                         tensor("c", GgmlType::F32, {1}, 3)};
  std::string error;
  ASSERT_TRUE(writeGguf(dir.file("a.gguf"), info, tensors, error)) << error;
  std::unique_ptr<GgufFile> file = GgufFile::open(dir.file("a.gguf"), error);
  ASSERT_TRUE(file) << error;
  EXPECT_EQ(file->alignment(), 256u);
  EXPECT_EQ(file->dataOffset() % 256, 0u);
  const std::vector<TensorInfo> &ts = file->info().tensors();
  EXPECT_EQ(ts[0].offset, 0u);
  EXPECT_EQ(ts[1].offset, 256u);
  EXPECT_EQ(ts[2].offset, 512u);
  EXPECT_EQ(fs::file_size(dir.file("a.gguf")), file->dataOffset() + 768);
}

TEST(GgufWriterTest, StreamsAHugeAlignmentsPadding) {
  // The header's padding is written in pieces, not built in memory (the
  // fuzzer found an alignment of 2^31 on a file without tensors asking for
  // 2 GiB at once); 4 MiB here keeps the test quick.
  TempDir dir;
  ModelInfo info;
  info.addMeta("general.architecture", MetaValue::makeString("llama"));
  info.addMeta("general.alignment", MetaValue::makeUInt(uint64_t(1) << 22));
  std::string error;
  ASSERT_TRUE(writeGguf(dir.file("a.gguf"), info, {}, error)) << error;
  EXPECT_EQ(fs::file_size(dir.file("a.gguf")), uint64_t(1) << 22);
  std::unique_ptr<GgufFile> file = GgufFile::open(dir.file("a.gguf"), error);
  ASSERT_TRUE(file) << error;
  EXPECT_EQ(file->dataOffset(), uint64_t(1) << 22);
}

TEST(GgufWriterTest, FilesGetTheUsualMode) {
  TempDir dir;
  std::string error;
  ASSERT_TRUE(writeGguf(dir.file("m.gguf"), ModelInfo(), {}, error)) << error;
  mode_t mask = ::umask(0);
  ::umask(mask);
  struct stat st;
  ASSERT_EQ(::stat(dir.file("m.gguf").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0666 & ~mask);
}

TEST(GgufWriterTest, ReplacesAnExistingFile) {
  TempDir dir;
  spit(dir.file("m.gguf"), {1, 2, 3});
  std::string error;
  ASSERT_TRUE(writeGguf(dir.file("m.gguf"), richInfo(), {}, error)) << error;
  std::unique_ptr<GgufFile> file = GgufFile::open(dir.file("m.gguf"), error);
  ASSERT_TRUE(file) << error;
  EXPECT_EQ(file->info().architecture(), "qwen3");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"m.gguf"});
}

/// Writes \p info and \p tensors over an existing file and expects \p what;
/// the old file must survive untouched and no temporary file may remain.
void expectWriteError(const ModelInfo &info,
                      const std::vector<GgufTensorData> &tensors,
                      const std::string &what) {
  TempDir dir;
  std::string path = dir.file("keep.gguf");
  spit(path, {9, 9, 9});
  std::string error;
  EXPECT_FALSE(writeGguf(path, info, tensors, error));
  EXPECT_EQ(error, path + ": " + what);
  EXPECT_EQ(slurp(path), (std::vector<uint8_t>{9, 9, 9}));
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"keep.gguf"});
}

TEST(GgufWriterTest, RejectsBadAlignment) {
  ModelInfo info;
  info.addMeta("general.alignment", MetaValue::makeInt(32));
  expectWriteError(info, {},
                   "metadata 'general.alignment': must be u32, not i32");
  for (uint64_t bad : {0, 4, 48}) {
    ModelInfo info2;
    info2.addMeta("general.alignment", MetaValue::makeUInt(bad));
    expectWriteError(info2, {},
                     fmt::format("metadata 'general.alignment': {} is not a "
                                 "nonzero power of two and a multiple of 8",
                                 bad));
  }
}

TEST(GgufWriterTest, RejectsValuesThatDoNotFit) {
  using T = GgufValueType;
  auto one = [](std::string key, MetaValue v) {
    ModelInfo info;
    info.addMeta(std::move(key), std::move(v));
    return info;
  };
  expectWriteError(one("k", MetaValue::makeUInt(256, T::UInt8)), {},
                   "metadata 'k': value 256 does not fit in u8");
  expectWriteError(one("k", MetaValue::makeInt(-129, T::Int8)), {},
                   "metadata 'k': value -129 does not fit in i8");
  expectWriteError(one("k", MetaValue::makeUInt(70000, T::UInt16)), {},
                   "metadata 'k': value 70000 does not fit in u16");
  expectWriteError(one("k", MetaValue::makeInt(1 << 20, T::Int16)), {},
                   "metadata 'k': value 1048576 does not fit in i16");
  expectWriteError(one("k", MetaValue::makeUInt(uint64_t(1) << 32)), {},
                   "metadata 'k': value 4294967296 does not fit in u32");
  expectWriteError(one("k", MetaValue::makeInt(int64_t(1) << 31)), {},
                   "metadata 'k': value 2147483648 does not fit in i32");
  expectWriteError(one("k", MetaValue::makeFloat(1e300)), {},
                   "metadata 'k': value 1e+300 does not fit in f32");
  MetaValue bad;
  bad.type = static_cast<T>(42);
  expectWriteError(one("k", bad), {}, "metadata 'k': unknown value type 42");
}

TEST(GgufWriterTest, RejectsMalformedArrays) {
  using T = GgufValueType;
  ModelInfo info;
  info.addMeta("a", MetaValue::makeArray(T::UInt32, {MetaValue::makeUInt(1),
                                                     MetaValue::makeInt(2)}));
  expectWriteError(info, {},
                   "metadata 'a'[1]: element of type i32 in an array of u32");
  ModelInfo info2;
  info2.addMeta(
      "a", MetaValue::makeArray(
               T::Array, {MetaValue::makeArray(
                             T::UInt8, {MetaValue::makeUInt(300, T::UInt8)})}));
  expectWriteError(info2, {},
                   "metadata 'a'[0][0]: value 300 does not fit in u8");
  MetaValue deep = MetaValue::makeArray(T::UInt8, {});
  for (int d = 0; d < GgufFile::kMaxArrayDepth; ++d)
    deep = MetaValue::makeArray(T::Array, {deep});
  ModelInfo info3;
  info3.addMeta("a", deep);
  expectWriteError(info3, {},
                   "metadata 'a'[0][0][0][0][0][0][0][0]: arrays nested more "
                   "than 8 deep");
  ModelInfo info4;
  info4.addMeta("a", MetaValue::makeArray(static_cast<T>(13), {}));
  expectWriteError(info4, {}, "metadata 'a': unknown array element type 13");
}

TEST(GgufWriterTest, RejectsBadTensors) {
  ModelInfo info;
  GgufTensorData t = tensor("w", GgmlType::Q4_K, {256}, 0);
  t.bytes.pop_back();
  expectWriteError(info, {t},
                   "tensor 'w': has 143 bytes of data, its shape "
                   "needs 144");
  expectWriteError(
      info,
      {tensor("w", GgmlType::F32, {1}, 0), tensor("w", GgmlType::F32, {1}, 0)},
      "tensor 'w': duplicate tensor name");
  GgufTensorData noDims = tensor("w", GgmlType::F32, {1}, 0);
  noDims.info.dims.clear();
  expectWriteError(info, {noDims}, "tensor 'w' dims: n_dims 0 is not in 1..4");
  GgufTensorData five = tensor("w", GgmlType::F32, {1, 1, 1, 1, 1}, 0);
  expectWriteError(info, {five}, "tensor 'w' dims: n_dims 5 is not in 1..4");
  GgufTensorData zero = tensor("w", GgmlType::F32, {1}, 0);
  zero.info.dims = {2, 0};
  expectWriteError(info, {zero}, "tensor 'w' dims: dims[1] is zero");
  GgufTensorData block = tensor("w", GgmlType::F32, {1}, 0);
  block.info.type = GgmlType::Q8_0;
  block.info.dims = {16};
  expectWriteError(info, {block},
                   "tensor 'w' dims: first extent 16 is not a "
                   "multiple of the Q8_0 block size 32");
  GgufTensorData unknown = tensor("w", GgmlType::F32, {1}, 0);
  unknown.info.type = static_cast<GgmlType>(4);
  expectWriteError(info, {unknown}, "tensor 'w': unknown ggml type id 4");
  // What the reader refuses as ggml does.
  expectWriteError(info, {tensor(std::string(64, 'n'), GgmlType::F32, {1}, 0)},
                   "tensor '" + std::string(64, 'n') +
                       "': name of 64 bytes is longer than ggml's limit of "
                       "63 bytes");
  ModelInfo emptyKey;
  emptyKey.addMeta("", MetaValue::makeUInt(1));
  expectWriteError(emptyKey, {}, "metadata '': empty key");
}

TEST(GgufWriterTest, UnwritableDirectory) {
  TempDir dir;
  std::string path = dir.file("no/such/dir/m.gguf");
  std::string error;
  EXPECT_FALSE(writeGguf(path, ModelInfo(), {}, error));
  EXPECT_EQ(error, path + ": cannot create a temporary file next to it: No "
                          "such file or directory");
  EXPECT_TRUE(dir.entries().empty());
}

TEST(GgufWriterTest, RenameOntoADirectoryFailsCleanly) {
  TempDir dir;
  fs::create_directory(dir.file("d.gguf"));
  fs::create_directory(dir.file("d.gguf/x"));
  std::string error;
  EXPECT_FALSE(writeGguf(dir.file("d.gguf"), ModelInfo(), {}, error));
  EXPECT_NE(error.find("cannot rename"), std::string::npos) << error;
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"d.gguf"});
}

TEST(GgufWriterTest, ShapesOnlyFilesPlanButDoNotRun) {
  TempDir dir;
  ModelInfo info;
  info.addMeta("general.architecture", MetaValue::makeString("qwen3"));
  info.addMeta(kShapesOnlyKey, MetaValue::makeBool(true));
  std::vector<TensorInfo> tensors = {
      tensor("a", GgmlType::Q8_0, {64, 3}, 0).info,
      tensor("b", GgmlType::F32, {5}, 0).info};
  const std::string path = dir.file("s.gguf");
  std::string error;
  ASSERT_TRUE(writeGgufShapesOnly(path, info, tensors, error)) << error;

  // Planning: the infos, with the offsets the data would have had.
  std::unique_ptr<GgufFile> f =
      GgufFile::open(path, error, GgufContents::Shapes);
  ASSERT_TRUE(f) << error;
  EXPECT_TRUE(f->shapesOnly());
  ASSERT_EQ(f->info().tensors().size(), 2u);
  EXPECT_EQ(f->info().tensors()[1].offset, 224u); // 3 * 2 * 34 B, aligned
  EXPECT_EQ(fs::file_size(path), f->dataOffset());
  EXPECT_TRUE(loadModelInfo(path, error)) << error;

  // Running or reading data: refused with a clear error.
  EXPECT_FALSE(GgufFile::open(path, error));
  // Like every reader error: "<path>: offset N: <field>: <what>".
  EXPECT_EQ(error.rfind(path + ": offset ", 0), 0u) << error;
  EXPECT_NE(error.find(": metadata 'strata.shapes_only': this GGUF holds "
                       "shapes only (no tensor data): it can be planned by "
                       "strata-compile, not run or read"),
            std::string::npos)
      << error;

  // A file with data is the same either way.
  std::vector<GgufTensorData> data = {tensor("a", GgmlType::Q8_0, {64, 3}, 1)};
  ModelInfo plain;
  ASSERT_TRUE(writeGguf(dir.file("d.gguf"), plain, data, error)) << error;
  f = GgufFile::open(dir.file("d.gguf"), error, GgufContents::Shapes);
  ASSERT_TRUE(f) << error;
  EXPECT_FALSE(f->shapesOnly());

  // The writer needs the marker; a non-bool marker is a reader error.
  EXPECT_FALSE(writeGgufShapesOnly(dir.file("n.gguf"), plain, tensors, error));
  EXPECT_EQ(error, dir.file("n.gguf") + ": a shapes-only file needs the "
                                        "metadata 'strata.shapes_only' = true");
  ModelInfo wrong;
  wrong.addMeta(kShapesOnlyKey, MetaValue::makeUInt(1));
  ASSERT_TRUE(writeGguf(dir.file("w.gguf"), wrong, {}, error)) << error;
  EXPECT_FALSE(GgufFile::open(dir.file("w.gguf"), error, GgufContents::Shapes));
  EXPECT_EQ(error.rfind(dir.file("w.gguf") + ": offset ", 0), 0u) << error;
  EXPECT_NE(error.find(": metadata 'strata.shapes_only': must be bool, not "
                       "u32"),
            std::string::npos)
      << error;
}

} // namespace
