//===- Gguf.cpp - GGUF v3 reader and writer -------------------------------===//
//
// The reader trusts nothing in the file: every count, length, offset and size
// is checked against the bytes that remain before it is used, so a malformed
// file yields a one-line error naming the byte offset and the field.
//
//===----------------------------------------------------------------------===//
#include "runtime/format/Gguf.h"
#include "runtime/format/CheckedMath.h"

#include <fmt/format.h>

#include <bit>
#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <string_view>
#include <type_traits>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace strata::format {

// Values are copied with memcpy in host order; GGUF is little-endian.
static_assert(std::endian::native == std::endian::little,
              "the GGUF reader and writer assume a little-endian host");

namespace {

constexpr uint32_t kMagic = 0x46554747; // "GGUF" read as a little-endian u32
constexpr uint32_t kVersion = 3;
constexpr uint64_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;
constexpr uint64_t kMaxExtent = static_cast<uint64_t>(INT64_MAX);
constexpr const char *kAlignmentKey = "general.alignment";
// ggml's limits (ggml/src/gguf.cpp): a tensor name must fit GGML_MAX_NAME (64)
// bytes with its NUL, and no string may be longer than
// GGUF_MAX_STRING_LENGTH.
constexpr uint64_t kMaxTensorNameBytes = 63;
constexpr uint64_t kMaxStringBytes = uint64_t(1) << 30;
// The smallest encodings, used to bound counts by the bytes that remain:
// a key/value pair with an empty key and a 1-byte value, and a tensor info
// with an empty name and one dim.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;

/// Bytes of the smallest encoding of a value of type id \p type, or 0 if the
/// id is unknown.
uint64_t minValueBytes(uint32_t type) {
  switch (static_cast<GgufValueType>(type)) {
  case GgufValueType::UInt8:
  case GgufValueType::Int8:
  case GgufValueType::Bool:
    return 1;
  case GgufValueType::UInt16:
  case GgufValueType::Int16:
    return 2;
  case GgufValueType::UInt32:
  case GgufValueType::Int32:
  case GgufValueType::Float32:
    return 4;
  case GgufValueType::UInt64:
  case GgufValueType::Int64:
  case GgufValueType::Float64:
  case GgufValueType::String:
    return 8;
  case GgufValueType::Array:
    return 4 + 8;
  }
  return 0;
}

/// \p s quoted for a one-line message: names come from untrusted files, so
/// anything but printable ASCII is escaped and long names are cut.
std::string quote(std::string_view s) {
  constexpr size_t kMaxShown = 64;
  std::string out = "'";
  for (size_t k = 0; k < s.size() && k < kMaxShown; ++k) {
    unsigned char c = static_cast<unsigned char>(s[k]);
    if (c == '\'' || c == '\\')
      out += fmt::format("\\{}", static_cast<char>(c));
    else if (c < 0x20 || c >= 0x7f)
      out += fmt::format("\\x{:02x}", c);
    else
      out += static_cast<char>(c);
  }
  if (s.size() > kMaxShown)
    out += "...";
  return out + "'";
}

bool isValidAlignment(uint64_t a) {
  return a != 0 && (a & (a - 1)) == 0 && a % 8 == 0;
}

/// Checks a tensor shape against ggml's rules and computes its byte size.
/// Returns an empty string and sets \p bytes, or says what is wrong.
std::string checkShape(const GgmlTypeInfo &type,
                       const std::vector<uint64_t> &dims, uint64_t &bytes) {
  if (dims.empty() || dims.size() > kMaxDims)
    return fmt::format("n_dims {} is not in 1..{}", dims.size(), kMaxDims);
  for (size_t j = 0; j < dims.size(); ++j) {
    if (dims[j] == 0)
      return fmt::format("dims[{}] is zero", j);
    if (dims[j] > kMaxExtent)
      return fmt::format("dims[{}] = {} exceeds INT64_MAX", j, dims[j]);
  }
  if (dims[0] % type.blockSize != 0)
    return fmt::format("first extent {} is not a multiple of the {} block "
                       "size {}",
                       dims[0], type.name, type.blockSize);
  // ggml indexes elements with int64, so the element count must fit.
  uint64_t elements = 1;
  for (uint64_t d : dims) {
    std::optional<uint64_t> next = checkedMul(elements, d);
    if (!next || *next > kMaxExtent)
      return "element count overflows INT64_MAX";
    elements = *next;
  }
  uint64_t rows = elements / dims[0];
  std::optional<uint64_t> rowBytes =
      checkedMul(dims[0] / type.blockSize, type.typeSize);
  std::optional<uint64_t> total =
      rowBytes ? checkedMul(*rowBytes, rows) : std::nullopt;
  if (!total)
    return "byte size overflows 64 bits";
  bytes = *total;
  return {};
}

//===----------------------------------------------------------------------===//
// Reader
//===----------------------------------------------------------------------===//

/// One pass over a GGUF image. Fields are named in messages by a base name
/// (`field_`) plus the array indices being read (`indices_`), formatted only
/// when something fails.
class Parser {
public:
  Parser(const uint8_t *data, uint64_t size, ModelInfo &info,
         GgufContents contents)
      : data_(data), size_(size), info_(info), contents_(contents) {}

