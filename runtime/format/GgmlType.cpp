//===- GgmlType.cpp - ggml tensor element types ---------------------------===//
#include "runtime/format/GgmlType.h"

#include <algorithm>
#include <cctype>

namespace strata::format {

namespace {
constexpr GgmlTypeInfo kTypes[] = {
#define GGML_TYPE(Name, Id, BlockSize, TypeSize, IrName, Loadable)             \
  {GgmlType::Name, #Name, BlockSize, TypeSize, IrName, Loadable != 0},
#include "runtime/format/GgmlTypes.def"
};

bool equalsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size())
    return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}
} // namespace

std::optional<GgmlTypeInfo> ggmlTypeFromId(uint32_t id) {
  for (const GgmlTypeInfo &t : kTypes)
    if (static_cast<uint32_t>(t.type) == id)
      return t;
  return std::nullopt;
}

GgmlTypeInfo ggmlTypeInfo(GgmlType type) {
  // Every enumerator comes from the same table, so the lookup cannot fail.
  return *ggmlTypeFromId(static_cast<uint32_t>(type));
}

std::optional<GgmlTypeInfo> ggmlTypeFromIrName(std::string_view irName) {
  for (const GgmlTypeInfo &t : kTypes)
    if (irName == t.irName)
      return t;
  return std::nullopt;
}

std::optional<GgmlTypeInfo> ggmlTypeFromName(std::string_view name) {
  for (const GgmlTypeInfo &t : kTypes)
    if (equalsIgnoreCase(name, t.name))
      return t;
  return std::nullopt;
}

bool sameGgmlShape(const std::vector<uint64_t> &a,
                   const std::vector<uint64_t> &b) {
  size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i)
    if ((i < a.size() ? a[i] : 1) != (i < b.size() ? b[i] : 1))
      return false;
  return true;
}

} // namespace strata::format
