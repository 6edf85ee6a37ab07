//===- GgmlType.h - ggml tensor element types -------------------*- C++ -*-===//
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

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

/// True if two tensor extents in ggml order (ne[0] first) describe the same
/// tensor the way ggml sees it: ggml tensors are 4-D with trailing extents 1,
/// so [D], [D, 1] and [D, 1, 1] are one shape (llama.cpp's converter writes
/// a [D] vector as [D, 1] when the checkpoint holds it as [1, D]).
bool sameGgmlShape(const std::vector<uint64_t> &a,
                   const std::vector<uint64_t> &b);

} // namespace strata::format