  bool parse();

  std::string message; ///< "offset N: <field>: <what>" after a failure
  uint32_t version = 0;
  uint64_t alignment = kDefaultAlignment;
  uint64_t dataOffset = 0;
  bool shapesOnly = false; ///< marked shapes-only and accepted as such

private:
  /// A tensor info read but not yet checked against the data section.
  struct Pending {
    uint64_t offsetAt; ///< file offset of the tensor's `offset` field
    uint64_t bytes;
  };

  uint64_t left() const { return size_ - pos_; }

  bool fail(uint64_t offset, std::string what) {
    std::string field = field_;
    for (uint64_t i : indices_)
      field += fmt::format("[{}]", i);
    message = fmt::format("offset {}: {}: {}", offset, field, what);
    return false;
  }

  bool need(uint64_t n) {
    if (n <= left())
      return true;
    return fail(pos_,
                fmt::format("truncated: needs {} bytes, {} left", n, left()));
  }

  template <typename T> bool read(T &out) {
    if (!need(sizeof(T)))
      return false;
    std::memcpy(&out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }

  /// Reads a \p T and widens it into \p dest.
  template <typename T, typename Dest> bool readAs(Dest &dest) {
    T x{};
    if (!read(x))
      return false;
    dest = x;
    return true;
  }

  bool readString(std::string &out) {
    uint64_t at = pos_;
    uint64_t len = 0;
    if (!read(len))
      return false;
    if (len > left())
      return fail(at, fmt::format("string length {} exceeds the {} bytes left",
                                  len, left()));
    if (len > kMaxStringBytes)
      return fail(at, fmt::format("string length {} exceeds ggml's limit of "
                                  "{} bytes",
                                  len, kMaxStringBytes));
    out.assign(reinterpret_cast<const char *>(data_ + pos_), len);
    pos_ += len;
    return true;
  }

  bool readHeader(uint64_t &tensorCount, uint64_t &kvCount);
  bool readKeyValue(uint64_t index);
  bool readValue(uint32_t type, uint64_t typeAt, MetaValue &v, int depth);
  bool readArray(MetaValue &v, int depth);
  bool readTensorInfo(uint64_t index, std::vector<Pending> &pending);
  bool readAlignment();
  bool readShapesOnly();
  bool checkTensorData(const std::vector<Pending> &pending);

  const uint8_t *data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  ModelInfo &info_;
  GgufContents contents_;
  std::string field_;
  std::vector<uint64_t> indices_;
  uint64_t metaElements_ = 0;
  uint64_t alignmentAt_ = 0;  ///< offset of general.alignment's type field
  uint64_t shapesOnlyAt_ = 0; ///< offset of strata.shapes_only's type field
};

bool Parser::parse() {
  uint64_t tensorCount = 0, kvCount = 0;
  if (!readHeader(tensorCount, kvCount))
    return false;
  for (uint64_t i = 0; i < kvCount; ++i)
    if (!readKeyValue(i))
      return false;
  std::vector<Pending> pending;
  for (uint64_t i = 0; i < tensorCount; ++i)
    if (!readTensorInfo(i, pending))
      return false;
  if (!readAlignment() || !readShapesOnly())
    return false;
  std::optional<uint64_t> start = checkedAlignUp(pos_, alignment);
  if (!start) {
    field_ = "data section";
    indices_.clear();
    return fail(pos_, "offset overflows 64 bits");
  }
  dataOffset = *start;
  return checkTensorData(pending);
}

bool Parser::readHeader(uint64_t &tensorCount, uint64_t &kvCount) {
  field_ = "magic";
  uint32_t magic = 0;
  if (!read(magic))
    return false;
  if (magic != kMagic)
    return fail(0, fmt::format("bad magic {:02x} {:02x} {:02x} {:02x} "
                               "(expected 'GGUF' = 47 47 55 46)",
                               data_[0], data_[1], data_[2], data_[3]));
  field_ = "version";
  if (!read(version))
    return false;
  if (version != kVersion) {
    if (version == 2)
      return fail(4, "GGUF version 2 is not supported; only version 3 is");
    // A byte-swapped version is how big-endian files show themselves.
    uint32_t swapped = __builtin_bswap32(version);
    if (swapped >= 1 && swapped <= kVersion)
      return fail(4, fmt::format("version {:#010x} is byte-swapped: "
                                 "big-endian GGUF files are not supported",
                                 version));
    return fail(4, fmt::format("unsupported version {}; only version 3 is "
                               "supported",
                               version));
  }
  field_ = "tensor_count";
  if (!read(tensorCount))
    return false;
  field_ = "metadata_kv_count";
  if (!read(kvCount))
    return false;
  if (kvCount > left() / kMinKvBytes)
    return fail(16, fmt::format("{} key/value pairs cannot fit in the {} "
                                "bytes left",
                                kvCount, left()));
  field_ = "tensor_count";
  // kvCount * kMinKvBytes <= left() after the check above.
  uint64_t kvBytes = checkedMul(kvCount, kMinKvBytes).value_or(UINT64_MAX);
  if (tensorCount > (left() - kvBytes) / kMinTensorInfoBytes)
    return fail(8, fmt::format("{} tensor infos cannot fit in the {} bytes "
                               "left",
                               tensorCount, left()));
  return true;
}

bool Parser::readKeyValue(uint64_t index) {
  field_ = fmt::format("metadata[{}] key", index);
  uint64_t keyAt = pos_;
  std::string key;
  if (!readString(key))
    return false;
  if (key.empty())
    return fail(keyAt, "empty key");
  if (info_.findMeta(key))
    return fail(keyAt, fmt::format("duplicate key {}", quote(key)));
  field_ = fmt::format("metadata {}", quote(key));
  uint64_t typeAt = pos_;
  uint32_t type = 0;
  if (!read(type))
    return false;
  if (key == kAlignmentKey)
    alignmentAt_ = typeAt;
  if (key == kShapesOnlyKey)
    shapesOnlyAt_ = typeAt;
  MetaValue value;
  if (!readValue(type, typeAt, value, 0))
    return false;
  info_.addMeta(std::move(key), std::move(value));
  return true;
}

bool Parser::readValue(uint32_t type, uint64_t typeAt, MetaValue &v,
                       int depth) {
  v.type = static_cast<GgufValueType>(type);
  switch (v.type) {
  case GgufValueType::UInt8:
    return readAs<uint8_t>(v.u);
  case GgufValueType::Int8:
    return readAs<int8_t>(v.i);
  case GgufValueType::UInt16:
    return readAs<uint16_t>(v.u);
  case GgufValueType::Int16:
    return readAs<int16_t>(v.i);
  case GgufValueType::UInt32:
    return readAs<uint32_t>(v.u);
  case GgufValueType::Int32:
    return readAs<int32_t>(v.i);
  case GgufValueType::UInt64:
    return readAs<uint64_t>(v.u);
  case GgufValueType::Int64:
    return readAs<int64_t>(v.i);
  case GgufValueType::Float32:
    return readAs<float>(v.f);
  case GgufValueType::Float64:
    return readAs<double>(v.f);
  case GgufValueType::Bool: {
    uint64_t at = pos_;
    uint8_t x = 0;
    if (!read(x))
      return false;
    if (x > 1)
      return fail(at,
                  fmt::format("invalid bool byte {:#04x} (must be 0 or 1)", x));
    v.b = x != 0;
    return true;
  }
  case GgufValueType::String:
    return readString(v.s);
  case GgufValueType::Array:
    return readArray(v, depth);
  }
  return fail(typeAt, fmt::format("unknown value type {}", type));
}

bool Parser::readArray(MetaValue &v, int depth) {
  if (depth >= GgufFile::kMaxArrayDepth)
    return fail(pos_, fmt::format("arrays nested more than {} deep",
                                  GgufFile::kMaxArrayDepth));
  uint64_t typeAt = pos_;
  uint32_t elemType = 0;
  if (!read(elemType))
    return false;
  uint64_t minBytes = minValueBytes(elemType);
  if (minBytes == 0)
    return fail(typeAt, fmt::format("unknown array element type {}", elemType));
  uint64_t countAt = pos_;
  uint64_t count = 0;
  if (!read(count))
    return false;
  if (count > left() / minBytes)
    return fail(countAt,
                fmt::format("{} elements of type {} cannot fit in "
                            "the {} bytes left",
                            count,
                            valueTypeName(static_cast<GgufValueType>(elemType)),
                            left()));
  // Each element costs ~100 bytes in memory for as little as 1 in the file,
  // so cap the total as well as bounding it by the file size.
  if (count > GgufFile::kMaxMetaElements - metaElements_)
    return fail(countAt, fmt::format("{} more elements exceed the limit of {} "
                                     "metadata array elements per file",
                                     count, GgufFile::kMaxMetaElements));
  metaElements_ += count;
  v.elemType = static_cast<GgufValueType>(elemType);
  v.array.resize(count);
  indices_.push_back(0);
  for (uint64_t k = 0; k < count; ++k) {
    indices_.back() = k;
    if (!readValue(elemType, typeAt, v.array[k], depth + 1))
      return false;
  }
  indices_.pop_back();
  return true;
}

bool Parser::readTensorInfo(uint64_t index, std::vector<Pending> &pending) {
  field_ = fmt::format("tensor[{}] name", index);
  uint64_t nameAt = pos_;
  TensorInfo t;
  if (!readString(t.name))
    return false;
  if (t.name.size() > kMaxTensorNameBytes)
    return fail(nameAt, fmt::format("name of {} bytes is longer than ggml's "
                                    "limit of {} bytes",
                                    t.name.size(), kMaxTensorNameBytes));
  if (info_.findTensor(t.name))
    return fail(nameAt, fmt::format("duplicate tensor name {}", quote(t.name)));
  std::string prefix = fmt::format("tensor {} ", quote(t.name));

  field_ = prefix + "n_dims";
  uint64_t nDimsAt = pos_;
  uint32_t nDims = 0;
  if (!read(nDims))
    return false;
  if (nDims == 0 || nDims > kMaxDims)
    return fail(nDimsAt,
                fmt::format("n_dims {} is not in 1..{}", nDims, kMaxDims));

  field_ = prefix + "dims";
  uint64_t dimsAt = pos_;
  t.dims.resize(nDims);
  for (uint32_t j = 0; j < nDims; ++j) {
    uint64_t at = pos_;
    if (!read(t.dims[j]))
      return false;
    if (t.dims[j] == 0)
      return fail(at, fmt::format("dims[{}] is zero", j));
    if (t.dims[j] > kMaxExtent)
      return fail(at,
                  fmt::format("dims[{}] = {} exceeds INT64_MAX", j, t.dims[j]));
  }

  field_ = prefix + "type";
  uint64_t typeAt = pos_;
  uint32_t typeId = 0;
  if (!read(typeId))
    return false;
  std::optional<GgmlTypeInfo> type = ggmlTypeFromId(typeId);
  if (!type)
    return fail(typeAt, fmt::format("unknown ggml type id {}", typeId));
  t.type = type->type;

  field_ = prefix + "offset";
  uint64_t offsetAt = pos_;
  if (!read(t.offset))
    return false;

  field_ = prefix + "dims";
  uint64_t bytes = 0;
  std::string problem = checkShape(*type, t.dims, bytes);
  if (!problem.empty())
    return fail(dimsAt, problem);
  pending.push_back({offsetAt, bytes});
  info_.addTensor(std::move(t));
  return true;
}

bool Parser::readAlignment() {
  const MetaValue *a = info_.findMeta(kAlignmentKey);
  if (!a)
    return true;
  field_ = fmt::format("metadata '{}'", kAlignmentKey);
  indices_.clear();
  if (a->type != GgufValueType::UInt32)
    return fail(alignmentAt_,
                fmt::format("must be u32, not {}", valueTypeName(a->type)));
  if (!isValidAlignment(a->u))
    return fail(alignmentAt_ + 4,
                fmt::format("{} is not a nonzero power of two and a multiple "
                            "of 8",
                            a->u));
  alignment = a->u;
  return true;
}

bool Parser::readShapesOnly() {
  const MetaValue *m = info_.findMeta(kShapesOnlyKey);
  if (!m)
    return true;
  if (m->type != GgufValueType::Bool) {
    field_ = fmt::format("metadata '{}'", kShapesOnlyKey);
    indices_.clear();
    return fail(shapesOnlyAt_,
                fmt::format("must be bool, not {}", valueTypeName(m->type)));
  }
  if (!m->b)
    return true;
  if (contents_ == GgufContents::Data) {
    field_ = fmt::format("metadata '{}'", kShapesOnlyKey);
    indices_.clear();
    return fail(shapesOnlyAt_ + 4,
                "this GGUF holds shapes only (no tensor data): it can be "
                "planned by strata-compile, not run or read");
  }
  shapesOnly = true;
  return true;
}

bool Parser::checkTensorData(const std::vector<Pending> &pending) {
  // ggml (gguf_init_from_file_impl) requires each tensor's offset to be the
  // sum of the sizes of the tensors before it, each padded to the alignment:
  // data in file order, aligned, with no gaps and no overlaps. Requiring the
  // same means every file strata reads, llama.cpp reads too.
  const std::vector<TensorInfo> &tensors = info_.tensors();
  indices_.clear();
  uint64_t expected = 0;
  for (size_t k = 0; k < tensors.size(); ++k) {
    const TensorInfo &t = tensors[k];
    const Pending &p = pending[k];
    field_ = fmt::format("tensor {} offset", quote(t.name));
    if (t.offset % alignment != 0)
      return fail(p.offsetAt, fmt::format("{} is not a multiple of the "
                                          "alignment {}",
                                          t.offset, alignment));
    if (t.offset != expected)
      return fail(p.offsetAt,
                  fmt::format("{} is not {}: tensor data must follow in file "
                              "order, each tensor padded to the alignment "
                              "{}, with no gaps or overlaps (as ggml requires)",
                              t.offset, expected, alignment));
    std::optional<uint64_t> padded = checkedAlignUp(p.bytes, alignment);
    std::optional<uint64_t> next =
        padded ? checkedAdd(expected, *padded) : std::nullopt;
    if (!next)
      return fail(p.offsetAt, fmt::format("tensor data ({} bytes at offset "
                                          "{}) overflows 64-bit offsets",
                                          p.bytes, t.offset));
    expected = *next;
    if (shapesOnly)
      continue;
    if (dataOffset > size_ || !inBounds(t.offset, p.bytes, size_ - dataOffset))
      return fail(p.offsetAt,
                  fmt::format("tensor data (data section at {} + offset {}, "
                              "{} bytes) lies outside the file ({} bytes)",
                              dataOffset, t.offset, p.bytes, size_));
  }
  return true;
}

//===----------------------------------------------------------------------===//
// Writer
//===----------------------------------------------------------------------===//

/// Serialises metadata into a byte buffer, refusing values the reader would
/// reject or that would not survive the round trip.
class Encoder {
public:
  explicit Encoder(std::string &out) : out_(out) {}

