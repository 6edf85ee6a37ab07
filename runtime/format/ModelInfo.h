//===- ModelInfo.h - metadata and tensor infos of a model -------*- C++ -*-===//
//
// What the compiler needs to know about a weight file without its tensor
// data: GGUF metadata key/values and tensor infos. Produced by the GGUF reader
// (Gguf.h) and by the key/value text format used in tests (KeyValueFile.h).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/format/GgmlType.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace strata::format {

/// GGUF metadata value type ids (GGUF spec `gguf_metadata_value_type`).
enum class GgufValueType : uint32_t {
  UInt8 = 0,
  Int8 = 1,
  UInt16 = 2,
  Int16 = 3,
  UInt32 = 4,
  Int32 = 5,
  Float32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  UInt64 = 10,
  Int64 = 11,
  Float64 = 12,
};

/// Lower-case name of a value type ("u32", "string", ...).
const char *valueTypeName(GgufValueType type);

/// One metadata value. Integers keep their signedness and width through
/// `type`; the payload lives in the member that matches it.
struct MetaValue {
  GgufValueType type = GgufValueType::UInt32;
  uint64_t u = 0;                                ///< UInt8..UInt64
  int64_t i = 0;                                 ///< Int8..Int64
  double f = 0;                                  ///< Float32, Float64
  bool b = false;                                ///< Bool
  std::string s;                                 ///< String
  GgufValueType elemType = GgufValueType::UInt8; ///< Array element type
  std::vector<MetaValue> array;                  ///< Array elements

  bool isInteger() const;
  bool isFloat() const {
    return type == GgufValueType::Float32 || type == GgufValueType::Float64;
  }
  /// The value as a signed integer if it is an integer that fits in int64.
  std::optional<int64_t> asInt() const;
  /// The value as a double if it is an integer or float.
  std::optional<double> asDouble() const;
  /// Human-readable rendering (strings quoted, arrays bracketed, long arrays
  /// elided after \p maxElems elements).
  std::string toString(size_t maxElems = 8) const;

  static MetaValue makeUInt(uint64_t v,
                            GgufValueType t = GgufValueType::UInt32);
  static MetaValue makeInt(int64_t v, GgufValueType t = GgufValueType::Int32);
  static MetaValue makeFloat(double v,
                             GgufValueType t = GgufValueType::Float32);
  static MetaValue makeBool(bool v);
  static MetaValue makeString(std::string v);
  static MetaValue makeArray(GgufValueType elemType,
                             std::vector<MetaValue> elems);
};

/// One tensor info record.
struct TensorInfo {
  std::string name;
  GgmlType type = GgmlType::F32;
  /// ggml order: dims[0] = ne[0] is the fastest-varying (row length).
  std::vector<uint64_t> dims;
  /// Offset relative to the start of the data section.
  uint64_t offset = 0;

  /// Product of the dims, or nullopt if it overflows 64 bits.
  std::optional<uint64_t> checkedNumElements() const;
  /// Bytes of tensor data (rows of dims[0]/blockSize blocks), or nullopt if
  /// that overflows 64 bits.
  std::optional<uint64_t> checkedNumBytes() const;
  /// checkedNumElements(), saturated at UINT64_MAX. Infos the readers return
  /// never saturate (they refuse such shapes).
  uint64_t numElements() const;
  /// checkedNumBytes(), saturated at UINT64_MAX (never for infos the readers
  /// return), so that an overflow can never pass a bounds check.
  uint64_t numBytes() const;
};

/// Metadata and tensor infos of one model file, in file order.
class ModelInfo {
public:
  /// Name of the file it came from, for diagnostics.
  std::string source;

  /// Adds a key; returns false if it is already present.
  bool addMeta(std::string key, MetaValue value);
  /// Adds a tensor info; returns false if the name is already present.
  bool addTensor(TensorInfo info);

  const MetaValue *findMeta(const std::string &key) const;
  const TensorInfo *findTensor(const std::string &name) const;
  /// Value of `general.architecture`, or "" if absent or not a string.
  std::string architecture() const;

  const std::vector<std::pair<std::string, MetaValue>> &metadata() const {
    return meta_;
  }
  const std::vector<TensorInfo> &tensors() const { return tensors_; }

private:
  std::vector<std::pair<std::string, MetaValue>> meta_;
  std::map<std::string, size_t> metaIndex_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> tensorIndex_;
};

/// Loads a ModelInfo from \p path: a GGUF file (by its magic) or a key/value
/// text file. On failure returns nullptr and sets \p error to a one-line
/// message naming the file and, where it applies, the line or byte offset.
std::unique_ptr<ModelInfo> loadModelInfo(const std::string &path,
                                         std::string &error);

} // namespace strata::format
