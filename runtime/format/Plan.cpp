//===- Plan.cpp - plan.json reading, writing and validation ---------------===//
//
// The JSON library is confined to this file.
//
//===----------------------------------------------------------------------===//
#include "runtime/format/Plan.h"

#include "runtime/format/FileUtil.h"
#include "runtime/format/ModelInfo.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <sys/stat.h>

namespace strata::format {

using json = nlohmann::json;

const std::vector<RecipeInfo> &allRecipes() {
  static const std::vector<RecipeInfo> kRecipes = {
#define RECIPE(Id, Name, MinInputs, MaxInputs, NumOutputs, Summary)            \
  {Recipe::Id, Name, MinInputs, MaxInputs, NumOutputs, Summary},
#include "runtime/format/Recipes.def"
  };
  return kRecipes;
}

const RecipeInfo *lookupRecipe(const std::string &name) {
  for (const RecipeInfo &r : allRecipes())
    if (name == r.name)
      return &r;
  return nullptr;
}

const RecipeInfo &recipeInfo(Recipe r) {
  return allRecipes()[static_cast<size_t>(r)];
}

namespace {
struct DTypeRow {
  PlanDType t;
  const char *name;
  size_t size;
};
constexpr DTypeRow kDTypes[] = {
    {PlanDType::F32, "f32", 4},   {PlanDType::F16, "f16", 2},
    {PlanDType::BF16, "bf16", 2}, {PlanDType::I32, "i32", 4},
    {PlanDType::I64, "i64", 8},   {PlanDType::Bool, "bool", 1}};
} // namespace

const char *planDTypeName(PlanDType t) {
  for (const DTypeRow &r : kDTypes)
    if (r.t == t)
      return r.name;
  return "?";
}

std::optional<PlanDType> planDTypeFromName(const std::string &s) {
  for (const DTypeRow &r : kDTypes)
    if (s == r.name)
      return r.t;
  return std::nullopt;
}

size_t planDTypeSize(PlanDType t) {
  for (const DTypeRow &r : kDTypes)
    if (r.t == t)
      return r.size;
  return 0;
}

int64_t PlanBuffer::numElements(int64_t t) const {
  int64_t n = 1;
  for (const PlanDim &d : shape)
    n *= d.at(t);
  return n;
}

const PlanAttr *PlanKernel::attr(const std::string &name) const {
  auto it = attrs.find(name);
  return it == attrs.end() ? nullptr : &it->second;
}

static json dimToJson(const PlanDim &d) {
  if (d.coef == 0)
    return d.constant;
  if (d.div != 1)
    return json::array({d.coef, d.constant, d.div});
  return json::array({d.coef, d.constant});
}

static json attrToJson(const PlanAttr &a) {
  switch (a.kind) {
  case PlanAttr::Kind::Int:
    return a.i;
  case PlanAttr::Kind::Float:
    return a.f;
  case PlanAttr::Kind::Bool:
    return a.b;
  case PlanAttr::Kind::Str:
    return a.s;
  case PlanAttr::Kind::Ints:
    return a.ints;
  case PlanAttr::Kind::Floats:
    return a.floats;
  }
  return nullptr;
}

std::string planToJson(const Plan &p) {
  json j;
  j["format"] = "strata-plan";
  j["version"] = p.version;
  j["model"] = p.model;
  j["arch"] = p.arch;
  j["target"] = p.target;
  j["max_tokens"] = p.maxTokens;
  j["options"] = p.options;
  j["arena"] = {{"bytes", p.arenaBytes}, {"lower_bound", p.arenaLowerBound}};
  j["inputs"] = p.inputs;
  j["outputs"] = p.outputs;
  json bufs = json::array();
  for (const PlanBuffer &b : p.buffers) {
    json shape = json::array();
    for (const PlanDim &d : b.shape)
      shape.push_back(dimToJson(d));
    bufs.push_back({{"name", b.name},
                    {"dtype", planDTypeName(b.dtype)},
                    {"shape", shape},
                    {"offset", b.offset},
                    {"bytes", b.bytes}});
  }
  j["buffers"] = bufs;
  json ws = json::array();
  for (const PlanWeight &w : p.weights)
    ws.push_back({{"name", w.name},
                  {"type", ggmlTypeInfo(w.type).irName},
                  {"dims", w.dims}});
  j["weights"] = ws;
  json ks = json::array();
  for (const PlanKernel &k : p.kernels) {
    json ins = json::array();
    for (const PlanOperand &o : k.inputs)
      ins.push_back({{o.isWeight ? "weight" : "buffer", o.index}});
    json attrs = json::object();
    for (const auto &[name, a] : k.attrs)
      attrs[name] = attrToJson(a);
    ks.push_back({{"recipe", recipeInfo(k.recipe).name},
                  {"inputs", ins},
                  {"outputs", k.outputs},
                  {"attrs", attrs},
                  {"bytes", k.bytes},
                  {"flops", k.flops}});
  }
  j["kernels"] = ks;
  return j.dump(1) + "\n";
}

namespace {

/// Reads fields with precise error paths; the first failure sticks.
class Reader {
public:
  Reader(const std::string &name, std::string &error)
      : name_(name), error_(error) {}