  template <typename T> void put(T x) {
    char b[sizeof(T)];
    std::memcpy(b, &x, sizeof(T));
    out_.append(b, sizeof(T));
  }
  void putString(std::string_view s) {
    put<uint64_t>(s.size());
    out_.append(s);
  }

  bool putKeyValue(const std::string &key, const MetaValue &v) {
    field_ = fmt::format("metadata {}", quote(key));
    indices_.clear();
    if (key.empty())
      return fail("empty key");
    if (key.size() > kMaxStringBytes)
      return fail(fmt::format("key of {} bytes exceeds ggml's limit of {} "
                              "bytes",
                              key.size(), kMaxStringBytes));
    putString(key);
    put<uint32_t>(static_cast<uint32_t>(v.type));
    return putValue(v, 0);
  }

  std::string message; ///< "<field>: <what>" after a failure

private:
  bool fail(std::string what) {
    std::string field = field_;
    for (uint64_t i : indices_)
      field += fmt::format("[{}]", i);
    message = fmt::format("{}: {}", field, what);
    return false;
  }

  /// Writes an integer of width \p T, refusing values that do not fit.
  template <typename T> bool putInt(const MetaValue &v) {
    using Limits = std::numeric_limits<T>;
    if constexpr (std::is_signed_v<T>) {
      if (v.i < Limits::min() || v.i > Limits::max())
        return fail(fmt::format("value {} does not fit in {}", v.i,
                                valueTypeName(v.type)));
      put<T>(static_cast<T>(v.i));
    } else {
      if (v.u > Limits::max())
        return fail(fmt::format("value {} does not fit in {}", v.u,
                                valueTypeName(v.type)));
      put<T>(static_cast<T>(v.u));
    }
    return true;
  }

