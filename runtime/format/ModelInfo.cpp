//===- ModelInfo.cpp - metadata and tensor infos of a model ---------------===//
#include "runtime/format/ModelInfo.h"
#include "runtime/format/CheckedMath.h"
#include "runtime/format/Utf8.h"

#include <fmt/format.h>

namespace strata::format {

const char *valueTypeName(GgufValueType type) {
  switch (type) {
  case GgufValueType::UInt8:
    return "u8";
  case GgufValueType::Int8:
    return "i8";
  case GgufValueType::UInt16:
    return "u16";
  case GgufValueType::Int16:
    return "i16";
  case GgufValueType::UInt32:
    return "u32";
  case GgufValueType::Int32:
    return "i32";
  case GgufValueType::Float32:
    return "f32";
  case GgufValueType::Bool:
    return "bool";
  case GgufValueType::String:
    return "string";
  case GgufValueType::Array:
    return "array";
  case GgufValueType::UInt64:
    return "u64";
  case GgufValueType::Int64:
    return "i64";
  case GgufValueType::Float64:
    return "f64";
  }
  return "?";
}

bool MetaValue::isInteger() const {
  switch (type) {
  case GgufValueType::UInt8:
  case GgufValueType::Int8:
  case GgufValueType::UInt16:
  case GgufValueType::Int16:
  case GgufValueType::UInt32:
  case GgufValueType::Int32:
  case GgufValueType::UInt64:
  case GgufValueType::Int64:
    return true;
  default:
    return false;
  }
}

static bool isSigned(GgufValueType t) {
  return t == GgufValueType::Int8 || t == GgufValueType::Int16 ||
         t == GgufValueType::Int32 || t == GgufValueType::Int64;
}

std::optional<int64_t> MetaValue::asInt() const {
  if (!isInteger())
    return std::nullopt;
  if (isSigned(type))
    return i;
  if (u > static_cast<uint64_t>(INT64_MAX))
    return std::nullopt;
  return static_cast<int64_t>(u);
}

std::optional<double> MetaValue::asDouble() const {
  if (isFloat())
    return f;
  if (!isInteger())
    return std::nullopt;
  return isSigned(type) ? static_cast<double>(i) : static_cast<double>(u);
}

std::string MetaValue::toString(size_t maxElems) const {
  switch (type) {
  case GgufValueType::Bool:
    return b ? "true" : "false";
  case GgufValueType::String:
    // Bytes that are not UTF-8 are spelt \xNN, so the text survives JSON
    // (a plan's baked metadata) and compares equal to the file's again.
    return "\"" + escapeBytes(s) + "\"";
  case GgufValueType::Float32:
  case GgufValueType::Float64:
    return fmt::format("{}", f);
  case GgufValueType::Array: {
    std::string out = "[";
    for (size_t k = 0; k < array.size(); ++k) {
      if (k == maxElems) {
        out += fmt::format(", ... ({} elements)", array.size());
        break;
      }
      if (k)
        out += ", ";
      out += array[k].toString(maxElems);
    }
    return out + "]";
  }
  default:
    return isSigned(type) ? fmt::format("{}", i) : fmt::format("{}", u);
  }
}

MetaValue MetaValue::makeUInt(uint64_t v, GgufValueType t) {
  MetaValue m;
  m.type = t;
  m.u = v;
  return m;
}
MetaValue MetaValue::makeInt(int64_t v, GgufValueType t) {
  MetaValue m;
  m.type = t;
  m.i = v;
  return m;
}
MetaValue MetaValue::makeFloat(double v, GgufValueType t) {
  MetaValue m;
  m.type = t;
  m.f = v;
  return m;
}
MetaValue MetaValue::makeBool(bool v) {
  MetaValue m;
  m.type = GgufValueType::Bool;
  m.b = v;
  return m;
}
MetaValue MetaValue::makeString(std::string v) {
  MetaValue m;
  m.type = GgufValueType::String;
  m.s = std::move(v);
  return m;
}
MetaValue MetaValue::makeArray(GgufValueType elemType,
                               std::vector<MetaValue> elems) {
  MetaValue m;
  m.type = GgufValueType::Array;
  m.elemType = elemType;
  m.array = std::move(elems);
  return m;
}

std::optional<uint64_t> TensorInfo::checkedNumElements() const {
  uint64_t n = 1;
  for (uint64_t d : dims) {
    std::optional<uint64_t> next = checkedMul(n, d);
    if (!next)
      return std::nullopt;
    n = *next;
  }
  return n;
}

std::optional<uint64_t> TensorInfo::checkedNumBytes() const {
  GgmlTypeInfo ti = ggmlTypeInfo(type);
  if (dims.empty())
    return ti.typeSize;
  std::optional<uint64_t> elements = checkedNumElements();
  if (!elements)
    return std::nullopt;
  uint64_t rows = dims[0] ? *elements / dims[0] : 0;
  std::optional<uint64_t> rowBytes =
      checkedMul(dims[0] / ti.blockSize, ti.typeSize);
  return rowBytes ? checkedMul(*rowBytes, rows) : std::nullopt;
}

uint64_t TensorInfo::numElements() const {
  return checkedNumElements().value_or(UINT64_MAX);
}

uint64_t TensorInfo::numBytes() const {
  return checkedNumBytes().value_or(UINT64_MAX);
}

bool ModelInfo::addMeta(std::string key, MetaValue value) {
  if (metaIndex_.count(key))
    return false;
  metaIndex_.emplace(key, meta_.size());
  meta_.emplace_back(std::move(key), std::move(value));
  return true;
}

bool ModelInfo::addTensor(TensorInfo info) {
  if (tensorIndex_.count(info.name))
    return false;
  tensorIndex_.emplace(info.name, tensors_.size());
  tensors_.push_back(std::move(info));
  return true;
}

const MetaValue *ModelInfo::findMeta(const std::string &key) const {
  auto it = metaIndex_.find(key);
  return it == metaIndex_.end() ? nullptr : &meta_[it->second].second;
}

const TensorInfo *ModelInfo::findTensor(const std::string &name) const {
  auto it = tensorIndex_.find(name);
  return it == tensorIndex_.end() ? nullptr : &tensors_[it->second];
}

std::string ModelInfo::architecture() const {
  const MetaValue *v = findMeta("general.architecture");
  return v && v->type == GgufValueType::String ? v->s : std::string();
}

} // namespace strata::format