  bool fail(const std::string &path, const std::string &what) {
    if (ok_)
      error_ = fmt::format("{}: {}: {}", name_, path, what);
    ok_ = false;
    return false;
  }
  bool ok() const { return ok_; }

  const json *field(const json &obj, const std::string &path, const char *key) {
    if (!obj.is_object()) {
      fail(path, "expected an object");
      return nullptr;
    }
    auto it = obj.find(key);
    if (it == obj.end()) {
      fail(path, fmt::format("missing field '{}'", key));
      return nullptr;
    }
    return &*it;
  }
  bool u64(const json &obj, const std::string &path, const char *key,
           uint64_t &out) {
    const json *v = field(obj, path, key);
    if (!v)
      return false;
    if (!v->is_number_unsigned() && !(v->is_number_integer() && *v >= 0))
      return fail(path + "." + key, "expected a non-negative integer");
    out = v->get<uint64_t>();
    return true;
  }
  bool i64(const json &obj, const std::string &path, const char *key,
           int64_t &out) {
    const json *v = field(obj, path, key);
    if (!v)
      return false;
    if (!v->is_number_integer())
      return fail(path + "." + key, "expected an integer");
    out = v->get<int64_t>();
    return true;
  }
  bool str(const json &obj, const std::string &path, const char *key,
           std::string &out) {
    const json *v = field(obj, path, key);
    if (!v)
      return false;
    if (!v->is_string())
      return fail(path + "." + key, "expected a string");
    out = v->get<std::string>();
    return true;
  }
  const json *array(const json &obj, const std::string &path, const char *key) {
    const json *v = field(obj, path, key);
    if (v && !v->is_array()) {
      fail(path + "." + key, "expected an array");
      return nullptr;
    }
    return v;
  }
  bool indexList(const json &obj, const std::string &path, const char *key,
                 size_t limit, std::vector<uint32_t> &out) {
    const json *a = array(obj, path, key);
    if (!a)
      return false;
    for (size_t i = 0; i < a->size(); ++i) {
      const json &e = (*a)[i];
      if (!e.is_number_unsigned() || e.get<uint64_t>() >= limit)
        return fail(fmt::format("{}.{}[{}]", path, key, i),
                    fmt::format("expected a buffer index below {}", limit));
      out.push_back(e.get<uint32_t>());
    }
    return true;
  }

private:
  const std::string &name_;
  std::string &error_;
  bool ok_ = true;
};

bool readAttr(Reader &r, const std::string &path, const json &v, PlanAttr &a) {
  if (v.is_boolean()) {
    a.kind = PlanAttr::Kind::Bool;
    a.b = v.get<bool>();
  } else if (v.is_number_integer()) {
    a.kind = PlanAttr::Kind::Int;
    a.i = v.get<int64_t>();
  } else if (v.is_number_float()) {
    a.kind = PlanAttr::Kind::Float;
    a.f = v.get<double>();
  } else if (v.is_string()) {
    a.kind = PlanAttr::Kind::Str;
    a.s = v.get<std::string>();
  } else if (v.is_array()) {
    bool allInt = true;
    for (const json &e : v) {
      if (!e.is_number())
        return r.fail(path, "a list attribute holds numbers only");
      allInt &= e.is_number_integer();
    }
    a.kind = allInt ? PlanAttr::Kind::Ints : PlanAttr::Kind::Floats;
    for (const json &e : v) {
      if (allInt)
        a.ints.push_back(e.get<int64_t>());
      else
        a.floats.push_back(e.get<double>());
    }
  } else {
    return r.fail(path, "unsupported attribute value");
  }
  return true;
}

} // namespace

bool planFromJson(const std::string &text, const std::string &name, Plan &p,
                  std::string &error) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    error = fmt::format("{}: not valid JSON", name);
    return false;
  }
  Reader r(name, error);
  std::string format;
  if (!r.str(j, "$", "format", format))
    return false;
  if (format != "strata-plan")
    return r.fail("$.format", fmt::format("expected \"strata-plan\", got "
                                          "\"{}\"",
                                          format));
  int64_t version = 0;
  if (!r.i64(j, "$", "version", version))
    return false;
  if (version != kPlanVersion)
    return r.fail("$.version",
                  fmt::format("plan version {} is not supported (this build "
                              "reads version {}); recompile the plan",
                              version, kPlanVersion));
  p.version = static_cast<int>(version);
  if (!r.str(j, "$", "model", p.model) || !r.str(j, "$", "arch", p.arch) ||
      !r.str(j, "$", "target", p.target) ||
      !r.i64(j, "$", "max_tokens", p.maxTokens))
    return false;
  if (p.maxTokens <= 0 || p.maxTokens > (int64_t(1) << 24))
    return r.fail("$.max_tokens", "expected 1 .. 2^24");
  const json *options = r.field(j, "$", "options");
  if (!options)
    return false;
  if (!options->is_object())
    return r.fail("$.options", "expected an object");
  for (auto it = options->begin(); it != options->end(); ++it)
    if (!r.i64(*options, "$.options", it.key().c_str(), p.options[it.key()]))
      return false;
  const json *arena = r.field(j, "$", "arena");
  if (!arena || !r.u64(*arena, "$.arena", "bytes", p.arenaBytes) ||
      !r.u64(*arena, "$.arena", "lower_bound", p.arenaLowerBound))
    return false;

  const json *bufs = r.array(j, "$", "buffers");
  if (!bufs)
    return false;
  for (size_t i = 0; i < bufs->size(); ++i) {
    std::string path = fmt::format("$.buffers[{}]", i);
    const json &b = (*bufs)[i];
    PlanBuffer pb;
    std::string dtype;
    if (!r.str(b, path, "name", pb.name) || !r.str(b, path, "dtype", dtype) ||
        !r.u64(b, path, "offset", pb.offset) ||
        !r.u64(b, path, "bytes", pb.bytes))
      return false;
    auto dt = planDTypeFromName(dtype);
    if (!dt)
      return r.fail(path + ".dtype", fmt::format("unknown dtype '{}'", dtype));
    pb.dtype = *dt;
    const json *shape = r.array(b, path, "shape");
    if (!shape)
      return false;
    if (shape->size() > 8)
      return r.fail(path + ".shape", "more than 8 dims");
    for (size_t d = 0; d < shape->size(); ++d) {
      const json &e = (*shape)[d];
      PlanDim dim;
      if (e.is_number_integer()) {
        dim.constant = e.get<int64_t>();
      } else if (e.is_array() && (e.size() == 2 || e.size() == 3) &&
                 e[0].is_number_integer() && e[1].is_number_integer() &&
                 (e.size() == 2 || e[2].is_number_integer())) {
        dim.coef = e[0].get<int64_t>();
        dim.constant = e[1].get<int64_t>();
        if (e.size() == 3)
          dim.div = e[2].get<int64_t>();
      } else {
        return r.fail(fmt::format("{}.shape[{}]", path, d),
                      "expected an integer, [coef, constant] or [coef, "
                      "constant, div]");
      }
      // A divided dim (pooled blocks) may be empty for short prompts.
      if (dim.coef < 0 || dim.coef > (1 << 20) || dim.constant < 0 ||
          dim.constant > (int64_t(1) << 40) || dim.div < 1 ||
          dim.div > (int64_t(1) << 20) ||
          dim.at(p.maxTokens) < (dim.div > 1 ? 0 : 1))
        return r.fail(fmt::format("{}.shape[{}]", path, d), "dim out of range");
      pb.shape.push_back(dim);
    }
    // Size at maxTokens must match, and the buffer must lie in the arena.
    unsigned __int128 elems = 1;
    for (const PlanDim &d : pb.shape) {
      elems *= static_cast<unsigned __int128>(d.at(p.maxTokens));
      if (elems > (static_cast<unsigned __int128>(1) << 60))
        return r.fail(path + ".shape", "too many elements");
    }
    uint64_t want = static_cast<uint64_t>(elems) * planDTypeSize(pb.dtype);
    if (pb.bytes != want)
      return r.fail(
          path + ".bytes",
          fmt::format("{} bytes, but shape and dtype need {}", pb.bytes, want));
    if (pb.offset > p.arenaBytes || pb.bytes > p.arenaBytes - pb.offset)
      return r.fail(path,
                    fmt::format("bytes [{}, {}) lie outside the arena "
                                "of {} bytes",
                                pb.offset, pb.offset + pb.bytes, p.arenaBytes));
    p.buffers.push_back(std::move(pb));
  }

  const json *ws = r.array(j, "$", "weights");
  if (!ws)
    return false;
  for (size_t i = 0; i < ws->size(); ++i) {
    std::string path = fmt::format("$.weights[{}]", i);
    const json &w = (*ws)[i];
    PlanWeight pw;
    std::string type;
    if (!r.str(w, path, "name", pw.name) || !r.str(w, path, "type", type))
      return false;
    auto ti = ggmlTypeFromIrName(type);
    if (!ti || !ti->loadable)
      return r.fail(path + ".type", fmt::format("unknown or unloadable "
                                                "tensor type '{}'",
                                                type));
    pw.type = ti->type;
    const json *dims = r.array(w, path, "dims");
    if (!dims)
      return false;
    for (const json &d : *dims) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() == 0)
        return r.fail(path + ".dims", "expected positive integers");
      pw.dims.push_back(d.get<uint64_t>());
    }
    if (pw.dims.empty() || pw.dims.size() > 4)
      return r.fail(path + ".dims", "expected 1 to 4 dims");
    p.weights.push_back(std::move(pw));
  }

  if (!r.indexList(j, "$", "inputs", p.buffers.size(), p.inputs) ||
      !r.indexList(j, "$", "outputs", p.buffers.size(), p.outputs))
    return false;

  const json *ks = r.array(j, "$", "kernels");
  if (!ks)
    return false;
  for (size_t i = 0; i < ks->size(); ++i) {
    std::string path = fmt::format("$.kernels[{}]", i);
    const json &k = (*ks)[i];
    PlanKernel pk;
    std::string recipe;
    if (!r.str(k, path, "recipe", recipe))
      return false;
    const RecipeInfo *ri = lookupRecipe(recipe);
    if (!ri)
      return r.fail(path + ".recipe",
                    fmt::format("unknown recipe '{}' (this runtime knows "
                                "the recipes of Recipes.def)",
                                recipe));
    pk.recipe = ri->id;
    const json *ins = r.array(k, path, "inputs");
    if (!ins)
      return false;
    for (size_t o = 0; o < ins->size(); ++o) {
      const json &e = (*ins)[o];
      std::string opath = fmt::format("{}.inputs[{}]", path, o);
      PlanOperand op;
      if (e.is_object() && e.size() == 1 && e.contains("buffer") &&
          e["buffer"].is_number_unsigned()) {
        op.index = e["buffer"].get<uint32_t>();
        if (op.index >= p.buffers.size())
          return r.fail(opath,
                        fmt::format("buffer {} does not exist", op.index));
      } else if (e.is_object() && e.size() == 1 && e.contains("weight") &&
                 e["weight"].is_number_unsigned()) {
        op.isWeight = true;
        op.index = e["weight"].get<uint32_t>();
        if (op.index >= p.weights.size())
          return r.fail(opath,
                        fmt::format("weight {} does not exist", op.index));
      } else {
        return r.fail(opath, "expected {\"buffer\": N} or {\"weight\": N}");
      }
      pk.inputs.push_back(op);
    }
    if (!r.indexList(k, path, "outputs", p.buffers.size(), pk.outputs))
      return false;
    int nin = static_cast<int>(pk.inputs.size());
    if (nin < ri->minInputs || nin > ri->maxInputs ||
        static_cast<int>(pk.outputs.size()) != ri->numOutputs)
      return r.fail(path, fmt::format("recipe '{}' takes {}..{} inputs and "
                                      "{} outputs, got {} and {}",
                                      recipe, ri->minInputs, ri->maxInputs,
                                      ri->numOutputs, nin, pk.outputs.size()));
    const json *attrs = r.field(k, path, "attrs");
    if (!attrs)
      return false;
    if (!attrs->is_object())
      return r.fail(path + ".attrs", "expected an object");
    for (auto it = attrs->begin(); it != attrs->end(); ++it) {
      PlanAttr a;
      if (!readAttr(r, path + ".attrs." + it.key(), it.value(), a))
        return false;
      pk.attrs[it.key()] = std::move(a);
    }
    if (!r.u64(k, path, "bytes", pk.bytes) ||
        !r.u64(k, path, "flops", pk.flops))
      return false;
    p.kernels.push_back(std::move(pk));
  }
  return r.ok();
}

