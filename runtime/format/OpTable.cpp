//===- OpTable.cpp - element types and the op table -----------------------===//
#include "runtime/format/OpTable.h"

namespace strata::format {

namespace {
/// The Ggml column of DTypes.def as ints (-1: none).
namespace ggml {
constexpr int F32 = static_cast<int>(GgmlType::F32);
constexpr int F16 = static_cast<int>(GgmlType::F16);
constexpr int BF16 = static_cast<int>(GgmlType::BF16);
constexpr int I32 = static_cast<int>(GgmlType::I32);
constexpr int I64 = static_cast<int>(GgmlType::I64);
constexpr int NONE = -1;
} // namespace ggml

struct DTypeRow {
  DType t;
  const char *name;
  size_t size;
  int ggml;
};
constexpr DTypeRow kDTypes[] = {
#define DTYPE(Id, Spelling, Bytes, Ggml)                                       \
  {DType::Id, Spelling, Bytes, ggml::Ggml},
#include "runtime/format/DTypes.def"
};
} // namespace

const char *planDTypeName(DType t) {
  for (const DTypeRow &r : kDTypes)
    if (r.t == t)
      return r.name;
  return "?";
}

std::optional<DType> planDTypeFromName(std::string_view s) {
  for (const DTypeRow &r : kDTypes)
    if (s == r.name)
      return r.t;
  return std::nullopt;
}

size_t planDTypeSize(DType t) {
  for (const DTypeRow &r : kDTypes)
    if (r.t == t)
      return r.size;
  return 0;
}

std::optional<GgmlType> ggmlTypeOf(DType t) {
  for (const DTypeRow &r : kDTypes)
    if (r.t == t && r.ggml >= 0)
      return static_cast<GgmlType>(r.ggml);
  return std::nullopt;
}

std::optional<DType> dtypeOfGgml(GgmlType g) {
  for (const DTypeRow &r : kDTypes)
    if (r.ggml == static_cast<int>(g))
      return r.t;
  return std::nullopt;
}

const std::vector<RecipeInfo> &allRecipes() {
  static const std::vector<RecipeInfo> kRecipes = {
#define OP(Id, Mnemonic, MinOperands, MaxOperands, NumResults, Attrs, Rule,    \
           Cost, Class)                                                        \
  {Recipe::Id, Mnemonic, MinOperands,   MaxOperands,                           \
   NumResults, Attrs,    OpClass::Class},
#include "runtime/format/Ops.def"
  };
  return kRecipes;
}

const RecipeInfo *lookupRecipe(std::string_view name) {
  for (const RecipeInfo &r : allRecipes())
    if (name == r.name)
      return &r;
  return nullptr;
}

const RecipeInfo &recipeInfo(Recipe r) {
  return allRecipes()[static_cast<size_t>(r)];
}

bool arityAccepts(const RecipeInfo &r, size_t n) {
  return static_cast<int64_t>(n) >= r.minInputs &&
         (r.maxInputs < 0 || static_cast<int64_t>(n) <= r.maxInputs);
}

int planOutputs(const RecipeInfo &r) {
  return r.numOutputs - (r.cls == OpClass::State ? 1 : 0);
}

const std::vector<AttrSpec> &attrSchema(Recipe r) {
  static const std::vector<std::vector<AttrSpec>> kSchemas = [] {
    std::vector<std::vector<AttrSpec>> all;
    for (const RecipeInfo &info : allRecipes()) {
      std::vector<AttrSpec> specs;
      std::string_view s = info.attrs;
      while (!s.empty()) {
        size_t comma = s.find(',');
        std::string_view item = s.substr(0, comma);
        s = comma == std::string_view::npos ? std::string_view()
                                            : s.substr(comma + 1);
        AttrSpec a;
        size_t colon = item.find(':');
        a.name = std::string(item.substr(0, colon));
        std::string_view kind = item.substr(colon + 1);
        if (size_t at = kind.find('@'); at != std::string_view::npos) {
          std::string range(kind.substr(at + 1));
          size_t dots = range.find("..");
          a.range = {std::stoll(range.substr(0, dots)),
                     std::stoll(range.substr(dots + 2))};
          kind = kind.substr(0, at);
        }
        if (size_t eq = kind.find('='); eq != std::string_view::npos) {
          a.dflt = std::string(kind.substr(eq + 1));
          kind = kind.substr(0, eq);
        }
        a.kind = std::string(kind);
        if (!a.name.empty() && a.name.back() == '?') {
          a.optional = true;
          a.name.pop_back();
        }
        specs.push_back(std::move(a));
      }
      all.push_back(std::move(specs));
    }
    return all;
  }();
  return kSchemas[static_cast<size_t>(r)];
}

std::string AttrSpec::rangeStr() const {
  return range ? std::to_string(range->first) + ".." +
                     std::to_string(range->second)
               : std::string();
}

const AttrSpec *findAttrSpec(Recipe r, std::string_view name) {
  for (const AttrSpec &a : attrSchema(r))
    if (a.name == name)
      return &a;
  return nullptr;
}

} // namespace strata::format
