//===- Options.cpp - code generation options ------------------------------===//
#include "codegen/Options.h"

#include "runtime/format/Plan.h"

#include <fmt/format.h>

#include <charconv>

namespace strata::codegen {

namespace {

constexpr const char *kPrefix = "codegen.";

/// The values of an Enum option, split at '|'.
std::vector<std::string> enumValues(const OptionInfo &o) {
  std::vector<std::string> out;
  std::string s = o.values;
  for (size_t at = 0; at <= s.size();) {
    size_t bar = s.find('|', at);
    if (bar == std::string::npos)
      bar = s.size();
    out.push_back(s.substr(at, bar - at));
    at = bar + 1;
  }
  return out;
}

/// How \p o's values are written: "0|1", "0..7", "auto|on|off".
std::string allowed(const OptionInfo &o) {
  switch (o.kind) {
  case OptionInfo::Kind::Bool:
    return "0 or 1 (off/on, false/true)";
  case OptionInfo::Kind::Int:
    return fmt::format("an integer in {}..{}", o.min, o.max);
  case OptionInfo::Kind::Enum:
    return fmt::format("one of {}", o.values);
  }
  return "";
}

/// \p v as its name ("auto") or number.
std::string spell(const OptionInfo &o, int64_t v) {
  if (o.kind == OptionInfo::Kind::Enum) {
    std::vector<std::string> names = enumValues(o);
    if (v >= 0 && static_cast<size_t>(v) < names.size())
      return names[v];
  }
  return std::to_string(v);
}

const OptionInfo *find(const std::string &name) {
  for (const OptionInfo &o : allOptions())
    if (name == o.name)
      return &o;
  return nullptr;
}

} // namespace

const std::vector<OptionInfo> &allOptions() {
  using K = OptionInfo::Kind;
  static const std::vector<OptionInfo> kOptions = {
#define OPTION(Id, Name, Kind, Min, Max, Default, Values, Families, Help)      \
  {Opt::Id, Name, K::Kind, Min, Max, Default, Values, Families, Help},
#include "codegen/Options.def"
  };
  return kOptions;
}

std::string optionKey(Opt o) {
  return kPrefix + std::string(allOptions()[static_cast<size_t>(o)].name);
}

bool setOption(format::Plan &plan, const std::string &text,
               std::string &error) {
  size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    error = fmt::format("--codegen-opt needs NAME=VALUE, got '{}' "
                        "(--codegen-opt help lists the options)",
                        text);
    return false;
  }
  const std::string name = text.substr(0, eq), value = text.substr(eq + 1);
  const OptionInfo *o = find(name);
  if (!o) {
    error = fmt::format("unknown code generation option '{}' "
                        "(--codegen-opt help lists the options)",
                        name);
    return false;
  }
  int64_t v = 0;
  bool ok = false;
  if (o->kind == OptionInfo::Kind::Enum) {
    std::vector<std::string> names = enumValues(*o);
    for (size_t i = 0; i < names.size(); ++i)
      if (value == names[i])
        v = static_cast<int64_t>(i), ok = true;
  } else if (o->kind == OptionInfo::Kind::Bool &&
             (value == "on" || value == "true" || value == "off" ||
              value == "false")) {
    v = value == "on" || value == "true";
    ok = true;
  } else {
    auto [end, ec] =
        std::from_chars(value.data(), value.data() + value.size(), v);
    ok = ec == std::errc() && end == value.data() + value.size() &&
         v >= o->min && v <= o->max;
  }
  if (!ok) {
    error = fmt::format("--codegen-opt {}: '{}' is not {}", name, value,
                        allowed(*o));
    return false;
  }
  const std::string key = optionKey(o->id);
  if (v == o->dflt)
    plan.options.erase(key);
  else
    plan.options[key] = v;
  return true;
}

int64_t option(const format::Plan &plan, Opt o) {
  const OptionInfo &info = allOptions()[static_cast<size_t>(o)];
  auto it = plan.options.find(optionKey(o));
  return it == plan.options.end() ? info.dflt : it->second;
}

std::string optionsHelp() {
  std::string out = "code generation options (strata-compile --codegen-opt "
                    "NAME=VALUE, repeatable):\n";
  for (const OptionInfo &o : allOptions())
    out += fmt::format("  {:<18} {} (default {}; {})\n  {:<18} {}\n", o.name,
                       allowed(o), spell(o, o.dflt), o.families, "", o.help);
  return out;
}

std::string optionsSummary(const format::Plan &plan) {
  std::string out;
  for (const OptionInfo &o : allOptions()) {
    int64_t v = option(plan, o.id);
    if (v != o.dflt)
      out +=
          fmt::format("{}{}={}", out.empty() ? "" : ", ", o.name, spell(o, v));
  }
  return out;
}

} // namespace strata::codegen