bool writePlanDir(const std::string &dir, const Plan &plan,
                  std::string &error) {
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) {
      error = fmt::format("{}: exists and is not a directory", dir);
      return false;
    }
  } else if (::mkdir(dir.c_str(), 0777) != 0) {
    error = fmt::format("{}: cannot create the plan directory", dir);
    return false;
  }
  return writeFileAtomic(dir + "/plan.json", planToJson(plan), error);
}

bool readPlanDir(const std::string &dir, Plan &plan, std::string &error) {
  std::string text;
  std::string path = dir + "/plan.json";
  if (!readWholeFile(path, size_t(256) << 20, text, error))
    return false;
  return planFromJson(text, path, plan, error);
}

bool checkPlanWeights(const Plan &plan, const ModelInfo &model,
                      std::string &error) {
  for (const PlanWeight &w : plan.weights) {
    const TensorInfo *t = model.findTensor(w.name);
    if (!t) {
      error = fmt::format("weight '{}' of the plan is not in {}", w.name,
                          model.source);
      return false;
    }
    if (t->type != w.type || !sameGgmlShape(t->dims, w.dims)) {
      auto dims = [](const std::vector<uint64_t> &d) {
        return fmt::format("[{}]", fmt::join(d, ", "));
      };
      error =
          fmt::format("weight '{}' is {} {} in {}, the plan was compiled "
                      "for {} {}; recompile the plan",
                      w.name, ggmlTypeInfo(t->type).name, dims(t->dims),
                      model.source, ggmlTypeInfo(w.type).name, dims(w.dims));
      return false;
    }
  }
  return true;
}

} // namespace strata::format