  bool putValue(const MetaValue &v, int depth) {
    switch (v.type) {
    case GgufValueType::UInt8:
      return putInt<uint8_t>(v);
    case GgufValueType::Int8:
      return putInt<int8_t>(v);
    case GgufValueType::UInt16:
      return putInt<uint16_t>(v);
    case GgufValueType::Int16:
      return putInt<int16_t>(v);
    case GgufValueType::UInt32:
      return putInt<uint32_t>(v);
    case GgufValueType::Int32:
      return putInt<int32_t>(v);
    case GgufValueType::UInt64:
      return putInt<uint64_t>(v);
    case GgufValueType::Int64:
      return putInt<int64_t>(v);
    case GgufValueType::Float32:
      // A finite double beyond the float range would silently become inf.
      if (std::isfinite(v.f) && std::fabs(v.f) > FLT_MAX)
        return fail(fmt::format("value {} does not fit in f32", v.f));
      put<float>(static_cast<float>(v.f));
      return true;
    case GgufValueType::Float64:
      put<double>(v.f);
      return true;
    case GgufValueType::Bool:
      put<uint8_t>(v.b ? 1 : 0);
      return true;
    case GgufValueType::String:
      if (v.s.size() > kMaxStringBytes)
        return fail(fmt::format("string of {} bytes exceeds ggml's limit of "
                                "{} bytes",
                                v.s.size(), kMaxStringBytes));
      putString(v.s);
      return true;
    case GgufValueType::Array:
      return putArray(v, depth);
    }
    return fail(
        fmt::format("unknown value type {}", static_cast<uint32_t>(v.type)));
  }

