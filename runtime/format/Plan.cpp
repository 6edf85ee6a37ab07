//===- Plan.cpp - plan.json reading, writing and validation ---------------===//
//
// The JSON library is confined to this file.
//
//===----------------------------------------------------------------------===//
#include "runtime/format/Plan.h"

#include "runtime/format/CheckedMath.h"
#include "runtime/format/FileUtil.h"
#include "runtime/format/Liveness.h"
#include "runtime/format/ModelInfo.h"
#include "runtime/format/Utf8.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

#include <sys/stat.h>
#include <unistd.h>

namespace strata::format {

using json = nlohmann::json;

int64_t PlanBuffer::numElements(int64_t t) const {
  int64_t n = 1;
  for (const PlanDim &d : shape)
    n *= d.at(t);
  return n;
}

//===----------------------------------------------------------------------===//
// PlanPoly
//===----------------------------------------------------------------------===//

double PlanPoly::at(int64_t t) const {
  const Piece *p = nullptr;
  for (const Piece &q : pieces)
    if (q.from <= t)
      p = &q;
  if (!p)
    return 0;
  double v = 0, x = 1;
  for (double c : p->c) {
    v += c * x;
    x *= static_cast<double>(t);
  }
  return v;
}

PlanPoly PlanPoly::constant(double v) { return of({v}); }

PlanPoly PlanPoly::of(std::vector<double> c) {
  PlanPoly p;
  p.pieces.push_back({0, std::move(c)});
  return p;
}

PlanPoly &PlanPoly::operator+=(const PlanPoly &o) {
  if (o.pieces.empty())
    return *this;
  if (pieces.empty())
    return *this = o;
  // The sum has a piece wherever either operand starts one.
  std::vector<int64_t> starts;
  for (const PlanPoly *p : {static_cast<const PlanPoly *>(this), &o})
    for (const Piece &q : p->pieces)
      starts.push_back(q.from);
  std::sort(starts.begin(), starts.end());
  starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
  auto coefsAt = [](const PlanPoly &p, int64_t t) {
    const Piece *best = nullptr;
    for (const Piece &q : p.pieces)
      if (q.from <= t)
        best = &q;
    return best ? best->c : std::vector<double>{};
  };
  PlanPoly sum;
  for (int64_t s : starts) {
    std::vector<double> a = coefsAt(*this, s), b = coefsAt(o, s);
    a.resize(std::max(a.size(), b.size()), 0.0);
    for (size_t i = 0; i < b.size(); ++i)
      a[i] += b[i];
    sum.pieces.push_back({s, std::move(a)});
  }
  return *this = std::move(sum);
}

PlanPoly PlanPoly::operator*(double s) const {
  PlanPoly p = *this;
  for (Piece &q : p.pieces)
    for (double &c : q.c)
      c *= s;
  return p;
}

bool PlanPoly::operator==(const PlanPoly &o) const {
  if (pieces.size() != o.pieces.size())
    return false;
  for (size_t i = 0; i < pieces.size(); ++i)
    if (pieces[i].from != o.pieces[i].from || pieces[i].c != o.pieces[i].c)
      return false;
  return true;
}

//===----------------------------------------------------------------------===//
// PlanState
//===----------------------------------------------------------------------===//

bool isStateDType(PlanDType t) {
  return t == PlanDType::F32 || t == PlanDType::BF16 || t == PlanDType::I8;
}

std::optional<uint64_t> stateBytes(PlanDType dtype,
                                   const std::vector<uint64_t> &shape) {
  if (!isStateDType(dtype) || shape.empty())
    return std::nullopt;
  std::optional<uint64_t> n = uint64_t(1);
  for (uint64_t d : shape)
    n = d >= 1 && n ? checkedMul(*n, d) : std::nullopt;
  if (!n)
    return std::nullopt;
  if (dtype != PlanDType::I8)
    return checkedMul(*n, planDTypeSize(dtype));
  // Rows of the last dim, each D int8 values then its f32 scale: D a
  // multiple of 4 keeps every scale 4-byte aligned.
  uint64_t d = shape.back();
  if (d % 4 != 0)
    return std::nullopt;
  std::optional<uint64_t> scales = checkedMul(*n / d, 4);
  return scales ? checkedAdd(*n, *scales) : std::nullopt;
}

//===----------------------------------------------------------------------===//
// PlanKernel
//===----------------------------------------------------------------------===//

static uint64_t align256(uint64_t x) { return (x + 255) / 256 * 256; }

uint64_t BodyTemp::bytes(int64_t t) const {
  uint64_t n = planDTypeSize(dtype);
  for (const PlanDim &d : shape)
    n *= static_cast<uint64_t>(std::max<int64_t>(d.at(t), 0));
  return n;
}

std::string PlanKernel::label() const {
  return isFused() ? "fused:" + fused : recipeInfo(recipe).name;
}

KernelRunBytes kernelRunBytes(const Plan &plan, const PlanKernel &k,
                              int64_t rows,
                              const std::vector<int64_t> &attended) {
  KernelRunBytes r;
  r.bytes = k.bytes.at(rows);
  const bool attention = !k.isFused() && k.recipe == Recipe::AttentionCached;
  const bool select = !k.isFused() && k.recipe == Recipe::QsaSelectCached;
  auto context = plan.options.find("max_context");
  if (!(attention || select) || attended.empty() ||
      context == plan.options.end() || context->second < 1)
    return r;
  auto batch = plan.options.find("max_batch");
  const double slots = batch == plan.options.end() || batch->second < 1
                           ? 1.0
                           : double(batch->second);
  const double full = double(context->second);
  // One slot's share of each cache the kernel reads (attention: inputs 1
  // and 2, the keys and values; selection: input 1, the compressed keys).
  double perSlot = 0;
  for (size_t i = 1; i < (attention ? 3u : 2u) && i < k.inputs.size(); ++i)
    if (k.inputs[i].isState && k.inputs[i].index < plan.states.size())
      perSlot += double(plan.states[k.inputs[i].index].bytes) / slots;
  // What the plan counted: min(rows, slots) slots of the whole cache.
  const double counted = perSlot * std::min<double>(double(rows), slots);
  const PlanAttr *block = k.attr("block");
  const int64_t blockRows = block && block->i > 0 ? block->i : 0;
  // Selection: the compressed blocks a slot holds; block-sparse attention:
  // the index of the blocks each row takes (its last input).
  const std::vector<uint64_t> *compressed =
      select && k.inputs.size() > 1 && k.inputs[1].isState &&
              k.inputs[1].index < plan.states.size()
          ? &plan.states[k.inputs[1].index].shape
          : nullptr;
  const std::vector<PlanDim> *index =
      attention && !k.inputs.empty() && k.inputs.back().isBuffer() &&
              k.inputs.back().index < plan.buffers.size()
          ? &plan.buffers[k.inputs.back().index].shape
          : nullptr;
  double read = 0;
  for (int64_t positions : attended) {
    double keys = std::min(double(positions), full), all = full;
    if (select && blockRows > 0 && compressed && compressed->size() > 1) {
      all = double((*compressed)[1]);
      keys = std::min(all, double(positions) / double(blockRows));
    } else if (attention && blockRows > 0 && index && index->size() > 1) {
      keys = std::min<double>(keys,
                              double((*index)[1].constant) * double(blockRows));
    }
    read += perSlot * std::min(1.0, keys / all);
  }
  r.bytes += read - counted;
  r.cacheBytes = read;
  return r;
}

uint64_t PlanKernel::workspaceBytes(int64_t t) const {
  uint64_t n = 0;
  for (const BodyTemp &tmp : temps)
    n += align256(tmp.bytes(t));
  // Whichever code runs at t: the largest (one allocation serves all).
  if (code) {
    n = std::max<uint64_t>(
        n, static_cast<uint64_t>(std::max<int64_t>(code->workspace.at(t), 0)));
    for (const PlanCode &a : code->alternates)
      n = std::max<uint64_t>(
          n, static_cast<uint64_t>(std::max<int64_t>(a.workspace.at(t), 0)));
  }
  return n;
}

const PlanCode &PlanCode::at(int64_t t) const {
  const PlanCode *c = this;
  for (const PlanCode &a : alternates)
    if (a.minTokens <= t)
      c = &a;
  return *c;
}

const PlanAttr *PlanKernel::attr(const std::string &name) const {
  auto it = attrs.find(name);
  return it == attrs.end() ? nullptr : &it->second;
}

//===----------------------------------------------------------------------===//
// Targets
//===----------------------------------------------------------------------===//

namespace {
constexpr PlanTarget kTargets[] = {
#define TARGET(Id, Name, Gpu, WaveSize, Units, SharedPerBlock, SharedPerUnit,  \
               RegsPerUnit, MemGBs, VecF32, MatF16, MatI8, TensorMaps,         \
               StaticShared)                                                   \
  {Name, Gpu != 0, SharedPerBlock, TensorMaps != 0},
#include "runtime/format/Targets.def"
};
} // namespace

const PlanTarget *lookupPlanTarget(const std::string &name) {
  for (const PlanTarget &t : kTargets)
    if (name == t.name)
      return &t;
  return nullptr;
}

