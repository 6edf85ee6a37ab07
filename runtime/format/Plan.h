//===- Plan.h - the compiled plan: the compiler/runtime contract -*- C++
//-*-===//
//
// A plan directory holds `plan.json` (this structure, versioned) and, for
// GPU targets, kernel files. The runtime reads it, maps the GGUF, allocates
// one arena of `arenaBytes`, and launches `kernels` in order. It makes no
// decisions; everything here was decided by the compiler.
//
// Shapes may depend on the token count T: each dim is
// `floor(coef*T / div) + constant` (div is 1 but for pooled dims like T / 64).
// Buffers are sized and placed for T = maxTokens; a run with T' <= maxTokens
// uses the same offsets with smaller extents.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/format/GgmlType.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace strata::format {

class ModelInfo;

/// The plan format version this build reads and writes.
constexpr int kPlanVersion = 1;

/// Kernel recipes (Recipes.def).
enum class Recipe : uint16_t {
#define RECIPE(Id, Name, MinInputs, MaxInputs, NumOutputs, Summary) Id,
#include "runtime/format/Recipes.def"
};

/// Facts about a recipe from Recipes.def.
struct RecipeInfo {
  Recipe id;
  const char *name;
  int minInputs, maxInputs, numOutputs;
  const char *summary;
};
/// Every recipe in catalog order.
const std::vector<RecipeInfo> &allRecipes();
/// The recipe named \p name, or nullptr.
const RecipeInfo *lookupRecipe(const std::string &name);
const RecipeInfo &recipeInfo(Recipe r);

/// Activation element types in plans.
enum class PlanDType : uint8_t { F32, F16, BF16, I32, I64, Bool };
const char *planDTypeName(PlanDType t);
std::optional<PlanDType> planDTypeFromName(const std::string &s);
size_t planDTypeSize(PlanDType t);

/// `floor(coef*T / div) + constant`, div >= 1.
struct PlanDim {
  int64_t coef = 0;
  int64_t constant = 0;
  int64_t div = 1;
  int64_t at(int64_t t) const {
    int64_t n = coef * t, q = n / div;
    return (q * div > n ? q - 1 : q) + constant;
  }
  bool operator==(const PlanDim &o) const {
    return coef == o.coef && constant == o.constant && div == o.div;
  }
};

/// An arena buffer.
struct PlanBuffer {
  std::string name; ///< the IR value it holds, for reports and --check
  PlanDType dtype = PlanDType::F32;
  std::vector<PlanDim> shape;
  uint64_t offset = 0; ///< byte offset in the arena
  uint64_t bytes = 0;  ///< size at T = maxTokens

  int64_t numElements(int64_t t) const;
};

/// A GGUF tensor the plan reads.
struct PlanWeight {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<uint64_t> dims; ///< ggml order, ne[0] first
};

/// An attribute value: int, float, bool, string, or list of ints/floats.
struct PlanAttr {
  enum class Kind { Int, Float, Bool, Str, Ints, Floats };
  Kind kind = Kind::Int;
  int64_t i = 0;
  double f = 0;
  bool b = false;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<double> floats;
};

/// A kernel operand: an arena buffer or a weight, by index.
struct PlanOperand {
  bool isWeight = false;
  uint32_t index = 0;
};

/// One launch.
struct PlanKernel {
  Recipe recipe = Recipe::Copy;
  std::vector<PlanOperand> inputs;
  std::vector<uint32_t> outputs; ///< buffer indices
  std::map<std::string, PlanAttr> attrs;
  uint64_t bytes = 0; ///< bytes moved at T = maxTokens (compiler's count)
  uint64_t flops = 0; ///< floating-point ops at T = maxTokens

  const PlanAttr *attr(const std::string &name) const;
};

/// A compiled plan.
struct Plan {
  int version = kPlanVersion;
  std::string model;  ///< the description's model name
  std::string arch;   ///< general.architecture of the GGUF it was built for
  std::string target; ///< "host", "gfx1151", "sm_90"
  /// Compile options that changed what the plan computes, by name (e.g.
  /// "qsa_compress_ratio" from strata-compile --qsa-compress-ratio), so a
  /// plan says how it was made.
  std::map<std::string, int64_t> options;
  int64_t maxTokens = 0;
  uint64_t arenaBytes = 0;
  uint64_t arenaLowerBound = 0; ///< max over time of live bytes
  std::vector<PlanBuffer> buffers;
  std::vector<PlanWeight> weights;
  std::vector<PlanKernel> kernels;
  std::vector<uint32_t> inputs;  ///< buffers the caller fills (tokens)
  std::vector<uint32_t> outputs; ///< buffers the caller reads (logits)
};

/// Serialises \p plan as JSON text.
std::string planToJson(const Plan &plan);
/// Parses and structurally validates plan JSON (indices in range, buffers
/// inside the arena, sizes consistent, recipe arity). On failure returns
/// false and sets \p error to "<name>: <json path>: <what>".
bool planFromJson(const std::string &text, const std::string &name, Plan &plan,
                  std::string &error);

/// Writes `plan.json` into directory \p dir (created if missing), atomically.
bool writePlanDir(const std::string &dir, const Plan &plan, std::string &error);
/// Reads and validates `dir/plan.json`.
bool readPlanDir(const std::string &dir, Plan &plan, std::string &error);

/// Checks that every weight of \p plan is in \p model with the declared type
/// and dims. Sets \p error to a message naming the weight on failure.
bool checkPlanWeights(const Plan &plan, const ModelInfo &model,
                      std::string &error);

} // namespace strata::format
