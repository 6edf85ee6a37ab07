//===- Options.h - code generation options ----------------------*- C++ -*-===//
//
// The options of Options.def: parsed from strata-compile's --codegen-opt,
// recorded in the plan (plan.json "options", "codegen.NAME", only where a
// value differs from its default) and read back by the emitters from the
// plan they emit, so a plan says how its code was made and --emit-source of
// a kernel sees the same options as the compile that wrote it.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata::format {
struct Plan;
}

namespace strata::codegen {

/// One option of Options.def.
enum class Opt {
#define OPTION(Id, Name, Kind, Min, Max, Default, Values, Families, Help) Id,
#include "codegen/Options.def"
};

/// What Options.def says of an option.
struct OptionInfo {
  Opt id;
  const char *name;
  enum class Kind { Bool, Int, Enum } kind;
  int64_t min, max, dflt;
  const char *values; ///< Enum: "a|b|c"
  const char *families;
  const char *help;
};

/// Every option, in Options.def order.
const std::vector<OptionInfo> &allOptions();
/// The plan.json "options" key of \p o ("codegen.gemm-tma").
std::string optionKey(Opt o);

/// Parses "NAME=VALUE" and records the value in \p plan's options (removed
/// again when it is the default). On a mistake returns false and sets
/// \p error to one line naming the option or the value and what is allowed.
bool setOption(format::Plan &plan, const std::string &text, std::string &error);

/// The value of \p o for \p plan: the recorded one, else the default.
int64_t option(const format::Plan &plan, Opt o);

/// Every option with its kind, range or values, default, families and help
/// (strata-compile --codegen-opt help).
std::string optionsHelp();

/// "gemm-tma=0, attn-smx=3": the options \p plan sets, "" if none
/// (--report).
std::string optionsSummary(const format::Plan &plan);

} // namespace strata::codegen