  bool putArray(const MetaValue &v, int depth) {
    if (depth >= GgufFile::kMaxArrayDepth)
      return fail(fmt::format("arrays nested more than {} deep",
                              GgufFile::kMaxArrayDepth));
    if (minValueBytes(static_cast<uint32_t>(v.elemType)) == 0)
      return fail(fmt::format("unknown array element type {}",
                              static_cast<uint32_t>(v.elemType)));
    elements_ += v.array.size();
    if (elements_ > GgufFile::kMaxMetaElements)
      return fail(fmt::format("more than {} metadata array elements in total",
                              GgufFile::kMaxMetaElements));
    put<uint32_t>(static_cast<uint32_t>(v.elemType));
    put<uint64_t>(v.array.size());
    indices_.push_back(0);
    for (size_t k = 0; k < v.array.size(); ++k) {
      indices_.back() = k;
      const MetaValue &e = v.array[k];
      if (e.type != v.elemType)
        return fail(fmt::format("element of type {} in an array of {}",
                                valueTypeName(e.type),
                                valueTypeName(v.elemType)));
      if (!putValue(e, depth + 1))
        return false;
    }
    indices_.pop_back();
    return true;
  }

  std::string &out_;
  std::string field_;
  std::vector<uint64_t> indices_;
  uint64_t elements_ = 0;
};

/// A temporary file next to the destination, removed unless committed.
class TempFile {
public:
  ~TempFile() {
    if (file_)
      std::fclose(file_);
    if (!path_.empty())
      ::unlink(path_.c_str());
  }