std::string planTargetNames() {
  std::string s;
  for (const PlanTarget &t : kTargets)
    s += (s.empty() ? "" : ", ") + std::string(t.name);
  return s;
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

namespace {

json dimToJson(const PlanDim &d) {
  if (d.coef == 0)
    return d.constant;
  if (d.div != 1)
    return json::array({d.coef, d.constant, d.div});
  return json::array({d.coef, d.constant});
}

json shapeToJson(const std::vector<PlanDim> &shape) {
  json a = json::array();
  for (const PlanDim &d : shape)
    a.push_back(dimToJson(d));
  return a;
}

json attrToJson(const PlanAttr &a) {
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

json attrsToJson(const std::map<std::string, PlanAttr> &attrs) {
  json j = json::object();
  for (const auto &[name, a] : attrs)
    j[name] = attrToJson(a);
  return j;
}

json polyToJson(const PlanPoly &p) {
  json a = json::array();
  for (const PlanPoly::Piece &q : p.pieces) {
    json piece = json::array({q.from});
    for (double c : q.c)
      piece.push_back(c);
    a.push_back(piece);
  }
  return a;
}

json refToJson(const BodyRef &r) {
  static const char *kKinds[] = {"in", "out", "tmp"};
  json j = {{kKinds[static_cast<int>(r.kind)], r.index}};
  if (!r.view.empty())
    j["view"] = shapeToJson(r.view);
  return j;
}

json codeToJson(const PlanCode &c) {
  json j = {{"module", c.module},
            {"symbol", c.symbol},
            {"grid", shapeToJson(c.grid)},
            {"block", c.block},
            {"shared_bytes", c.sharedBytes},
            {"args", c.args}};
  if (!c.tensorMaps.empty()) {
    json maps = json::array();
    for (const PlanTensorMap &m : c.tensorMaps)
      maps.push_back({{"operand",
                       {{m.workspace          ? "workspace"
                         : m.operand.isWeight ? "weight"
                                              : "buffer",
                         m.workspace ? 0u : m.operand.index}}},
                      {"offset", m.offset},
                      {"dtype", planDTypeName(m.dtype)},
                      {"dims", shapeToJson(m.dims)},
                      {"strides", m.strides},
                      {"box", m.box},
                      {"swizzle", m.swizzle}});
    j["tensor_maps"] = std::move(maps);
  }
  if (c.pre)
    j["pre"] = {{"symbol", c.pre->symbol},
                {"grid", shapeToJson(c.pre->grid)},
                {"block", c.pre->block},
                {"shared_bytes", c.pre->sharedBytes}};
  if (!(c.workspace == PlanDim{}))
    j["workspace_bytes"] = dimToJson(c.workspace);
  if (!c.int8Inputs.empty())
    j["int8_inputs"] = c.int8Inputs;
  if (!c.alternates.empty()) {
    json alts = json::array();
    for (const PlanCode &a : c.alternates) {
      json ja = codeToJson(a);
      ja["min_tokens"] = a.minTokens;
      alts.push_back(std::move(ja));
    }
    j["alternates"] = std::move(alts);
  }
  return j;
}

json kernelToJson(const PlanKernel &k) {
  json ins = json::array();
  for (const PlanOperand &o : k.inputs)
    ins.push_back({{o.isState    ? "state"
                    : o.isWeight ? "weight"
                                 : "buffer",
                    o.index}});
  json j;
  if (k.isFused()) {
    j["fused"] = k.fused;
  } else {
    j["recipe"] = recipeInfo(k.recipe).name;
  }
  j["inputs"] = ins;
  j["outputs"] = k.outputs;
  if (!k.tied.empty())
    j["tied"] = k.tied;
  j["attrs"] = attrsToJson(k.attrs);
  if (k.isFused()) {
    json temps = json::array();
    for (const BodyTemp &t : k.temps)
      temps.push_back(
          {{"dtype", planDTypeName(t.dtype)}, {"shape", shapeToJson(t.shape)}});
    j["temps"] = temps;
    json body = json::array();
    for (const BodyOp &op : k.body) {
      json bi = json::array(), bo = json::array();
      for (const BodyRef &r : op.inputs)
        bi.push_back(refToJson(r));
      for (const BodyRef &r : op.outputs)
        bo.push_back(refToJson(r));
      body.push_back({{"recipe", recipeInfo(op.recipe).name},
                      {"inputs", bi},
                      {"outputs", bo},
                      {"attrs", attrsToJson(op.attrs)}});
    }
    j["body"] = body;
  }
  if (!k.variant.empty())
    j["variant"] = k.variant;
  j["bytes"] = polyToJson(k.bytes);
  j["flops"] = polyToJson(k.flops);
  if (k.code)
    j["code"] = codeToJson(*k.code);
  return j;
}

} // namespace

int planVersionOf(const Plan &p) {
  return p.states.empty() ? kPlanMinVersion : kPlanVersion;
}

std::string planToJson(const Plan &p) {
  json j;
  j["format"] = "strata-plan";
  j["version"] = planVersionOf(p);
  j["model"] = p.model;
  j["arch"] = p.arch;
  j["target"] = p.target;
  j["max_tokens"] = p.maxTokens;
  j["options"] = p.options;
  j["metadata"] = p.metadata;
  if (p.roofline.memGBs > 0 || p.roofline.vecTflops > 0 ||
      p.roofline.matTflops > 0)
    j["roofline"] = {{"mem_gbs", p.roofline.memGBs},
                     {"vec_tflops", p.roofline.vecTflops},
                     {"mat_tflops", p.roofline.matTflops}};
  j["arena"] = {{"bytes", p.arenaBytes}, {"lower_bound", p.arenaLowerBound}};
  j["inputs"] = p.inputs;
  j["outputs"] = p.outputs;
  if (!p.states.empty()) {
    json states = json::array();
    for (const PlanState &st : p.states)
      states.push_back({{"name", st.name},
                        {"dtype", planDTypeName(st.dtype)},
                        {"shape", st.shape},
                        {"bytes", st.bytes}});
    j["state"] = std::move(states);
  }
  json bufs = json::array();
  for (const PlanBuffer &b : p.buffers) {
    json jb = {{"name", b.name},
               {"dtype", planDTypeName(b.dtype)},
               {"shape", shapeToJson(b.shape)},
               {"offset", b.offset},
               {"bytes", b.bytes}};
    if (b.viewOf >= 0)
      jb["view_of"] = b.viewOf;
    bufs.push_back(std::move(jb));
  }
  j["buffers"] = bufs;
  json ws = json::array();
  for (const PlanWeight &w : p.weights)
    ws.push_back({{"name", w.name},
                  {"type", ggmlTypeInfo(w.type).irName},
                  {"dims", w.dims}});
  j["weights"] = ws;
  json ks = json::array();
  for (const PlanKernel &k : p.kernels)
    ks.push_back(kernelToJson(k));
  j["kernels"] = ks;
  if (p.syntheticFill)
    j["synthetic_fill"] = codeToJson(*p.syntheticFill);
  // Names come from files nobody here controls; bytes that are not UTF-8
  // are written as U+FFFD rather than failing the whole plan.
  return j.dump(1, ' ', false, json::error_handler_t::replace) + "\n";
}

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

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
  /// An index below 2^32 (range against the plan is validatePlan's job).
  bool index(const json &e, const std::string &path, uint32_t &out) {
    if (!e.is_number_unsigned() || e.get<uint64_t>() > UINT32_MAX)
      return fail(path, "expected an index (a non-negative integer below "
                        "2^32)");
    out = static_cast<uint32_t>(e.get<uint64_t>());
    return true;
  }
  bool indexList(const json &obj, const std::string &path, const char *key,
                 std::vector<uint32_t> &out) {
    const json *a = array(obj, path, key);
    if (!a)
      return false;
    for (size_t i = 0; i < a->size(); ++i) {
      uint32_t v = 0;
      if (!index((*a)[i], fmt::format("{}.{}[{}]", path, key, i), v))
        return false;
      out.push_back(v);
    }
    return true;
  }
  bool shape(const json &a, const std::string &path,
             std::vector<PlanDim> &out) {
    if (!a.is_array())
      return fail(path, "expected an array of dims");
    if (a.size() > 8)
      return fail(path, "more than 8 dims");
    for (size_t d = 0; d < a.size(); ++d) {
      const json &e = a[d];
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
        return fail(fmt::format("{}[{}]", path, d),
                    "expected an integer, [coef, constant] or [coef, "
                    "constant, div]");
      }
      out.push_back(dim);
    }
    return true;
  }
  bool poly(const json &obj, const std::string &path, const char *key,
            PlanPoly &out) {
    const json *a = array(obj, path, key);
    if (!a)
      return false;
    int64_t last = -1;
    for (size_t i = 0; i < a->size(); ++i) {
      const json &e = (*a)[i];
      std::string p = fmt::format("{}.{}[{}]", path, key, i);
      if (!e.is_array() || e.size() < 2 || e.size() > 4 ||
          !e[0].is_number_integer())
        return fail(p, "expected [from, c0, c1, ...] with 1 to 3 "
                       "coefficients");
      PlanPoly::Piece piece;
      piece.from = e[0].get<int64_t>();
      if (piece.from <= last || piece.from < 0)
        return fail(p, "pieces must start at increasing T >= 0");
      last = piece.from;
      for (size_t c = 1; c < e.size(); ++c) {
        if (!e[c].is_number() || !std::isfinite(e[c].get<double>()))
          return fail(p, "coefficients must be finite numbers");
        piece.c.push_back(e[c].get<double>());
      }
      out.pieces.push_back(std::move(piece));
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

bool readAttrs(Reader &r, const json &obj, const std::string &path,
               std::map<std::string, PlanAttr> &out) {
  const json *attrs = r.field(obj, path, "attrs");
  if (!attrs)
    return false;
  if (!attrs->is_object())
    return r.fail(path + ".attrs", "expected an object");
  for (auto it = attrs->begin(); it != attrs->end(); ++it) {
    PlanAttr a;
    if (!readAttr(r, path + ".attrs." + it.key(), it.value(), a))
      return false;
    out[it.key()] = std::move(a);
  }
  return true;
}

bool readRecipe(Reader &r, const json &obj, const std::string &path,
                Recipe &out) {
  std::string recipe;
  if (!r.str(obj, path, "recipe", recipe))
    return false;
  const RecipeInfo *ri = lookupRecipe(recipe);
  if (!ri)
    return r.fail(path + ".recipe",
                  fmt::format("unknown recipe '{}' (this runtime knows the "
                              "ops of Ops.def)",
                              recipe));
  out = ri->id;
  return true;
}

bool readRefs(Reader &r, const json &obj, const std::string &path,
              const char *key, std::vector<BodyRef> &out) {
  const json *a = r.array(obj, path, key);
  if (!a)
    return false;
  for (size_t i = 0; i < a->size(); ++i) {
    const json &e = (*a)[i];
    std::string p = fmt::format("{}.{}[{}]", path, key, i);
    BodyRef ref;
    bool found = false;
    static const std::pair<const char *, BodyRef::Kind> kKinds[] = {
        {"in", BodyRef::Kind::In},
        {"out", BodyRef::Kind::Out},
        {"tmp", BodyRef::Kind::Tmp}};
    if (e.is_object())
      for (const auto &[name, kind] : kKinds)
        if (e.contains(name)) {
          if (found)
            return r.fail(p, "names more than one of in, out, tmp");
          found = true;
          ref.kind = kind;
          if (!r.index(e[name], p + "." + name, ref.index))
            return false;
        }
    if (!found || e.size() != (e.contains("view") ? 2u : 1u))
      return r.fail(p, "expected {\"in\"|\"out\"|\"tmp\": N} with an "
                       "optional \"view\"");
    if (e.contains("view") && !r.shape(e["view"], p + ".view", ref.view))
      return false;
    out.push_back(std::move(ref));
  }
  return true;
}

/// A launch's "grid", "block" and "shared_bytes" (the code's own and its
/// pre-launch's).
bool readLaunch(Reader &r, const json &c, const std::string &cpath,
                std::vector<PlanDim> &grid, std::vector<int64_t> &block,
                uint64_t &sharedBytes) {
  const json *g = r.field(c, cpath, "grid");
  const json *b = r.array(c, cpath, "block");
  if (!g || !r.shape(*g, cpath + ".grid", grid) || !b ||
      !r.u64(c, cpath, "shared_bytes", sharedBytes))
    return false;
  for (const json &e : *b) {
    if (!e.is_number_integer())
      return r.fail(cpath + ".block", "expected integers");
    block.push_back(e.get<int64_t>());
  }
  return true;
}

bool readCode(Reader &r, const json &c, const std::string &cpath,
              PlanCode &code) {
  const json *args = r.array(c, cpath, "args");
  if (!r.str(c, cpath, "module", code.module) ||
      !r.str(c, cpath, "symbol", code.symbol) ||
      !readLaunch(r, c, cpath, code.grid, code.block, code.sharedBytes) ||
      !args)
    return false;
  for (const json &e : *args) {
    if (!e.is_string())
      return r.fail(cpath + ".args", "expected strings");
    code.args.push_back(e.get<std::string>());
  }
  if (c.contains("tensor_maps")) {
    const json *maps = r.array(c, cpath, "tensor_maps");
    if (!maps)
      return false;
    for (size_t i = 0; i < maps->size(); ++i) {
      const json &m = (*maps)[i];
      std::string mpath = fmt::format("{}.tensor_maps[{}]", cpath, i);
      if (!m.is_object())
        return r.fail(mpath, "expected an object");
      PlanTensorMap tm;
      const json *op = r.field(m, mpath, "operand");
      if (!op)
        return false;
      if (!op->is_object() || op->size() != 1 ||
          !(op->contains("buffer") || op->contains("weight") ||
            op->contains("workspace")))
        return r.fail(mpath + ".operand",
                      "expected {\"buffer\": N}, {\"weight\": N} or "
                      "{\"workspace\": 0}");
      tm.operand.isWeight = op->contains("weight");
      tm.workspace = op->contains("workspace");
      if (!r.index(op->begin().value(), mpath + ".operand", tm.operand.index))
        return false;
      if (tm.workspace && tm.operand.index != 0)
        return r.fail(mpath + ".operand", "a workspace operand is 0");
      std::string dtype;
      uint64_t swizzle = 0;
      const json *dims = r.field(m, mpath, "dims");
      const json *strides = r.array(m, mpath, "strides");
      const json *box = r.array(m, mpath, "box");
      if (!r.u64(m, mpath, "offset", tm.offset) ||
          !r.str(m, mpath, "dtype", dtype) || !dims ||
          !r.shape(*dims, mpath + ".dims", tm.dims) || !strides || !box ||
          !r.u64(m, mpath, "swizzle", swizzle))
        return false;
      auto dt = planDTypeFromName(dtype);
      if (!dt)
        return r.fail(mpath + ".dtype",
                      fmt::format("unknown dtype '{}'", dtype));
      tm.dtype = *dt;
      tm.swizzle = static_cast<uint32_t>(std::min<uint64_t>(swizzle, 1u << 30));
      for (const json &e : *strides) {
        if (!e.is_number_unsigned())
          return r.fail(mpath + ".strides", "expected non-negative integers");
        tm.strides.push_back(e.get<uint64_t>());
      }
      for (const json &e : *box) {
        if (!e.is_number_unsigned() || e.get<uint64_t>() > 0xffffffffu)
          return r.fail(mpath + ".box", "expected non-negative integers");
        tm.box.push_back(static_cast<uint32_t>(e.get<uint64_t>()));
      }
      code.tensorMaps.push_back(std::move(tm));
    }
  }
  if (c.contains("pre")) {
    const json &p = c["pre"];
    std::string ppath = cpath + ".pre";
    if (!p.is_object())
      return r.fail(ppath, "expected an object");
    PlanPreLaunch pre;
    if (!r.str(p, ppath, "symbol", pre.symbol) ||
        !readLaunch(r, p, ppath, pre.grid, pre.block, pre.sharedBytes))
      return false;
    code.pre = std::move(pre);
  }
  if (c.contains("workspace_bytes")) {
    std::vector<PlanDim> ws;
    if (!r.shape(json::array({c["workspace_bytes"]}),
                 cpath + ".workspace_bytes", ws))
      return false;
    code.workspace = ws[0];
  }
  if (c.contains("int8_inputs")) {
    const json *ins = r.array(c, cpath, "int8_inputs");
    if (!ins)
      return false;
    for (const json &e : *ins) {
      if (!e.is_number_unsigned() || e.get<uint64_t>() > 0xffffffffu)
        return r.fail(cpath + ".int8_inputs",
                      "expected input indices (non-negative integers)");
      code.int8Inputs.push_back(static_cast<uint32_t>(e.get<uint64_t>()));
    }
  }
  if (c.contains("alternates")) {
    const json *alts = r.array(c, cpath, "alternates");
    if (!alts)
      return false;
    for (size_t i = 0; i < alts->size(); ++i) {
      const json &a = (*alts)[i];
      std::string apath = fmt::format("{}.alternates[{}]", cpath, i);
      if (!a.is_object())
        return r.fail(apath, "expected an object");
      if (a.contains("alternates"))
        return r.fail(apath, "an alternate has no alternates");
      PlanCode alt;
      uint64_t minTokens = 0;
      if (!readCode(r, a, apath, alt) ||
          !r.u64(a, apath, "min_tokens", minTokens))
        return false;
      alt.minTokens = static_cast<int64_t>(
          std::min<uint64_t>(minTokens, uint64_t(1) << 40));
      code.alternates.push_back(std::move(alt));
    }
  }
  return true;
}

bool readKernel(Reader &r, const json &k, const std::string &path,
                PlanKernel &pk, int version) {
  if (!k.is_object())
    return r.fail(path, "expected an object");
  if (k.contains("fused") == k.contains("recipe"))
    return r.fail(path, "a kernel has either \"recipe\" (a catalog kernel) "
                        "or \"fused\" (a fused body)");
  if (k.contains("recipe") && !readRecipe(r, k, path, pk.recipe))
    return false;
  if (k.contains("fused") && !r.str(k, path, "fused", pk.fused))
    return false;
  if (k.contains("fused") && pk.fused.empty())
    return r.fail(path + ".fused", "a fused kernel needs a name");
  const json *ins = r.array(k, path, "inputs");
  if (!ins)
    return false;
  for (size_t o = 0; o < ins->size(); ++o) {
    const json &e = (*ins)[o];
    std::string opath = fmt::format("{}.inputs[{}]", path, o);
    PlanOperand op;
    bool isBuf = e.is_object() && e.size() == 1 && e.contains("buffer");
    bool isW = e.is_object() && e.size() == 1 && e.contains("weight");
    bool isS = e.is_object() && e.size() == 1 && e.contains("state");
    if (isS && version < 3)
      return r.fail(opath, fmt::format("a version {} plan has no state "
                                       "operands",
                                       version));
    if (!isBuf && !isW && !isS)
      return r.fail(opath, "expected {\"buffer\": N}, {\"weight\": N} or "
                           "{\"state\": N}");
    op.isWeight = isW;
    op.isState = isS;
    if (!r.index(e[isS ? "state" : isW ? "weight" : "buffer"], opath, op.index))
      return false;
    pk.inputs.push_back(op);
  }
  if (!r.indexList(k, path, "outputs", pk.outputs))
    return false;
  if (k.contains("tied")) {
    const json *t = r.array(k, path, "tied");
    if (!t)
      return false;
    for (size_t i = 0; i < t->size(); ++i) {
      const json &e = (*t)[i];
      if (!e.is_number_integer() || e.get<int64_t>() < -1 ||
          e.get<int64_t>() > INT32_MAX)
        return r.fail(fmt::format("{}.tied[{}]", path, i),
                      "expected an input index or -1");
      pk.tied.push_back(static_cast<int32_t>(e.get<int64_t>()));
    }
  }
  if (!readAttrs(r, k, path, pk.attrs))
    return false;
  if (pk.isFused()) {
    const json *temps = r.array(k, path, "temps");
    if (!temps)
      return false;
    for (size_t i = 0; i < temps->size(); ++i) {
      std::string tpath = fmt::format("{}.temps[{}]", path, i);
      BodyTemp t;
      std::string dtype;
      if (!r.str((*temps)[i], tpath, "dtype", dtype))
        return false;
      auto dt = planDTypeFromName(dtype);
      if (!dt)
        return r.fail(tpath + ".dtype",
                      fmt::format("unknown dtype '{}'", dtype));
      t.dtype = *dt;
      const json *shape = r.field((*temps)[i], tpath, "shape");
      if (!shape || !r.shape(*shape, tpath + ".shape", t.shape))
        return false;
      pk.temps.push_back(std::move(t));
    }
    const json *body = r.array(k, path, "body");
    if (!body)
      return false;
    for (size_t i = 0; i < body->size(); ++i) {
      std::string bpath = fmt::format("{}.body[{}]", path, i);
      const json &b = (*body)[i];
      BodyOp op;
      if (!readRecipe(r, b, bpath, op.recipe) ||
          !readRefs(r, b, bpath, "inputs", op.inputs) ||
          !readRefs(r, b, bpath, "outputs", op.outputs) ||
          !readAttrs(r, b, bpath, op.attrs))
        return false;
      pk.body.push_back(std::move(op));
    }
  } else if (k.contains("temps") || k.contains("body")) {
    return r.fail(path, "only fused kernels have \"temps\" and \"body\"");
  }
  if (k.contains("variant") && !r.str(k, path, "variant", pk.variant))
    return false;
  if (!r.poly(k, path, "bytes", pk.bytes) ||
      !r.poly(k, path, "flops", pk.flops))
    return false;
  if (k.contains("code")) {
    PlanCode code;
    if (!readCode(r, k["code"], path + ".code", code))
      return false;
    pk.code = std::move(code);
  }
  return true;
}

} // namespace

bool planFromJson(const std::string &text, const std::string &name, Plan &p,
                  std::string &error) {
  // The plan read replaces whatever \p p held (a second read into the same
  // plan used to append to its lists).
  p = Plan();
  // Duplicate keys would let the last one win silently; refuse them.
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  json::parser_callback_t noDuplicates = [&](int, json::parse_event_t event,
                                             json &parsed) {
    if (event == json::parse_event_t::object_start) {
      keys.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      if (!keys.empty())
        keys.pop_back();
    } else if (event == json::parse_event_t::key && !keys.empty() &&
               parsed.is_string() &&
               !keys.back().insert(parsed.get<std::string>()).second &&
               duplicate.empty()) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  json j = json::parse(text, noDuplicates, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    error = fmt::format("{}: not valid JSON", name);
    return false;
  }
  if (!duplicate.empty()) {
    error = fmt::format("{}: the key \"{}\" appears twice in one object", name,
                        duplicate);
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
  if (version < kPlanMinVersion || version > kPlanVersion)
    return r.fail("$.version",
                  fmt::format("plan version {} is not supported (this build "
                              "reads versions {} to {}); recompile the plan "
                              "with this build's strata-compile",
                              version, kPlanMinVersion, kPlanVersion));
  p.version = static_cast<int>(version);
  if (!r.str(j, "$", "model", p.model) || !r.str(j, "$", "arch", p.arch) ||
      !r.str(j, "$", "target", p.target) ||
      !r.i64(j, "$", "max_tokens", p.maxTokens))
    return false;
  const json *options = r.field(j, "$", "options");
  if (!options)
    return false;
  if (!options->is_object())
    return r.fail("$.options", "expected an object");
  for (auto it = options->begin(); it != options->end(); ++it)
    if (!r.i64(*options, "$.options", it.key().c_str(), p.options[it.key()]))
      return false;
  const json *metadata = r.field(j, "$", "metadata");
  if (!metadata)
    return false;
  if (!metadata->is_object())
    return r.fail("$.metadata", "expected an object");
  for (auto it = metadata->begin(); it != metadata->end(); ++it)
    if (!r.str(*metadata, "$.metadata", it.key().c_str(), p.metadata[it.key()]))
      return false;
  if (j.contains("roofline")) {
    // Optional: the target's peaks, for strata-run --profile.
    const json &rf = j["roofline"];
    if (!rf.is_object())
      return r.fail("$.roofline", "expected an object");
    std::pair<const char *, double *> fields[] = {
        {"mem_gbs", &p.roofline.memGBs},
        {"vec_tflops", &p.roofline.vecTflops},
        {"mat_tflops", &p.roofline.matTflops}};
    for (auto [name, dst] : fields) {
      if (!rf.contains(name) || !rf[name].is_number() ||
          !std::isfinite(rf[name].get<double>()) || rf[name].get<double>() < 0)
        return r.fail(std::string("$.roofline.") + name,
                      "expected a finite number >= 0");
      *dst = rf[name].get<double>();
    }
  }
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
    const json *shape = r.field(b, path, "shape");
    if (!shape || !r.shape(*shape, path + ".shape", pb.shape))
      return false;
    if (b.contains("view_of")) {
      uint32_t base = 0;
      if (!r.index(b["view_of"], path + ".view_of", base))
        return false;
      pb.viewOf = base;
    }
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
    p.weights.push_back(std::move(pw));
  }

  if (!r.indexList(j, "$", "inputs", p.inputs) ||
      !r.indexList(j, "$", "outputs", p.outputs))
    return false;

  if (j.contains("state")) {
    if (p.version < 3)
      return r.fail("$.state", fmt::format("a version {} plan has no state "
                                           "(state came with version 3)",
                                           p.version));
    const json *states = r.array(j, "$", "state");
    if (!states)
      return false;
    for (size_t i = 0; i < states->size(); ++i) {
      std::string path = fmt::format("$.state[{}]", i);
      const json &e = (*states)[i];
      PlanState st;
      std::string dtype;
      if (!r.str(e, path, "name", st.name) || !r.str(e, path, "dtype", dtype) ||
          !r.u64(e, path, "bytes", st.bytes))
        return false;
      auto dt = planDTypeFromName(dtype);
      if (!dt)
        return r.fail(path + ".dtype",
                      fmt::format("unknown dtype '{}'", dtype));
      st.dtype = *dt;
      const json *shape = r.array(e, path, "shape");
      if (!shape)
        return false;
      if (shape->size() > 8)
        return r.fail(path + ".shape", "more than 8 dims");
      for (const json &d : *shape) {
        if (!d.is_number_unsigned() || d.get<uint64_t>() == 0)
          return r.fail(path + ".shape", "expected positive integers");
        st.shape.push_back(d.get<uint64_t>());
      }
      p.states.push_back(std::move(st));
    }
  }

  const json *ks = r.array(j, "$", "kernels");
  if (!ks)
    return false;
  for (size_t i = 0; i < ks->size(); ++i) {
    PlanKernel pk;
    if (!readKernel(r, (*ks)[i], fmt::format("$.kernels[{}]", i), pk,
                    p.version))
      return false;
    p.kernels.push_back(std::move(pk));
  }
  if (j.contains("synthetic_fill")) {
    PlanCode code;
    if (!readCode(r, j["synthetic_fill"], "$.synthetic_fill", code))
      return false;
    // The runtime launches it with 256 threads and eight 8-byte arguments
    // (SyntheticBlock.h's fill kernel).
    if (code.module.empty() || code.symbol.empty() || code.block.size() != 3 ||
        code.block[0] != 256 || code.block[1] != 1 || code.block[2] != 1 ||
        code.args.size() != 8)
      return r.fail("$.synthetic_fill",
                    "expected a module, a symbol, block [256, 1, 1] and 8 "
                    "arguments");
    p.syntheticFill = std::move(code);
  }
  if (!r.ok())
    return false;
  if (!validatePlan(p, error)) {
    error = fmt::format("{}: {}", name, error);
    return false;
  }
  return true;
}

//===----------------------------------------------------------------------===//
// Validation
//===----------------------------------------------------------------------===//

namespace {

/// Largest arena, buffer or temporary a plan may declare: far beyond any
/// device, and far enough from 2^64 that rounding up cannot wrap.
constexpr uint64_t kMaxBytes = uint64_t(1) << 50;
/// Every buffer offset is a multiple of this (16-byte vector accesses).
constexpr uint64_t kBufferAlign = 16;
/// Largest prompt a plan may be compiled for.
constexpr int64_t kMaxTokens = int64_t(1) << 24;
/// Threads a block may have (CUDA's and HIP's limit).
constexpr int64_t kMaxThreads = 1024;
/// Blocks a grid may have along x, y and z (CUDA's limits; HIP's are wider).
constexpr int64_t kMaxGrid[3] = {(int64_t(1) << 31) - 1, 65535, 65535};
/// Arguments a kernel may take.
constexpr size_t kMaxArgs = 128;
/// States a plan may declare, and its max_context and max_batch options.
constexpr size_t kMaxStates = size_t(1) << 16;
constexpr int64_t kMaxContext = int64_t(1) << 24;
constexpr int64_t kMaxBatch = int64_t(1) << 16;

/// "buffer 3 '%x'".
std::string planBufferName(const Plan &p, uint32_t b) {
  return fmt::format("buffer {} '{}'", b, p.buffers[b].name);
}
/// "kernel 4 (matmul)".
std::string planKernelName(const Plan &p, size_t k) {
  return fmt::format("kernel {} ({})", k, p.kernels[k].label());
}

/// The walk of the memory proof over a plan whose indices are in range.
/// Positions: plan inputs are written at 0, kernel k runs at k + 1, the
/// plan's output is read at kernels.size() + 1. Every buffer read must hold
/// its value: written by a plan input or an earlier kernel (a view holds its
/// base's), once. Records every event in \p live (stale reads and clashes
/// are the caller's to look for); on a violation sets \p why and returns
/// false.
bool walkMemory(const Plan &p, LivenessBuilder &live, std::string &why) {
  const size_t nb = p.buffers.size(), nk = p.kernels.size();
  auto fail = [&](std::string what) {
    why = std::move(what);
    return false;
  };
  // Who wrote each buffer: -1 none yet, -2 the caller (a plan input).
  std::vector<int64_t> writer(nb, -1);
  for (uint32_t b : p.inputs) {
    if (p.buffers[b].viewOf >= 0)
      return fail(fmt::format("plan input {} is a view; the caller fills "
                              "buffers of their own",
                              planBufferName(p, b)));
    if (writer[b] != -1)
      return fail(fmt::format("{} is listed twice as a plan input",
                              planBufferName(p, b)));
    writer[b] = -2;
    live.define(b, 0, p.buffers[b].bytes);
  }
  // A read of buffer b at pos: b, or the base its view shows, must hold a
  // value; a view joins its base's storage set when first read, and reading
  // it reads every buffer down its chain (so a view of a value overwritten
  // in place is a stale read of that value).
  std::function<bool(uint32_t, size_t, const std::string &)> read =
      [&](uint32_t b, size_t pos, const std::string &reader) {
        const PlanBuffer &buf = p.buffers[b];
        if (buf.viewOf >= 0) {
          uint32_t base = static_cast<uint32_t>(buf.viewOf);
          if (!read(base, pos, reader))
            return false;
          if (!live.known(b))
            live.alias(b, base);
        } else if (!live.known(b)) {
          return fail(fmt::format("{} {}, which no plan input or earlier "
                                  "kernel writes; recompile the plan",
                                  reader, planBufferName(p, b)));
        }
        live.use(b, pos);
        return true;
      };
  for (size_t ki = 0; ki < nk; ++ki) {
    const PlanKernel &k = p.kernels[ki];
    const size_t pos = ki + 1;
    for (const PlanOperand &o : k.inputs)
      if (o.isBuffer() && !read(o.index, pos, planKernelName(p, ki) + " reads"))
        return false;
    for (size_t oi = 0; oi < k.outputs.size(); ++oi) {
      uint32_t o = k.outputs[oi];
      if (p.buffers[o].viewOf >= 0)
        return fail(fmt::format("{} writes {}, a view of buffer {}; views "
                                "are never written",
                                planKernelName(p, ki), planBufferName(p, o),
                                p.buffers[o].viewOf));
      if (writer[o] != -1)
        return fail(fmt::format(
            "{} writes {}, which {} wrote already; a buffer holds one value",
            planKernelName(p, ki), planBufferName(p, o),
            writer[o] == -2
                ? std::string("the caller (a plan input)")
                : planKernelName(p, static_cast<size_t>(writer[o]))));
      writer[o] = static_cast<int64_t>(ki);
      int32_t in = oi < k.tied.size() ? k.tied[oi] : -1;
      if (in >= 0)
        live.overwrite(o, k.inputs[in].index, pos);
      else
        live.define(o, pos, p.buffers[o].bytes);
    }
  }
  for (uint32_t o : p.outputs)
    if (!read(o, nk + 1, "the plan's output is"))
      return false;
  return true;
}

class Validator {
public:
  Validator(const Plan &p, std::string &error) : p_(p), error_(error) {}

  bool fail(const std::string &what) {
    error_ = "plan: " + what;
    return false;
  }

  /// Why tensor map \p m cannot be encoded (the driver's rules for
  /// cuTensorMapEncodeTiled, and buffer operands' storage at maxTokens),
  /// or "" when it can.
  std::string tensorMapProblem(const PlanTensorMap &m,
                               const PlanKernel &k) const {
    const size_t rank = m.dims.size();
    if (!m.workspace &&
        (m.operand.isWeight ? m.operand.index >= p_.weights.size()
                            : m.operand.index >= p_.buffers.size()))
      return fmt::format("its operand ({} {}) is out of range",
                         m.operand.isWeight ? "weight" : "buffer",
                         m.operand.index);
    // A map reaches memory: only storage the kernel names as an operand
    // (the memory proof sees those), or its own workspace.
    bool own = m.workspace;
    for (const PlanOperand &o : k.inputs)
      own |= !o.isState && o.isWeight == m.operand.isWeight &&
             o.index == m.operand.index;
    if (!m.operand.isWeight)
      for (uint32_t o : k.outputs)
        own |= o == m.operand.index;
    if (!own)
      return fmt::format("its operand ({} {}) is not one of the kernel's",
                         m.operand.isWeight ? "weight" : "buffer",
                         m.operand.index);
    if (rank < 1 || rank > 5 || m.strides.size() != rank - 1 ||
        m.box.size() != rank)
      return fmt::format("{} dims, {} strides, {} box sizes (1 to 5 dims, "
                         "a stride for each dim after the first, a box size "
                         "for each)",
                         rank, m.strides.size(), m.box.size());
    if (m.dtype != PlanDType::F32 && m.dtype != PlanDType::F16 &&
        m.dtype != PlanDType::BF16 && m.dtype != PlanDType::I32)
      return fmt::format("element type {} (f32, f16, bf16 or i32)",
                         planDTypeName(m.dtype));
    const uint64_t elem = planDTypeSize(m.dtype);
    if (m.offset % 16)
      return fmt::format("offset {} is not a multiple of 16 bytes", m.offset);
    for (uint64_t st : m.strides)
      if (st == 0 || st % 16 || st >= (uint64_t(1) << 40))
        return fmt::format("stride {} is not a positive multiple of 16 "
                           "bytes below 2^40",
                           st);
    for (uint32_t b : m.box)
      if (b < 1 || b > 256)
        return fmt::format("box size {} is outside 1..256", b);
    if (m.box[0] * elem % 16)
      return fmt::format("the box's inner size ({} bytes) is not a "
                         "multiple of 16",
                         m.box[0] * elem);
    if (m.swizzle != 0 && m.swizzle != 32 && m.swizzle != 64 &&
        m.swizzle != 128)
      return fmt::format("swizzle {} (0, 32, 64 or 128 bytes)", m.swizzle);
    if (m.swizzle && m.box[0] * elem > m.swizzle)
      return fmt::format("the box's inner size ({} bytes) exceeds the "
                         "{}-byte swizzle span",
                         m.box[0] * elem, m.swizzle);
    // Dims grow with T: at T = 1 none may be empty, at maxTokens the
    // tensor must fit the driver's range and a buffer's storage.
    unsigned __int128 end = m.offset;
    for (size_t d = 0; d < rank; ++d) {
      const PlanDim &dim = m.dims[d];
      if (!dimWithin(dim, 1, int64_t(1) << 32))
        return fmt::format("dim {} is not within 1..2^32 for every T in "
                           "1..{}",
                           d, p_.maxTokens);
      const uint64_t n = dim.at(std::max<int64_t>(p_.maxTokens, 1));
      end += d == 0 ? n * elem : (n - 1) * (unsigned __int128)m.strides[d - 1];
    }
    if (m.workspace) {
      // The workspace grows with T like the map's dims: bounded at both
      // ends of the range (the sizes are affine in T up to flooring).
      for (int64_t t : {int64_t(1), std::max<int64_t>(p_.maxTokens, 1)}) {
        unsigned __int128 e = m.offset;
        for (size_t d = 0; d < rank; ++d) {
          const uint64_t n = static_cast<uint64_t>(m.dims[d].at(t));
          e +=
              d == 0 ? n * elem : (n - 1) * (unsigned __int128)m.strides[d - 1];
        }
        if (e > k.workspaceBytes(t))
          return fmt::format("it spans {} bytes of the kernel's workspace "
                             "({} bytes at T = {})",
                             static_cast<uint64_t>(e), k.workspaceBytes(t), t);
      }
    } else if (!m.operand.isWeight && end > p_.buffers[m.operand.index].bytes) {
      return fmt::format("it spans {} bytes of buffer {} ({} bytes)",
                         static_cast<uint64_t>(end), m.operand.index,
                         p_.buffers[m.operand.index].bytes);
    }
    return "";
  }

  /// Checks dims and returns the element count at maxTokens, or -1.
  int64_t checkShape(const std::vector<PlanDim> &shape,
                     const std::string &what) {
    unsigned __int128 elems = 1;
    for (size_t d = 0; d < shape.size(); ++d) {
      const PlanDim &dim = shape[d];
      // A divided dim (pooled blocks) may be empty for short prompts.
      if (dim.coef < 0 || dim.coef > (1 << 20) || dim.constant < 0 ||
          dim.constant > (int64_t(1) << 40) || dim.div < 1 ||
          dim.div > (int64_t(1) << 20) ||
          dim.at(p_.maxTokens) < (dim.div > 1 ? 0 : 1)) {
        fail(fmt::format("{}: dim {} is out of range", what, d));
        return -1;
      }
      elems *= static_cast<unsigned __int128>(dim.at(p_.maxTokens));
      if (elems > (static_cast<unsigned __int128>(1) << 48)) {
        fail(fmt::format("{}: too many elements", what));
        return -1;
      }
    }
    if (shape.size() > 8) {
      fail(fmt::format("{}: more than 8 dims", what));
      return -1;
    }
    return static_cast<int64_t>(elems);
  }

  bool checkAttrs(Recipe r, const std::map<std::string, PlanAttr> &attrs,
                  const std::string &what) {
    const std::vector<AttrSpec> &schema = attrSchema(r);
    for (const auto &[name, a] : attrs) {
      const AttrSpec *spec = findAttrSpec(r, name);
      if (!spec)
        return fail(fmt::format("{}: '{}' has no attribute '{}'", what,
                                recipeInfo(r).name, name));
      using K = PlanAttr::Kind;
      const std::string &k = spec->kind;
      bool ok = (k == "int" && a.kind == K::Int) ||
                (k == "float" && (a.kind == K::Float || a.kind == K::Int)) ||
                (k == "bool" && a.kind == K::Bool) ||
                ((k == "str" || k == "type") && a.kind == K::Str) ||
                (k == "ints" && a.kind == K::Ints) ||
                (k == "floats" && (a.kind == K::Floats || a.kind == K::Ints));
      if (a.kind == K::Float && !std::isfinite(a.f))
        ok = false;
      for (double f : a.floats)
        ok = ok && std::isfinite(f);
      if (!ok)
        return fail(fmt::format("{}: attribute '{}' must be a finite {}", what,
                                name, k));
      bool inRange = a.kind == K::Int     ? spec->inRange(a.i)
                     : a.kind == K::Float ? spec->inRange(a.f)
                                          : true;
      for (int64_t v : a.ints)
        inRange = inRange && spec->inRange(v);
      for (double v : a.floats)
        inRange = inRange && spec->inRange(v);
      if (!inRange)
        return fail(fmt::format("{}: attribute '{}' of '{}' must lie in {}",
                                what, name, recipeInfo(r).name,
                                spec->rangeStr()));
    }
    for (const AttrSpec &s : schema)
      if (!s.optional && !attrs.count(s.name))
        return fail(fmt::format("{}: '{}' needs attribute '{}'", what,
                                recipeInfo(r).name, s.name));
    return true;
  }

  bool checkArity(Recipe r, size_t nin, size_t nout, const std::string &what) {
    if (static_cast<size_t>(r) >= allRecipes().size())
      return fail(fmt::format("{}: unknown recipe", what));
    const RecipeInfo &ri = recipeInfo(r);
    if (!arityAccepts(ri, nin) || static_cast<int>(nout) != planOutputs(ri))
      return fail(fmt::format("{} ({}) takes {}..{} inputs and {} outputs, "
                              "got {} and {}",
                              what, ri.name, ri.minInputs,
                              ri.maxInputs < 0 ? std::string("any")
                                               : std::to_string(ri.maxInputs),
                              planOutputs(ri), nin, nout));
    return true;
  }

  /// Element count of the tensor \p ref names inside kernel \p k.
  int64_t refElements(const PlanKernel &k, const BodyRef &ref) {
    switch (ref.kind) {
    case BodyRef::Kind::In: {
      const PlanOperand &o = k.inputs[ref.index];
      if (o.isWeight) {
        int64_t n = 1;
        for (uint64_t d : p_.weights[o.index].dims)
          n *= static_cast<int64_t>(d);
        return n;
      }
      return p_.buffers[o.index].numElements(p_.maxTokens);
    }
    case BodyRef::Kind::Out:
      return p_.buffers[k.outputs[ref.index]].numElements(p_.maxTokens);
    case BodyRef::Kind::Tmp: {
      int64_t n = 1;
      for (const PlanDim &d : k.temps[ref.index].shape)
        n *= d.at(p_.maxTokens);
      return n;
    }
    }
    return -1;
  }

  bool checkBody(const PlanKernel &k, const std::string &what) {
    for (size_t t = 0; t < k.temps.size(); ++t) {
      int64_t n =
          checkShape(k.temps[t].shape, fmt::format("{} temporary {}", what, t));
      if (n < 0)
        return false;
      if (k.temps[t].bytes(p_.maxTokens) > kMaxBytes)
        return fail(fmt::format("{} temporary {} is too large", what, t));
    }
    // The workspace holds them all, each 256-byte aligned
    // (PlanKernel::workspaceBytes): their sum is capped too, summed
    // without wrapping.
    uint64_t sum = 0;
    for (size_t t = 0; t < k.temps.size(); ++t) {
      std::optional<uint64_t> a =
          checkedAlignUp(k.temps[t].bytes(p_.maxTokens), 256);
      std::optional<uint64_t> next = a ? checkedAdd(sum, *a) : std::nullopt;
      if (!next || *next > kMaxBytes)
        return fail(fmt::format("{}: its temporaries need more than 2^50 "
                                "bytes together (at temporary {})",
                                what, t));
      sum = *next;
    }
    if (k.body.empty())
      return fail(what + ": a fused kernel needs a body");
    std::vector<bool> tmpWritten(k.temps.size(), false),
        outWritten(k.outputs.size(), false);
    for (size_t i = 0; i < k.body.size(); ++i) {
      const BodyOp &op = k.body[i];
      std::string where = fmt::format("{} body op {}", what, i);
      if (!checkArity(op.recipe, op.inputs.size(), op.outputs.size(), where) ||
          !checkAttrs(op.recipe, op.attrs, where))
        return false;
      auto checkRef = [&](const BodyRef &ref, bool isOutput) {
        size_t limit = ref.kind == BodyRef::Kind::In    ? k.inputs.size()
                       : ref.kind == BodyRef::Kind::Out ? k.outputs.size()
                                                        : k.temps.size();
        if (ref.index >= limit)
          return fail(fmt::format("{} names {} {}, which does not exist", where,
                                  ref.kind == BodyRef::Kind::In    ? "input"
                                  : ref.kind == BodyRef::Kind::Out ? "output"
                                                                   : "temp",
                                  ref.index));
        if (isOutput && ref.kind == BodyRef::Kind::In)
          return fail(where + " writes a kernel input; fused bodies write "
                              "outputs and temporaries");
        if (!isOutput && ref.kind == BodyRef::Kind::Tmp &&
            !tmpWritten[ref.index])
          return fail(fmt::format("{} reads temporary {} before any body op "
                                  "writes it",
                                  where, ref.index));
        if (!isOutput && ref.kind == BodyRef::Kind::Out &&
            !outWritten[ref.index])
          return fail(fmt::format("{} reads output {} before any body op "
                                  "writes it",
                                  where, ref.index));
        if (!ref.view.empty()) {
          int64_t n = checkShape(ref.view, where + " view");
          if (n < 0)
            return false;
          if (n != refElements(k, ref))
            return fail(where + " views a tensor with another element count");
        }
        return true;
      };
      for (const BodyRef &ref : op.inputs)
        if (!checkRef(ref, false))
          return false;
      for (const BodyRef &ref : op.outputs) {
        if (!checkRef(ref, true))
          return false;
        (ref.kind == BodyRef::Kind::Tmp ? tmpWritten : outWritten)[ref.index] =
            true;
      }
    }
    for (size_t o = 0; o < outWritten.size(); ++o)
      if (!outWritten[o])
        return fail(fmt::format("{}: no body op writes output {}", what, o));
    return true;
  }

  /// The plan's states: named once, f32, bf16 or i8 (stateBytes), dims and
  /// sizes capped and their sum too, with max_context and max_batch.
  bool checkStates() {
    if (p_.states.empty())
      return true;
    if (p_.version < 3)
      return fail(fmt::format("a version {} plan has no state", p_.version));
    if (p_.states.size() > kMaxStates)
      return fail(
          fmt::format("{} states, at most {}", p_.states.size(), kMaxStates));
    for (const char *opt : {"max_context", "max_batch"}) {
      auto it = p_.options.find(opt);
      int64_t cap = std::string(opt) == "max_context" ? kMaxContext : kMaxBatch;
      if (it == p_.options.end() || it->second < 1 || it->second > cap)
        return fail(fmt::format("a plan with state needs the option '{}' in "
                                "1..{}",
                                opt, cap));
    }
    std::set<std::string> names;
    uint64_t sum = 0;
    for (size_t i = 0; i < p_.states.size(); ++i) {
      const PlanState &st = p_.states[i];
      std::string what = fmt::format("state {} '{}'", i, st.name);
      if (st.name.empty() || !names.insert(st.name).second)
        return fail(fmt::format("{}: a state needs a name of its own", what));
      if (!isStateDType(st.dtype))
        return fail(fmt::format("{} is {}; states are f32, bf16 or i8", what,
                                planDTypeName(st.dtype)));
      if (st.shape.empty() || st.shape.size() > 8)
        return fail(fmt::format("{} has {} dims, expected 1..8", what,
                                st.shape.size()));
      std::optional<uint64_t> n = stateBytes(st.dtype, st.shape);
      if (!n && st.dtype == DType::I8 && st.shape.back() % 4 != 0)
        return fail(fmt::format("{} is i8 with rows of {} values; an i8 "
                                "state's last dim is a multiple of 4",
                                what, st.shape.back()));
      if (!n || *n > kMaxBytes)
        return fail(fmt::format("{} is larger than 2^50 bytes (or has an "
                                "empty dim)",
                                what));
      if (st.bytes != *n)
        return fail(fmt::format("{} has {} bytes, but its shape and dtype "
                                "need {}",
                                what, st.bytes, *n));
      std::optional<uint64_t> next = checkedAdd(sum, *n);
      if (!next || *next > kMaxBytes)
        return fail(fmt::format("the states need more than 2^50 bytes "
                                "together (at {})",
                                what));
      sum = *next;
    }
    return true;
  }

  /// State operands: a State-class recipe writes a state given as its
  /// input 0 (and lists no output for it); `state` itself is no kernel;
  /// fused kernels neither take nor write states.
  bool checkStateUse(const PlanKernel &k, const std::string &what) {
    bool anyState = false;
    for (const PlanOperand &o : k.inputs)
      anyState |= o.isState;
    if (k.isFused()) {
      if (anyState)
        return fail(fmt::format("{} is fused and takes a state; fused kernels "
                                "read and write arena buffers only",
                                what));
      for (const BodyOp &op : k.body)
        if (op.recipe == Recipe::State ||
            recipeInfo(op.recipe).cls == OpClass::State)
          return fail(fmt::format("{}: '{}' in a fused body (states are "
                                  "written by kernels of their own)",
                                  what, recipeInfo(op.recipe).name));
      return true;
    }
    if (recipeInfo(k.recipe).cls == OpClass::State &&
        (k.inputs.empty() || !k.inputs[0].isState))
      return fail(fmt::format("{} writes its input 0 in place, which must be "
                              "a state ({{\"state\": N}})",
                              what));
    return true;
  }

  bool run() {
    target_ = lookupPlanTarget(p_.target);
    if (!target_)
      return fail(fmt::format("target '{}' is not one this build knows ({})",
                              p_.target, planTargetNames()));
    if (p_.maxTokens < 1 || p_.maxTokens > kMaxTokens)
      return fail(
          fmt::format("max_tokens is {}, expected 1 .. 2^24", p_.maxTokens));
    if (p_.arenaBytes > kMaxBytes)
      return fail(fmt::format("the arena of {} bytes is larger than 2^50",
                              p_.arenaBytes));
    if (p_.version < kPlanMinVersion || p_.version > kPlanVersion)
      return fail(fmt::format("version {} (this build knows {} to {})",
                              p_.version, kPlanMinVersion, kPlanVersion));
    if (!checkStates())
      return false;
    for (size_t i = 0; i < p_.buffers.size(); ++i)
      if (!checkBuffer(i))
        return false;
    for (const PlanWeight &w : p_.weights) {
      if (w.dims.empty() || w.dims.size() > 4)
        return fail(fmt::format("weight '{}' has {} dims, expected 1..4",
                                w.name, w.dims.size()));
      unsigned __int128 n = 1;
      for (uint64_t d : w.dims) {
        n *= d;
        if (d == 0 || n > (static_cast<unsigned __int128>(1) << 48))
          return fail(fmt::format("weight '{}' has an invalid shape", w.name));
      }
    }
    for (const std::vector<uint32_t> *list : {&p_.inputs, &p_.outputs})
      for (uint32_t b : *list)
        if (b >= p_.buffers.size())
          return fail(fmt::format("input/output buffer {} does not exist", b));
    if (p_.inputs.empty() || p_.outputs.empty())
      return fail("needs an input buffer (the tokens) and an output buffer");
    // With state the rows come with their positions and slots.
    if (!p_.states.empty() && p_.inputs.size() != 3)
      return fail(fmt::format("a plan with state has three inputs (tokens, "
                              "positions, slots), not {}",
                              p_.inputs.size()));
    for (size_t i = 0; i < (p_.states.empty() ? 1 : 3); ++i) {
      const PlanBuffer &in = p_.buffers[p_.inputs[i]];
      if (in.dtype != DType::I32 || in.numElements(1) != 1 ||
          in.numElements(p_.maxTokens) != p_.maxTokens)
        return fail(fmt::format("the input buffer '{}'{} must be i32 [T]",
                                in.name,
                                i == 0   ? ""
                                : i == 1 ? " (the positions)"
                                         : " (the slots)"));
    }
    if (p_.syntheticFill && !target_->gpu)
      return fail(fmt::format("a '{}' plan has no synthetic_fill code (only "
                              "GPU plans carry generated code)",
                              p_.target));
    for (size_t ki = 0; ki < p_.kernels.size(); ++ki)
      if (!checkKernel(ki))
        return false;
    if (!proveMemory())
      return false;
    DType od = p_.buffers[p_.outputs[0]].dtype;
    if (od != DType::F32 && od != DType::F16 && od != DType::BF16)
      return fail(fmt::format("the output buffer '{}' must be f32, f16 or "
                              "bf16",
                              p_.buffers[p_.outputs[0]].name));
    // The greedy ids (strata-compile --greedy-ids): one i32 a logits row.
    if (p_.outputs.size() > 2)
      return fail(fmt::format("{} outputs; a plan returns its logits and at "
                              "most their greedy ids",
                              p_.outputs.size()));
    if (p_.outputs.size() == 2) {
      const PlanBuffer &ids = p_.buffers[p_.outputs[1]];
      const PlanBuffer &lg = p_.buffers[p_.outputs[0]];
      if (ids.dtype != DType::I32 || lg.shape.size() != 2 ||
          ids.shape.size() != 1 || !(ids.shape[0] == lg.shape[0]))
        return fail(fmt::format("the second output '{}' must be i32 [rows] "
                                "of the logits '{}' [rows, vocab] (their "
                                "greedy ids)",
                                ids.name, lg.name));
    }
    return true;
  }

private:
  std::string bufferName(uint32_t b) const { return planBufferName(p_, b); }
  std::string kernelName(size_t k) const { return planKernelName(p_, k); }

  bool checkBuffer(size_t i) {
    const PlanBuffer &b = p_.buffers[i];
    std::string what = fmt::format("buffer {} '{}'", i, b.name);
    int64_t n = checkShape(b.shape, what);
    if (n < 0)
      return false;
    // i8 is a state dtype (the int8 KV cache): no kernel stores it.
    if (b.dtype == DType::I8)
      return fail(fmt::format("{} is i8; i8 is a state dtype only", what));
    uint64_t want = static_cast<uint64_t>(n) * planDTypeSize(b.dtype);
    if (b.bytes != want)
      return fail(fmt::format("{} has {} bytes, but its shape and dtype need "
                              "{}",
                              what, b.bytes, want));
    // Typed and vector accesses need aligned buffers (plan-memory places
    // them on 256-byte boundaries).
    if (b.offset % kBufferAlign != 0)
      return fail(fmt::format("{}: offset {} is not a multiple of {}", what,
                              b.offset, kBufferAlign));
    if (!inBounds(b.offset, b.bytes, p_.arenaBytes))
      return fail(fmt::format(
          "{}: bytes [{}, {}) lie outside the arena of "
          "{} bytes",
          what, b.offset, static_cast<unsigned __int128>(b.offset) + b.bytes,
          p_.arenaBytes));
    if (b.viewOf >= 0) {
      if (static_cast<size_t>(b.viewOf) >= i)
        return fail(fmt::format("{} is a view of buffer {}, which is not an "
                                "earlier buffer",
                                what, b.viewOf));
      const PlanBuffer &base = p_.buffers[b.viewOf];
      if (base.offset != b.offset || base.bytes != b.bytes)
        return fail(fmt::format("{} is a view of {} but does not share its "
                                "storage (offset {} and {} bytes, the base "
                                "has {} and {})",
                                what, bufferName(b.viewOf), b.offset, b.bytes,
                                base.offset, base.bytes));
    }
    return true;
  }

  /// floor(coef*t / div) + constant without overflow (the dims' caps keep
  /// it far inside 128 bits).
  static __int128 dimAt(const PlanDim &d, int64_t t) {
    __int128 n = static_cast<__int128>(d.coef) * t, q = n / d.div;
    if (q * d.div > n)
      --q;
    return q + d.constant;
  }
  /// A launch or size dimension as a function of T: coef >= 0 (so it grows
  /// with T and its extremes are at T = 1 and max_tokens), |constant| and
  /// coef below 2^40, div in 1..2^20, and its value within [lo, hi] for
  /// every T in 1..max_tokens.
  bool dimWithin(const PlanDim &d, __int128 lo, __int128 hi) const {
    constexpr int64_t kCap = int64_t(1) << 40;
    if (d.coef < 0 || d.coef > kCap || d.constant < -kCap ||
        d.constant > kCap || d.div < 1 || d.div > (int64_t(1) << 20))
      return false;
    return dimAt(d, 1) >= lo && dimAt(d, p_.maxTokens) <= hi;
  }

  bool checkLaunch(const std::vector<PlanDim> &grid,
                   const std::vector<int64_t> &block, uint64_t sharedBytes,
                   const std::string &what, const char *which) {
    int64_t threads = 1;
    for (int64_t b : block)
      threads *= (b >= 1 && b <= kMaxThreads) ? b : 0;
    if (grid.size() != 3 || block.size() != 3 || threads < 1 ||
        threads > kMaxThreads)
      return fail(fmt::format("{}: {} needs a grid of 3 dims and a block of "
                              "3 sizes of 1..{} threads in all",
                              what, which, kMaxThreads));
    for (size_t d = 0; d < 3; ++d)
      if (!dimWithin(grid[d], 0, kMaxGrid[d]))
        return fail(fmt::format(
            "{}: {} grid dim {} is not within 0..{} for "
            "every T in 1..{}",
            what, which, d, static_cast<int64_t>(kMaxGrid[d]), p_.maxTokens));
    if (sharedBytes > target_->sharedPerBlock)
      return fail(fmt::format("{}: {} asks for {} bytes of shared memory, "
                              "more than a block has on {} ({})",
                              what, which, sharedBytes, p_.target,
                              target_->sharedPerBlock));
    return true;
  }

  /// A kernel argument names storage the kernel owns: its own buffer
  /// operands (inputs or outputs), weights it reads, its workspace, T or
  /// one of its tensor maps. Anything else would reach memory the memory
  /// proof does not see.
  bool checkArg(const std::string &a, const PlanKernel &k, const PlanCode &c,
                const std::string &what) {
    if (a == "T" || a == "workspace")
      return true;
    auto number = [](const std::string &s) -> std::optional<uint64_t> {
      if (s.empty() || s.size() > 9 ||
          s.find_first_not_of("0123456789") != std::string::npos)
        return std::nullopt;
      return std::stoull(s);
    };
    for (const char *prefix : {"buffer:", "weight:", "tmap:", "state:"}) {
      const std::string pre = prefix;
      if (a.rfind(pre, 0) != 0)
        continue;
      std::optional<uint64_t> n = number(a.substr(pre.size()));
      bool ok = false;
      if (n && pre == "tmap:") {
        ok = *n < c.tensorMaps.size();
      } else if (n && pre == "state:") {
        for (const PlanOperand &o : k.inputs)
          ok |= o.isState && o.index == *n;
      } else if (n) {
        bool weight = pre == "weight:";
        for (const PlanOperand &o : k.inputs)
          ok |= !o.isState && o.isWeight == weight && o.index == *n;
        if (!weight)
          for (uint32_t o : k.outputs)
            ok |= o == *n;
      }
      if (!ok)
        return fail(fmt::format("{}: argument '{}' names no {} of the kernel",
                                what, a,
                                pre == "tmap:" ? "tensor map" : "operand"));
      return true;
    }
    return fail(fmt::format("{}: unknown argument '{}' (buffer:N, weight:N, "
                            "state:N, workspace, T or tmap:N)",
                            what, a));
  }

  bool checkCode(const PlanKernel &k, const PlanCode &c,
                 const std::string &what) {
    if (c.module.empty() || c.symbol.empty())
      return fail(what + ": its target code needs a module and a symbol");
    if (!checkLaunch(c.grid, c.block, c.sharedBytes, what, "its launch"))
      return false;
    if (c.pre && c.pre->symbol.empty())
      return fail(what + ": its pre-launch needs a symbol");
    if (c.pre && !checkLaunch(c.pre->grid, c.pre->block, c.pre->sharedBytes,
                              what, "its pre-launch"))
      return false;
    if (!dimWithin(c.workspace, 0, static_cast<__int128>(kMaxBytes)) ||
        c.workspace.constant < 0)
      return fail(fmt::format("{}: its code's workspace is not a "
                              "non-negative function of T of at most 2^50 "
                              "bytes at max_tokens ({})",
                              what, p_.maxTokens));
    if (!c.tensorMaps.empty() && !target_->tensorMaps)
      return fail(fmt::format("{}: tensor maps are for targets with a "
                              "tensor memory accelerator (sm_90), not '{}'",
                              what, p_.target));
    for (size_t m = 0; m < c.tensorMaps.size(); ++m)
      if (std::string why = tensorMapProblem(c.tensorMaps[m], k); !why.empty())
        return fail(fmt::format("{}: tensor map {}: {}", what, m, why));
    // int8 activations are read from buffers of floats, 8 a scale.
    for (uint32_t i : c.int8Inputs) {
      const PlanOperand *o = i < k.inputs.size() ? &k.inputs[i] : nullptr;
      if (!o || !o->isBuffer() ||
          (p_.buffers[o->index].dtype != PlanDType::F32 &&
           p_.buffers[o->index].dtype != PlanDType::BF16 &&
           p_.buffers[o->index].dtype != PlanDType::F16))
        return fail(fmt::format("{}: int8 input {} is not a float buffer "
                                "input of the kernel",
                                what, i));
    }
    if (c.args.size() > kMaxArgs)
      return fail(fmt::format("{}: {} arguments, at most {}", what,
                              c.args.size(), kMaxArgs));
    for (const std::string &a : c.args)
      if (!checkArg(a, k, c, what))
        return false;
    // A code that is handed an output neither as a pointer nor through a
    // tensor map cannot write it (an alternate whose arguments were left
    // out launched with none).
    auto reaches = [&](uint32_t o) {
      if (std::find(c.args.begin(), c.args.end(),
                    fmt::format("buffer:{}", o)) != c.args.end())
        return true;
      for (size_t m = 0; m < c.tensorMaps.size(); ++m)
        if (!c.tensorMaps[m].operand.isWeight &&
            c.tensorMaps[m].operand.index == o &&
            std::find(c.args.begin(), c.args.end(),
                      fmt::format("tmap:{}", m)) != c.args.end())
          return true;
      return false;
    };
    for (uint32_t o : k.outputs)
      if (!reaches(o))
        return fail(fmt::format("{}: its code '{}' takes no argument for the "
                                "output {}, so it cannot write it",
                                what, c.symbol, bufferName(o)));
    return true;
  }

  bool checkKernel(size_t ki) {
    const PlanKernel &k = p_.kernels[ki];
    std::string what = fmt::format("kernel {}", ki);
    if (!k.isFused() && k.recipe == Recipe::State)
      return fail(fmt::format("{} (state): 'state' is not a kernel (a plan "
                              "lists its states under \"state\")",
                              what));
    if (k.isFused()) {
      if (!checkAttrsFree(k, what))
        return false;
    } else if (!checkArity(k.recipe, k.inputs.size(), k.outputs.size(), what) ||
               !checkAttrs(k.recipe, k.attrs, what)) {
      return false;
    }
    what = kernelName(ki);
    for (const PlanOperand &o : k.inputs) {
      if (o.isState && o.isWeight)
        return fail(fmt::format("{} names an input that is both a weight and "
                                "a state",
                                what));
      size_t limit = o.isState    ? p_.states.size()
                     : o.isWeight ? p_.weights.size()
                                  : p_.buffers.size();
      if (o.index >= limit)
        return fail(fmt::format("{} reads {} {}, which does not exist", what,
                                o.isState    ? "state"
                                : o.isWeight ? "weight"
                                             : "buffer",
                                o.index));
    }
    if (!checkStateUse(k, what))
      return false;
    for (uint32_t o : k.outputs)
      if (o >= p_.buffers.size())
        return fail(
            fmt::format("{} writes buffer {}, which does not exist", what, o));
    if (k.isFused() && !checkBody(k, what))
      return false;
    if (!k.tied.empty() && !k.isFused())
      return fail(fmt::format("{} ties outputs to inputs, which only fused "
                              "kernels do",
                              what));
    if (!k.tied.empty() && k.tied.size() != k.outputs.size())
      return fail(fmt::format("{} ties {} outputs, it has {}", what,
                              k.tied.size(), k.outputs.size()));
    for (size_t o = 0; o < k.tied.size(); ++o) {
      int32_t in = k.tied[o];
      if (in < 0)
        continue;
      if (static_cast<size_t>(in) >= k.inputs.size() ||
          !k.inputs[in].isBuffer())
        return fail(fmt::format("{}: output {} is tied to input {}, which "
                                "is not a buffer input",
                                what, o, in));
      const PlanBuffer &ib = p_.buffers[k.inputs[in].index];
      const PlanBuffer &ob = p_.buffers[k.outputs[o]];
      if (ib.offset != ob.offset || ib.bytes != ob.bytes ||
          ib.dtype != ob.dtype)
        return fail(fmt::format("{}: output {} is tied to input {} but "
                                "does not share its storage",
                                what, o, in));
    }
    if (!k.code)
      return true;
    if (!target_->gpu)
      return fail(fmt::format("{} carries generated code, but a '{}' plan "
                              "runs on the CPU reference backend (only GPU "
                              "plans carry code)",
                              what, p_.target));
    const PlanCode &base = *k.code;
    int64_t prevMin = 1;
    for (const PlanCode &a : base.alternates) {
      if (a.minTokens <= prevMin || a.minTokens > p_.maxTokens)
        return fail(fmt::format(
            "{}: an alternate's min_tokens {} is not above the previous "
            "({}) and within max_tokens ({})",
            what, a.minTokens, prevMin, p_.maxTokens));
      prevMin = a.minTokens;
    }
    for (size_t ci = 0; ci <= base.alternates.size(); ++ci) {
      const PlanCode &c = ci == 0 ? base : base.alternates[ci - 1];
      if (!checkCode(k, c,
                     ci == 0 ? what
                             : fmt::format("{} (alternate {}, T >= {})", what,
                                           ci - 1, c.minTokens)))
        return false;
    }
    return true;
  }

  /// The memory proof (walkMemory, then the liveness checks).
  bool proveMemory() {
    const size_t nk = p_.kernels.size();
    LivenessBuilder live(p_.buffers.size());
    std::string why;
    if (!walkMemory(p_, live, why))
      return fail(why);
    auto reader = [&](size_t pos) {
      return pos > nk ? std::string("the plan's output") : kernelName(pos - 1);
    };
    if (std::optional<StaleRead> s = live.staleRead())
      return fail(fmt::format("{} writes {} in place over {}, which {} reads "
                              "after it; recompile the plan",
                              kernelName(s->overwrittenAt - 1),
                              bufferName(s->overwriter), bufferName(s->value),
                              reader(s->readAt)));
    const std::vector<LiveSet> &sets = live.sets();
    std::vector<uint64_t> offsets;
    for (const LiveSet &s : sets)
      offsets.push_back(p_.buffers[s.values[0]].offset);
    std::optional<LiveClash> c = findLiveClash(sets, offsets);
    if (!c)
      return true;
    const LiveSet &x = sets[c->first], &y = sets[c->second];
    uint32_t bx = x.values[0], by = y.values[0];
    auto range = [&](uint32_t b) {
      return fmt::format("[{}, {})", p_.buffers[b].offset,
                         p_.buffers[b].offset + p_.buffers[b].bytes);
    };
    if (y.start == 0)
      return fail(fmt::format("plan inputs {} {} and {} {} overlap",
                              bufferName(bx), range(bx), bufferName(by),
                              range(by)));
    if (x.start == y.start)
      return fail(fmt::format("{} writes {} {} and {} {}, which overlap; "
                              "recompile the plan",
                              kernelName(y.start - 1), bufferName(bx),
                              range(bx), bufferName(by), range(by)));
    return fail(fmt::format("{} writes {} {} over bytes of {} {}, which {} "
                            "still reads; recompile the plan",
                            kernelName(y.start - 1), bufferName(by), range(by),
                            bufferName(bx), range(bx), reader(x.end)));
  }

  /// A fused kernel's own attributes are free-form (its body ops carry the
  /// schema-checked ones) but must be finite.
  bool checkAttrsFree(const PlanKernel &k, const std::string &what) {
    for (const auto &[name, a] : k.attrs)
      if (a.kind == PlanAttr::Kind::Float && !std::isfinite(a.f))
        return fail(
            fmt::format("{}: attribute '{}' is not finite", what, name));
    return true;
  }

  const Plan &p_;
  std::string &error_;
  const PlanTarget *target_ = nullptr;
};

} // namespace

bool validatePlan(const Plan &plan, std::string &error) {
  return Validator(plan, error).run();
}

std::vector<LiveSet> planLiveSets(const Plan &plan) {
  LivenessBuilder live(plan.buffers.size());
  std::string why;
  walkMemory(plan, live, why);
  return live.sets();
}

bool writePlanDir(const std::string &dir, const Plan &plan,
                  std::string &error) {
  struct stat st;
  bool created = false;
  if (::stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) {
      error = fmt::format("{}: exists and is not a directory", dir);
      return false;
    }
  } else if (::mkdir(dir.c_str(), 0777) != 0) {
    error = fmt::format("{}: cannot create the plan directory", dir);
    return false;
  } else {
    created = true;
  }
  if (writeFileAtomic(dir + "/plan.json", planToJson(plan), error))
    return true;
  // Nothing half-written: a directory made for this plan goes again.
  if (created)
    ::rmdir(dir.c_str());
  return false;
}

bool readPlanDir(const std::string &dir, Plan &plan, std::string &error) {
  std::string text;
  std::string path = dir + "/plan.json";
  if (!readWholeFile(path, size_t(256) << 20, text, error))
    return false;
  return planFromJson(text, path, plan, error);
}

bool checkPlanMetadata(const Plan &plan, const ModelInfo &model,
                       std::string &error) {
  if (model.architecture() != plan.arch) {
    error = fmt::format("{} is a '{}' model, the plan was compiled for '{}'; "
                        "recompile the plan",
                        model.source, escapeBytes(model.architecture()),
                        escapeBytes(plan.arch));
    return false;
  }
  for (const auto &[key, value] : plan.metadata) {
    const MetaValue *v = model.findMeta(key);
    std::string have = v ? v->toString(SIZE_MAX) : "(absent)";
    if (have == value)
      continue;
    auto brief = [](const std::string &s) {
      return s.size() > 80 ? s.substr(0, 77) + "..." : s;
    };
    error = fmt::format("metadata '{}' is {} in {}, the plan was compiled "
                        "with {}; recompile the plan",
                        key, v ? brief(have) : "missing", model.source,
                        brief(value));
    return false;
  }
  return true;
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
