//===- OpTable.h - element types and the op table ---------------*- C++ -*-===//
//
// The one table of ops (Ops.def) and of activation element types
// (DTypes.def), shared by the compiler and the runtime: the IR's op kinds,
// the plan's kernel recipes and every backend's dispatch are generated from
// them, so no second list of ops, attributes or dtypes exists anywhere.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/format/GgmlType.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::format {

/// Activation element types (DTypes.def).
enum class DType : uint8_t {
#define DTYPE(Id, Spelling, Bytes, Ggml) Id,
#include "runtime/format/DTypes.def"
};
/// The plan's name for the same type.
using PlanDType = DType;

/// "f32", "bf16", ...
const char *planDTypeName(DType t);
/// The type spelled \p s, or nullopt.
std::optional<DType> planDTypeFromName(std::string_view s);
/// Bytes per element.
size_t planDTypeSize(DType t);
/// The ggml type of a GGUF tensor holding elements of \p t, or nullopt.
std::optional<GgmlType> ggmlTypeOf(DType t);
/// The element type of a GGUF tensor of ggml type \p g when it is not a
/// block format (F32, F16, BF16, I32, I64), or nullopt.
std::optional<DType> dtypeOfGgml(GgmlType g);

/// Every op of Ops.def; each is also the kernel recipe of the same name.
enum class Recipe : uint16_t {
#define OP(Id, Mnemonic, MinOperands, MaxOperands, NumResults, Attrs, Rule,    \
           Cost, Class)                                                        \
  Id,
#include "runtime/format/Ops.def"
};

/// What a fusion pass may do with an op (the Class column of Ops.def).
enum class OpClass : uint8_t {
  Unary,  ///< y[i] = f(x[i])
  Binary, ///< y[i] = f(a[i], b[i]) with numpy broadcasting
  Matmul, ///< a GEMM: epilogues may fold into it
  View,   ///< a reshape: no data moves unless it brings a weight in
  /// Writes its operand 0 (a generation state, outside the arena) in place;
  /// its result 0 is that state, so a plan kernel lists one output fewer
  /// than the op's results (kv_store).
  State,
  Other,
};

/// One attribute of an op's schema.
struct AttrSpec {
  std::string name;
  std::string kind; ///< int float bool str type ints floats
  bool optional = false;
  /// The value kernels use when the attribute is absent, as written in
  /// Ops.def ("1", "true", "grouped"); nullopt when there is none.
  std::optional<std::string> dflt;
  /// Inclusive bounds of an int (or of each element of ints).
  std::optional<std::pair<int64_t, int64_t>> range;

  /// True if \p v is inside the range (or there is none).
  bool inRange(int64_t v) const {
    return !range || (v >= range->first && v <= range->second);
  }
  /// A float attribute's range (e.g. a norm's eps in 0..1): NaN is outside.
  bool inRange(double v) const {
    return !range || (v >= static_cast<double>(range->first) &&
                      v <= static_cast<double>(range->second));
  }
  /// "1..1000".
  std::string rangeStr() const;
};

/// Facts about one op of Ops.def.
struct RecipeInfo {
  Recipe id;
  const char *name;
  int minInputs, maxInputs; ///< maxInputs -1 = variadic
  int numOutputs;
  const char *attrs; ///< the schema as written
  OpClass cls;
};

/// Every op, in Ops.def order.
const std::vector<RecipeInfo> &allRecipes();
/// The op named \p name, or nullptr.
const RecipeInfo *lookupRecipe(std::string_view name);
/// Facts about \p r (always known).
const RecipeInfo &recipeInfo(Recipe r);
/// True if \p n operands fit the op's arity.
bool arityAccepts(const RecipeInfo &r, size_t n);
/// The outputs a plan kernel of \p r lists: its results, less the state a
/// State-class op writes in place (its input 0).
int planOutputs(const RecipeInfo &r);
/// The parsed attribute schema of \p r.
const std::vector<AttrSpec> &attrSchema(Recipe r);
/// The schema entry of attribute \p name of \p r, or nullptr.
const AttrSpec *findAttrSpec(Recipe r, std::string_view name);

} // namespace strata::format