  bool create(const std::string &dest, std::string &what) {
    std::string templ = dest + ".tmp.XXXXXX";
    int fd = ::mkstemp(templ.data());
    if (fd < 0) {
      what = fmt::format("cannot create a temporary file next to it: {}",
                         std::strerror(errno));
      return false;
    }
    path_ = templ;
    // mkstemp creates the file 0600; give it the mode a plain create would.
    mode_t mask = ::umask(0);
    ::umask(mask);
    ::fchmod(fd, 0666 & ~mask);
    file_ = ::fdopen(fd, "wb");
    if (!file_) {
      what = fmt::format("cannot open {}: {}", path_, std::strerror(errno));
      ::close(fd);
      return false;
    }
    return true;
  }

  bool write(const void *data, size_t n) {
    return n == 0 || std::fwrite(data, 1, n, file_) == n;
  }

  bool writeZeros(uint64_t n) {
    static const char zeros[4096] = {};
    while (n > 0) {
      size_t chunk = n < sizeof(zeros) ? static_cast<size_t>(n) : sizeof(zeros);
      if (!write(zeros, chunk))
        return false;
      n -= chunk;
    }
    return true;
  }

  /// Flushes, syncs and renames the file to \p dest.
  bool commit(const std::string &dest, std::string &what) {
    bool ok = std::fflush(file_) == 0 && ::fsync(::fileno(file_)) == 0;
    ok = std::fclose(file_) == 0 && ok;
    file_ = nullptr;
    if (!ok) {
      what = fmt::format("cannot write: {}", std::strerror(errno));
      return false;
    }
    if (std::rename(path_.c_str(), dest.c_str()) != 0) {
      what = fmt::format("cannot rename {} to it: {}", path_,
                         std::strerror(errno));
      return false;
    }
    path_.clear();
    return true;
  }

private:
  std::string path_;
  FILE *file_ = nullptr;
};

} // namespace

//===----------------------------------------------------------------------===//
// GgufFile
//===----------------------------------------------------------------------===//

std::string describeNonGguf(const struct stat &st) {
  if (S_ISDIR(st.st_mode))
    return "not a GGUF file (it is a directory)";
  if (!S_ISREG(st.st_mode))
    return "not a regular file";
  if (st.st_size == 0)
    return "not a GGUF file (the file is empty)";
  return {};
}

GgufFile::~GgufFile() {
  if (mapping_)
    ::munmap(mapping_, size_);
}

bool GgufFile::parse(const std::string &name, std::string &error,
                     GgufContents contents) {
  info_.source = name;
  Parser parser(base_, size_, info_, contents);
  if (!parser.parse()) {
    error = fmt::format("{}: {}", name, parser.message);
    return false;
  }
  version_ = parser.version;
  alignment_ = parser.alignment;
  dataOffset_ = parser.dataOffset;
  shapesOnly_ = parser.shapesOnly;
  return true;
}

std::unique_ptr<GgufFile> GgufFile::fromBytes(const uint8_t *data, size_t size,
                                              const std::string &name,
                                              std::string &error,
                                              GgufContents contents) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->base_ = data;
  file->size_ = size;
  if (!file->parse(name, error, contents))
    return nullptr;
  return file;
}

