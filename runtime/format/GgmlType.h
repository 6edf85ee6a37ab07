//===- GgmlType.h - ggml tensor element types --------------------*- C++
//-*-===//
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace strata::format {

/// A ggml tensor element type; values are the ids stored in GGUF files.
enum class GgmlType : uint32_t {
#define GGML_TYPE(Name, Id, BlockSize, TypeSize, IrName, Loadable) Name = Id,
#include "runtime/format/GgmlTypes.def"
};

/// Static facts about one ggml type, from GgmlTypes.def.
struct GgmlTypeInfo {
  GgmlType type;
  const char *name;   ///< upper-case ggml name, e.g. "Q4_K"
  uint32_t blockSize; ///< elements per block
  uint32_t typeSize;  ///< bytes per block
  const char *irName; ///< lower-case IR spelling, e.g. "q4_k"
  bool loadable;      ///< strata can dequantise it
};

/// Facts about the type with GGUF id \p id, or nullopt for unknown/retired ids.
std::optional<GgmlTypeInfo> ggmlTypeFromId(uint32_t id);
/// Facts about \p type (always known).
GgmlTypeInfo ggmlTypeInfo(GgmlType type);
/// The type spelled \p irName in the IR ("q4_k"), or nullopt.
std::optional<GgmlTypeInfo> ggmlTypeFromIrName(std::string_view irName);
/// The type named \p name in ggml's upper-case spelling ("Q4_K"),
/// case-insensitive.
std::optional<GgmlTypeInfo> ggmlTypeFromName(std::string_view name);

} // namespace strata::format
