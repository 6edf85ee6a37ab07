//===- KernelEmitter.cpp - operand model, dispatch, translation units -----===//
#include "codegen/CachedKernel.h"
#include "codegen/EmitterImpl.h"

#include "runtime/format/GgmlType.h"

#include <algorithm>
#include <cstring>

namespace strata::codegen {

namespace {
// The device headers, embedded at build time (codegen/EmbedText.cmake).
#include "codegen/DeviceSources.inc"
} // namespace

namespace detail {

using format::PlanAttr;
using format::Recipe;

Emitter::Emitter(const format::Plan &plan, const format::PlanKernel &kernel,
                 std::string target)
    : plan(plan), kernel(kernel), target(std::move(target)) {
  if (kernel.isFused()) {
    body = kernel.body;
    return;
  }
  // A catalog kernel is a body of one op over the kernel's own operands.
  format::BodyOp op;
  op.recipe = kernel.recipe;
  op.attrs = kernel.attrs;
  for (uint32_t i = 0; i < kernel.inputs.size(); ++i)
    op.inputs.push_back({BodyRef::Kind::In, i, {}});
  for (uint32_t o = 0; o < kernel.outputs.size(); ++o)
    op.outputs.push_back({BodyRef::Kind::Out, o, {}});
  body.push_back(std::move(op));
}

Tensor Emitter::tensor(const BodyRef &r) const {
  Tensor t;
  switch (r.kind) {
  case BodyRef::Kind::In: {
    const format::PlanOperand &o = kernel.inputs.at(r.index);
    t.ptr = fmt::format("in{}", r.index);
    t.input = r.index;
    if (o.isState) {
      // Storage outside the arena, written in place by state kernels: f32,
      // bf16 or i8 (rows of int8 values and an f32 scale; the state family
      // addresses those itself).
      const format::PlanState &st = plan.states.at(o.index);
      for (uint64_t d : st.shape)
        t.shape.push_back({0, static_cast<int64_t>(d), 1});
      t.ctype =
          st.dtype == format::DType::I8 ? "int8_t" : elementCType(st.dtype);
    } else if (o.isWeight) {
      const format::PlanWeight &w = plan.weights.at(o.index);
      t.isWeight = true;
      t.ggml = w.type;
      for (auto it = w.dims.rbegin(); it != w.dims.rend(); ++it)
        t.shape.push_back({0, static_cast<int64_t>(*it), 1});
      format::GgmlTypeInfo info = format::ggmlTypeInfo(w.type);
      t.blockSize = info.blockSize;
      t.blockBytes = info.typeSize;
      switch (w.type) {
      case format::GgmlType::F32:
        t.ctype = "float";
        break;
      case format::GgmlType::F16:
        t.ctype = "f16";
        break;
      case format::GgmlType::BF16:
        t.ctype = "bf16";
        break;
      case format::GgmlType::I32:
        t.ctype = "int32_t";
        break;
      default:
        t.ctype = "uint8_t";
      }
    } else {
      const format::PlanBuffer &b = plan.buffers.at(o.index);
      t.shape = b.shape;
      t.ctype = elementCType(b.dtype);
    }
    break;
  }
  case BodyRef::Kind::Out: {
    const format::PlanBuffer &b = plan.buffers.at(kernel.outputs.at(r.index));
    t.ptr = fmt::format("out{}", r.index);
    t.shape = b.shape;
    t.ctype = elementCType(b.dtype);
    break;
  }
  case BodyRef::Kind::Tmp: {
    const format::BodyTemp &b = kernel.temps.at(r.index);
    t.ptr = fmt::format("tmp{}", r.index);
    t.shape = b.shape;
    t.isTemp = true;
    t.ctype = elementCType(b.dtype);
    break;
  }
  }
  if (!r.view.empty())
    t.shape = r.view;
  return t;
}

bool Emitter::hasAttr(const format::BodyOp &op, const std::string &name) const {
  if (op.attrs.count(name))
    return true;
  const format::AttrSpec *s = format::findAttrSpec(op.recipe, name);
  return s && s->dflt;
}

const PlanAttr &Emitter::attr(const format::BodyOp &op,
                              const std::string &name) const {
  auto it = op.attrs.find(name);
  if (it != op.attrs.end())
    return it->second;
  std::string key =
      std::string(format::recipeInfo(op.recipe).name) + "." + name;
  auto d = defaults_.find(key);
  if (d != defaults_.end())
    return d->second;
  const format::AttrSpec *s = format::findAttrSpec(op.recipe, name);
  if (!s || !s->dflt)
    throw Unsupported(fmt::format("{} has no attribute '{}'",
                                  format::recipeInfo(op.recipe).name, name));
  PlanAttr a;
  const std::string &v = *s->dflt;
  if (s->kind == "int") {
    a.kind = PlanAttr::Kind::Int;
    a.i = std::stoll(v);
  } else if (s->kind == "float") {
    a.kind = PlanAttr::Kind::Float;
    a.f = std::stod(v);
  } else if (s->kind == "bool") {
    a.kind = PlanAttr::Kind::Bool;
    a.b = v == "true";
  } else {
    a.kind = PlanAttr::Kind::Str;
    a.s = v;
  }
  return defaults_.emplace(key, a).first->second;
}

int64_t Emitter::intAttr(const format::BodyOp &op,
                         const std::string &name) const {
  return attr(op, name).i;
}
double Emitter::floatAttr(const format::BodyOp &op,
                          const std::string &name) const {
  const PlanAttr &a = attr(op, name);
  return a.kind == PlanAttr::Kind::Int ? static_cast<double>(a.i) : a.f;
}
bool Emitter::boolAttr(const format::BodyOp &op,
                       const std::string &name) const {
  return attr(op, name).b;
}
std::string Emitter::strAttr(const format::BodyOp &op,
                             const std::string &name) const {
  return attr(op, name).s;
}

std::string Emitter::params() {
  std::string p;
  out.args.clear();
  // Without tied outputs no output shares storage with an input or another
  // output (the planner gives live buffers disjoint ranges), so pointers are
  // restrict: loads may move past stores and merge into 16-byte accesses.
  bool tied = false;
  for (int32_t t : kernel.tied)
    tied |= t >= 0;
  const char *restrict = tied ? "" : "__restrict__ ";
  for (uint32_t i = 0; i < kernel.inputs.size(); ++i) {
    Tensor t = tensor({BodyRef::Kind::In, i, {}});
    const format::PlanOperand &o = kernel.inputs[i];
    // A state is written in place (its own allocation: still restrict).
    p += fmt::format("{}{} *{}in{}, ", o.isState ? "" : "const ", t.ctype,
                     restrict, i);
    out.args.push_back(fmt::format("{}:{}",
                                   o.isState    ? "state"
                                   : o.isWeight ? "weight"
                                                : "buffer",
                                   o.index));
  }
  for (uint32_t o = 0; o < kernel.outputs.size(); ++o) {
    Tensor t = tensor({BodyRef::Kind::Out, o, {}});
    p += fmt::format("{} *{}out{}, ", t.ctype, restrict, o);
    out.args.push_back(fmt::format("buffer:{}", kernel.outputs[o]));
  }
  if (workspace) {
    p += "char *ws, ";
    out.args.push_back("workspace");
  }
  for (size_t i = 0; i < out.tensorMaps.size(); ++i) {
    p += fmt::format("const strata_tmap tmap{}, ", i);
    out.args.push_back(fmt::format("tmap:{}", i));
  }
  out.args.push_back("T");
  return p + "long T";
}

std::string Emitter::tensorMapParam(size_t i, const std::string &fn) const {
  return fmt::format("{}_param_{}", fn,
                     kernel.inputs.size() + kernel.outputs.size() +
                         (workspace ? 1 : 0) + i);
}

void Emitter::prologue() {
  for (uint32_t i = 0; i < kernel.inputs.size(); ++i) {
    Tensor t = tensor({BodyRef::Kind::In, i, {}});
    line("  in{} = ({}{} *)__builtin_assume_aligned(in{}, 16);", i,
         kernel.inputs[i].isState ? "" : "const ", t.ctype, i);
  }
  for (uint32_t o = 0; o < kernel.outputs.size(); ++o) {
    Tensor t = tensor({BodyRef::Kind::Out, o, {}});
    line("  out{} = ({} *)__builtin_assume_aligned(out{}, 16);", o, t.ctype, o);
  }
}

std::string dimExpr(const PlanDim &d) {
  if (d.coef == 0)
    return fmt::format("{}L", d.constant);
  std::string e = d.coef == 1 ? "T" : fmt::format("{}L * T", d.coef);
  if (d.div != 1)
    e = fmt::format("({}) / {}L", e, d.div);
  if (d.constant != 0)
    e = fmt::format("({} + {}L)", e, d.constant);
  return "(" + e + ")";
}

int64_t constProduct(const Shape &s, size_t from) {
  int64_t n = 1;
  for (size_t i = from; i < s.size(); ++i) {
    if (!isConst(s[i]))
      throw Unsupported("a dim other than the leading one depends on T");
    n *= s[i].constant;
  }
  return n;
}

const char *elementCType(format::DType t) {
  switch (t) {
  case format::DType::BF16:
    return "bf16";
  case format::DType::F16:
    return "f16";
  case format::DType::I32:
    return "int32_t";
  case format::DType::F32:
    return "float";
  default:
    throw Unsupported(fmt::format("{} activations are not generated",
                                  format::planDTypeName(t)));
  }
}

format::PlanDim rowGroups(const format::PlanDim &rows, int64_t per) {
  if (rows.coef == 0)
    return {0, (rows.constant + per - 1) / per, 1};
  return {rows.coef, rows.constant / per + 1 + (rows.constant % per != 0),
          rows.div * per};
}

std::string floatLit(float v) {
  if (v != v)
    return "__builtin_nanf(\"\")";
  if (v == __builtin_inff())
    return "__builtin_inff()";
  if (v == -__builtin_inff())
    return "(-__builtin_inff())";
  return fmt::format("{:a}f", v);
}

std::string hashHex(const std::string &s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return fmt::format("{:016x}", h);
}

std::string elementIndex(const Tensor &t, const Shape &outShape,
                         const std::string &row, const std::string &i) {
  const Shape &s = t.shape;
  size_t R = outShape.size(), n = s.size();
  if (n > R)
    throw Unsupported("an operand has a higher rank than the op's result");
  // Fast path: the same shape (the common case).
  if (n == R && s == outShape) {
    if (R == 0)
      return "0";
    int64_t rowElems = constProduct(s, 1);
    if (t.isTemp)
      return i;
    return fmt::format("({} * {}L + {})", row, rowElems, i);
  }
  // Stride of out dim d inside a row.
  std::vector<int64_t> outStride(R, 1);
  for (size_t d = 1; d < R; ++d) {
    int64_t st = 1;
    for (size_t l = d + 1; l < R; ++l)
      st *= outShape[l].constant;
    outStride[d] = st;
  }
  std::string e;
  for (size_t k = 0; k < n; ++k) {
    size_t od = R - n + k;
    bool one = isConst(s[k]) && s[k].constant == 1;
    bool outOne = isConst(outShape[od]) && outShape[od].constant == 1;
    if (one && !outOne)
      continue; // broadcast
    int64_t stride = constProduct(s, k + 1);
    std::string term;
    if (od == 0) {
      if (t.isTemp)
        continue; // a temporary holds one row
      term = fmt::format("{} * {}L", row, stride);
    } else {
      if (!isConst(outShape[od]))
        throw Unsupported("a non-leading dim of a result depends on T");
      std::string idx = fmt::format("(({}) / {}L % {}L)", i, outStride[od],
                                    outShape[od].constant);
      if (!isConst(s[k]) || s[k].constant != outShape[od].constant)
        throw Unsupported("an operand does not broadcast to the result");
      term = fmt::format("{} * {}L", idx, stride);
    }
    e += (e.empty() ? "" : " + ") + term;
  }
  return e.empty() ? "0" : "(" + e + ")";
}

} // namespace detail

bool isDeviceTarget(const std::string &target) {
  return target == "gfx1151" || target == "sm_90";
}

namespace {

using detail::Emitter;
using format::Recipe;

/// The family of a cached (decode-step) op, one that reads or writes a plan
/// state: the family whose math it steps. Null for any other op.
const char *cachedFamily(Recipe r) {
  switch (r) {
  case Recipe::KvStore:
  case Recipe::AttentionCached:
    return "attention";
  case Recipe::BlockMeanCached:
  case Recipe::QsaSelectCached:
    return "qsa";
  case Recipe::GatedDeltaCached:
  case Recipe::GatedDeltaQkvCached:
    return "delta";
  case Recipe::Conv1dCached:
  case Recipe::NgramHashCached:
    return "row";
  default:
    return nullptr;
  }
}

/// The family a kernel belongs to, by its leading op.
std::string familyOf(const std::vector<format::BodyOp> &body) {
  // moe_route alone is the route family's (sort/RouteEmitter.cpp); inside
  // a fused body it is a row op.
  if (body.size() == 1 && body[0].recipe == Recipe::MoeRoute)
    return "sort";
  for (const format::BodyOp &op : body) {
    if (const char *f = cachedFamily(op.recipe))
      return f;
    switch (op.recipe) {
    case Recipe::Matmul:
      return "gemm";
    case Recipe::MoeGroupedSwiglu:
    case Recipe::MoeGroupedDown:
      return "grouped";
    case Recipe::Attention:
      return "attention";
    case Recipe::GatedDeltaRule:
      return "delta";
    case Recipe::MoeSort:
      return "sort";
    case Recipe::State:
      throw detail::Unsupported("'state' is no kernel (the plan lists its "
                                "states)");
    case Recipe::MoeExperts:
      throw detail::Unsupported(
          "moe_experts (per-slot experts) has no device kernel: the "
          "group-experts pass replaces it on GPU targets");
    default:
      break;
    }
  }
  return "row";
}

/// True if \p body holds a cached (decode-step) op.
bool isCachedOp(const std::vector<format::BodyOp> &body) {
  return std::any_of(body.begin(), body.end(), [](const format::BodyOp &op) {
    return cachedFamily(op.recipe) != nullptr;
  });
}

/// The cached (decode-step) op \p op's emitter, in the family whose math it
/// steps (CachedKernel.h); a cached op is a kernel alone.
void emitCachedKernel(Emitter &e) {
  if (e.body.size() != 1)
    throw detail::Unsupported("a fused body around a state op");
  const format::BodyOp &op = e.body[0];
  switch (op.recipe) {
  case Recipe::KvStore:
    return detail::emitKvStore(e, op);
  case Recipe::AttentionCached:
    return detail::emitAttentionCached(e, op);
  case Recipe::BlockMeanCached:
    return detail::emitBlockMeanCached(e, op);
  case Recipe::QsaSelectCached:
    return detail::emitQsaSelectCached(e, op);
  case Recipe::Conv1dCached:
    return detail::emitConv1dCached(e, op);
  case Recipe::GatedDeltaCached:
    return detail::emitGatedDeltaCached(e, op);
  case Recipe::GatedDeltaQkvCached:
    return detail::emitGatedDeltaQkvCached(e, op);
  case Recipe::NgramHashCached:
    return detail::emitNgramHashCached(e, op);
  default:
    throw detail::Unsupported(fmt::format("'{}' is no state kernel",
                                          format::recipeInfo(op.recipe).name));
  }
}

} // namespace

namespace {

/// Whether \p line opens a kernel (`STRATA_KERNEL... {`).
bool isKernelEntry(std::string_view line) {
  return line.rfind("STRATA_KERNEL", 0) == 0 &&
         line.find(") {") != std::string_view::npos;
}

/// \p code with grid_dependency_wait() first in every kernel it defines
/// (each entry line `STRATA_KERNEL... {`), whichever family printed it: a
/// kernel launched to overlap the one before it must wait before its first
/// access to memory. A kernel whose text already waits (a line
/// `  grid_dependency_wait();` before the next entry: the dense decode
/// GEMVs under gemm-decode-prefetch-early, which prefetch their weights
/// first) is left as printed.
std::string withGridWait(const std::string &code) {
  static constexpr std::string_view kWait = "  grid_dependency_wait();\n";
  std::string out;
  out.reserve(code.size() + 256);
  size_t at = 0;
  while (at < code.size()) {
    size_t end = code.find('\n', at);
    end = end == std::string::npos ? code.size() : end + 1;
    std::string_view line(code.data() + at, end - at);
    out.append(line);
    if (isKernelEntry(line)) {
      // This kernel's text: up to the next entry line (or the end).
      size_t next = end;
      bool waits = false;
      while (next < code.size()) {
        size_t e2 = code.find('\n', next);
        e2 = e2 == std::string::npos ? code.size() : e2 + 1;
        std::string_view l2(code.data() + next, e2 - next);
        if (isKernelEntry(l2))
          break;
        if (l2 == kWait)
          waits = true;
        next = e2;
      }
      if (!waits)
        out += kWait;
    }
    at = end;
  }
  return out;
}

} // namespace

bool emitKernel(const format::Plan &plan, size_t k, const std::string &target,
                EmittedKernel &out, std::string &error) {
  const format::PlanKernel &kernel = plan.kernels.at(k);
  try {
    Emitter e(plan, kernel, target);
    e.out.family = familyOf(e.body);
    if (isCachedOp(e.body))
      emitCachedKernel(e);
    else if (e.out.family == "row")
      detail::emitRowKernel(e);
    else if (e.out.family == "gemm")
      detail::emitGemmKernel(e);
    else if (e.out.family == "grouped")
      detail::emitGroupedKernel(e);
    else if (e.out.family == "attention")
      detail::emitAttentionKernel(e);
    else if (e.out.family == "delta")
      detail::emitDeltaKernel(e);
    else
      detail::emitSortKernel(e);
    out = std::move(e.out);
    out.int8Decode = e.int8Decode;
    out.gemmTiles = std::move(e.tiles);
    out.codeTiles = std::move(e.codeTiles);
    std::string text = withGridWait(fmt::to_string(e.code));
    // The symbol: the kernel's label and a hash of its specialised body, so
    // identical specialisations share one symbol and one source.
    std::string label = kernel.isFused() ? kernel.fused : kernel.label();
    for (char &c : label)
      if (!std::isalnum(static_cast<unsigned char>(c)))
        c = '_';
    out.symbol =
        fmt::format("{}_{}", label, detail::hashHex(text).substr(0, 12));
    if (out.pre)
      out.pre->symbol = out.symbol + "_prep";
    for (EmittedKernel &a : out.alternates) {
      a.symbol = out.symbol + a.suffix;
      a.family = out.family;
      if (a.pre)
        a.pre->symbol = a.symbol + "_prep";
    }
    size_t pos;
    while ((pos = text.find("@SYMBOL@")) != std::string::npos)
      text.replace(pos, 8, out.symbol);
    out.body = std::move(text);
    return true;
  } catch (const detail::Unsupported &u) {
    error = fmt::format("codegen: kernel {} ({}) for {}: {}", k, kernel.label(),
                        target, u.what());
    return false;
  } catch (const std::exception &x) {
    error = fmt::format("codegen: kernel {} ({}) for {}: {}", k, kernel.label(),
                        target, x.what());
    return false;
  }
}

std::string deviceSource(const std::string &target,
                         const EmittedKernel &kernel) {
  std::string s = fmt::format(
      "// strata-compile: kernel {} ({} family) for {}. Generated: edit the "
      "generator, not this file.\n",
      kernel.symbol, kernel.family, target);
  s += target == "gfx1151" ? kPreludeGfx1151 : kPreludeSm90;
  s += kScalarMath;
  s += kBlockDecode;
  if (kernel.int8Decode)
    s += kBlockDecodeInt8;
  s += kDeviceLib;
  if (kernel.kvQuant)
    s += kKvQuant;
  s += kernel.body;
  return s;
}

std::string syntheticFillSource(const std::string &target) {
  std::string s = fmt::format(
      "// strata-compile: the synthetic weight fill ({}) for {}. Generated: "
      "edit runtime/SyntheticBlock.h, not this file.\n",
      kSyntheticFillSymbol, target);
  s += target == "gfx1151" ? kPreludeGfx1151 : kPreludeSm90;
  s += kScalarMath;
  s += kBlockDecode;
  s += kSyntheticBlock;
  // One thread a block; consecutive threads write consecutive blocks.
  s += fmt::format(
      "STRATA_KERNEL(256) void {}(uint8_t *out, uint64_t seed, uint64_t "
      "index, uint64_t type, uint64_t type_size, uint64_t rank1, uint64_t "
      "count, uint64_t stride) {{\n"
      "  for (uint64_t b = (uint64_t)bid_x() * 256 + tid_x(); b < count; b "
      "+= stride)\n"
      "    strata_synthetic_block(seed, index, b, (uint32_t)type, "
      "(uint32_t)type_size, rank1 != 0, out + b * type_size);\n"
      "}}\n",
      kSyntheticFillSymbol);
  return s;
}

std::vector<std::string> syntheticFillArgs() {
  return {"out",       "seed",  "index", "type",
          "type_size", "rank1", "count", "stride"};
}

} // namespace strata::codegen