std::unique_ptr<GgufFile> GgufFile::open(const std::string &path,
                                         std::string &error,
                                         GgufContents contents) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = fmt::format("{}: cannot open: {}", path, std::strerror(errno));
    return nullptr;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    error = fmt::format("{}: cannot stat: {}", path, std::strerror(errno));
    ::close(fd);
    return nullptr;
  }
  // The open descriptor is checked, so what is mapped is what was checked.
  std::string notAGguf = describeNonGguf(st);
  if (!notAGguf.empty()) {
    error = fmt::format("{}: {}", path, notAGguf);
    ::close(fd);
    return nullptr;
  }
  std::unique_ptr<GgufFile> file(new GgufFile());
  void *p = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ,
                   MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) {
    error = fmt::format("{}: cannot map: {}", path, std::strerror(errno));
    ::close(fd);
    return nullptr;
  }
  file->mapping_ = p;
  file->base_ = static_cast<const uint8_t *>(p);
  file->size_ = static_cast<size_t>(st.st_size);
  // The mapping keeps the file's pages alive; the descriptor is not needed.
  ::close(fd);
  if (!file->parse(path, error, contents))
    return nullptr;
  return file;
}

//===----------------------------------------------------------------------===//
// writeGguf
//===----------------------------------------------------------------------===//

namespace {

/// writeGguf and writeGgufShapesOnly: \p tensors' infos, and their bytes
/// from \p data (same order) unless it is null.
bool writeFile(const std::string &path, const ModelInfo &info,
               const std::vector<const TensorInfo *> &tensors,
               const std::vector<GgufTensorData> *data, std::string &error) {
  auto fail = [&](const std::string &what) {
    error = fmt::format("{}: {}", path, what);
    return false;
  };

  uint64_t alignment = kDefaultAlignment;
  if (const MetaValue *a = info.findMeta(kAlignmentKey)) {
    if (a->type != GgufValueType::UInt32)
      return fail(fmt::format("metadata '{}': must be u32, not {}",
                              kAlignmentKey, valueTypeName(a->type)));
    if (!isValidAlignment(a->u))
      return fail(fmt::format("metadata '{}': {} is not a nonzero power of "
                              "two and a multiple of 8",
                              kAlignmentKey, a->u));
    alignment = a->u;
  }

  std::string head;
  Encoder enc(head);
  enc.put<uint32_t>(kMagic);
  enc.put<uint32_t>(kVersion);
  enc.put<uint64_t>(tensors.size());
  enc.put<uint64_t>(info.metadata().size());
  for (const auto &[key, value] : info.metadata())
    if (!enc.putKeyValue(key, value))
      return fail(enc.message);

  std::set<std::string_view> names;
  std::vector<uint64_t> sizes;
  uint64_t offset = 0;
  for (size_t k = 0; k < tensors.size(); ++k) {
    const TensorInfo &t = *tensors[k];
    std::string what = fmt::format("tensor {}", quote(t.name));
    if (!names.insert(t.name).second)
      return fail(what + ": duplicate tensor name");
    if (t.name.size() > kMaxTensorNameBytes)
      return fail(fmt::format("{}: name of {} bytes is longer than ggml's "
                              "limit of {} bytes",
                              what, t.name.size(), kMaxTensorNameBytes));
    std::optional<GgmlTypeInfo> type =
        ggmlTypeFromId(static_cast<uint32_t>(t.type));
    if (!type)
      return fail(fmt::format("{}: unknown ggml type id {}", what,
                              static_cast<uint32_t>(t.type)));
    uint64_t bytes = 0;
    std::string problem = checkShape(*type, t.dims, bytes);
    if (!problem.empty())
      return fail(fmt::format("{} dims: {}", what, problem));
    if (data && (*data)[k].bytes.size() != bytes)
      return fail(fmt::format("{}: has {} bytes of data, its shape needs {}",
                              what, (*data)[k].bytes.size(), bytes));
    enc.putString(t.name);
    enc.put<uint32_t>(static_cast<uint32_t>(t.dims.size()));
    for (uint64_t d : t.dims)
      enc.put<uint64_t>(d);
    enc.put<uint32_t>(static_cast<uint32_t>(type->type));
    enc.put<uint64_t>(offset);
    sizes.push_back(bytes);
    std::optional<uint64_t> padded = checkedAlignUp(bytes, alignment);
    std::optional<uint64_t> next =
        padded ? checkedAdd(offset, *padded) : std::nullopt;
    if (!next)
      return fail(what + ": tensor data overflows 64-bit offsets");
    offset = *next;
  }
  // The header's padding is streamed, not built in memory: an alignment may
  // be as large as 2^31.
  const uint64_t headPad = (alignment - head.size() % alignment) % alignment;

  TempFile out;
  std::string what;
  if (!out.create(path, what))
    return fail(what);
  if (!out.write(head.data(), head.size()) || !out.writeZeros(headPad))
    return fail(fmt::format("cannot write: {}", std::strerror(errno)));
  for (size_t k = 0; data && k < tensors.size(); ++k) {
    // Every tensor, the last included, is padded, as ggml and gguf-py do.
    if (!out.write((*data)[k].bytes.data(), sizes[k]) ||
        !out.writeZeros((alignment - sizes[k] % alignment) % alignment))
      return fail(fmt::format("cannot write: {}", std::strerror(errno)));
  }
  if (!out.commit(path, what))
    return fail(what);
  return true;
}

} // namespace

bool writeGguf(const std::string &path, const ModelInfo &info,
               const std::vector<GgufTensorData> &tensors, std::string &error) {
  std::vector<const TensorInfo *> infos;
  for (const GgufTensorData &td : tensors)
    infos.push_back(&td.info);
  return writeFile(path, info, infos, &tensors, error);
}

bool writeGgufShapesOnly(const std::string &path, const ModelInfo &info,
                         const std::vector<TensorInfo> &tensors,
                         std::string &error) {
  const MetaValue *m = info.findMeta(kShapesOnlyKey);
  if (!m || m->type != GgufValueType::Bool || !m->b) {
    error = fmt::format("{}: a shapes-only file needs the metadata '{}' = "
                        "true",
                        path, kShapesOnlyKey);
    return false;
  }
  std::vector<const TensorInfo *> infos;
  for (const TensorInfo &t : tensors)
    infos.push_back(&t);
  return writeFile(path, info, infos, nullptr, error);
}

} // namespace strata::format
