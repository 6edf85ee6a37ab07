//===- PlanBuilder.cpp - a planned module as a runtime plan ---------------===//
#include "codegen/PlanBuilder.h"

#include "ir/Liveness.h"
#include "ir/OpCost.h"
#include "runtime/format/Quants.h"

#include <fmt/format.h>

#include <map>
#include <set>

namespace strata::codegen {

using namespace ir;

namespace {

std::optional<format::PlanDType> planDType(const ElemType &e) {
  if (e.isBlock)
    return std::nullopt;
  return e.dtype;
}

/// Converts a literal attribute expression.
std::optional<format::PlanAttr> planAttr(const Expr &e) {
  format::PlanAttr a;
  auto num = [](const Expr &x, double &f, int64_t &i) -> int {
    if (x.kind == ExprKind::Int)
      return i = x.i, 1;
    if (x.kind == ExprKind::Float)
      return f = x.f, 2;
    if (x.kind == ExprKind::Unary && x.s == "-") {
      int k = 0;
      if (x.args[0]->kind == ExprKind::Int)
        i = -x.args[0]->i, k = 1;
      if (x.args[0]->kind == ExprKind::Float)
        f = -x.args[0]->f, k = 2;
      return k;
    }
    return 0;
  };
  double f = 0;
  int64_t i = 0;
  switch (e.kind) {
  case ExprKind::Bool:
    a.kind = format::PlanAttr::Kind::Bool;
    a.b = e.b;
    return a;
  case ExprKind::Str:
  case ExprKind::Name: // element-type names (cast {to = f16})
    a.kind = format::PlanAttr::Kind::Str;
    a.s = e.s;
    return a;
  case ExprKind::List: {
    bool allInt = true;
    std::vector<double> fs;
    std::vector<int64_t> is;
    for (const ExprPtr &x : e.args) {
      int k = num(*x, f, i);
      if (!k)
        return std::nullopt;
      allInt &= k == 1;
      fs.push_back(k == 1 ? double(i) : f);
      is.push_back(i);
    }
    a.kind =
        allInt ? format::PlanAttr::Kind::Ints : format::PlanAttr::Kind::Floats;
    a.ints = allInt ? is : std::vector<int64_t>{};
    a.floats = allInt ? std::vector<double>{} : fs;
    return a;
  }
  default: {
    int k = num(e, f, i);
    if (k == 1) {
      a.kind = format::PlanAttr::Kind::Int;
      a.i = i;
    } else if (k == 2) {
      a.kind = format::PlanAttr::Kind::Float;
      a.f = f;
    } else {
      return std::nullopt;
    }
    return a;
  }
  }
}

std::optional<std::vector<format::PlanDim>> planShape(const Type &t,
                                                      std::string &why) {
  std::vector<format::PlanDim> shape;
  for (const Dim &d : t.dims) {
    auto lin = d.affineIn("T");
    if (!lin || lin->coef < 0 || lin->constant < 0) {
      why = fmt::format("dim '{}' is not c*T + d or c*T / q + d", d.str());
      return std::nullopt;
    }
    shape.push_back({lin->coef, lin->constant, lin->div});
  }
  return shape;
}

bool planAttrs(const Operation &op,
               std::map<std::string, format::PlanAttr> &out,
               std::string &error) {
  for (const Attr &a : op.attrs) {
    auto pa = planAttr(*a.value);
    if (!pa) {
      error =
          fmt::format("attribute '{}' of {} is not a literal", a.name,
                      op.kind == OpKind::Kernel ? "kernel<" + op.callee + ">"
                                                : opName(op.kind));
      return false;
    }
    out[a.name] = *pa;
  }
  return true;
}

/// The body of fused kernel \p op as sub-kernels of \p k: block arguments
/// are the kernel's inputs, yielded values its outputs, other values
/// temporaries; a reshape becomes a view of its operand's storage; weights
/// named in the body become further inputs (through \p input).
template <typename AddInput>
bool buildBody(const Operation &op, format::PlanKernel &k, AddInput &input,
               std::string &error) {
  const Block &body = *op.regions[0];
  std::map<const Value *, format::BodyRef> refOf;
  for (size_t i = 0; i < body.args.size(); ++i)
    refOf[body.args[i]] = {
        format::BodyRef::Kind::In, static_cast<uint32_t>(i), {}};
  const Operation &yield = *body.ops.back();
  std::map<const Value *, uint32_t> outOf;
  for (size_t j = 0; j < yield.operands.size(); ++j) {
    const Value *v = yield.operands[j].value;
    if (refOf.count(v) || outOf.count(v)) {
      error = fmt::format("fused kernel \"{}\" yields %{} twice or yields "
                          "an argument; a kernel output is written by its "
                          "body",
                          op.callee, v->name);
      return false;
    }
    outOf[v] = static_cast<uint32_t>(j);
  }
  std::map<std::string, uint32_t> weightInput;
  for (const auto &innerPtr : body.ops) {
    const Operation &inner = *innerPtr;
    if (inner.kind == OpKind::Yield)
      continue;
    if (inner.kind == OpKind::Reshape && inner.operands[0].isValue()) {
      format::BodyRef ref = refOf.at(inner.operands[0].value);
      auto shape = planShape(inner.results[0]->type, error);
      if (!shape)
        return false;
      ref.view = *shape;
      if (outOf.count(inner.results[0])) {
        error = fmt::format("fused kernel \"{}\" yields the view %{}",
                            op.callee, inner.results[0]->name);
        return false;
      }
      refOf[inner.results[0]] = ref;
      continue;
    }
    if (inner.kind != OpKind::Kernel) {
      error = fmt::format("'{}' in fused kernel \"{}\" was not lowered",
                          opName(inner.kind), op.callee);
      return false;
    }
    format::BodyOp bop;
    bop.recipe = format::lookupRecipe(inner.callee)->id;
    for (const Operand &o : inner.operands) {
      if (o.isWeight()) {
        const std::string &name = o.weight->name->s;
        auto it = weightInput.find(name);
        if (it == weightInput.end()) {
          it = weightInput.emplace(name, k.inputs.size()).first;
          input(o);
        }
        bop.inputs.push_back({format::BodyRef::Kind::In, it->second, {}});
        continue;
      }
      bop.inputs.push_back(refOf.at(o.value));
    }
    for (const Value *r : inner.results) {
      format::BodyRef ref;
      if (auto it = outOf.find(r); it != outOf.end()) {
        ref = {format::BodyRef::Kind::Out, it->second, {}};
      } else {
        format::BodyTemp t;
        auto dt = planDType(r->type.elem);
        auto shape = planShape(r->type, error);
        if (!dt || !shape) {
          error = fmt::format("%{} in fused kernel \"{}\": {}", r->name,
                              op.callee, error);
          return false;
        }
        t.dtype = *dt;
        t.shape = *shape;
        ref = {format::BodyRef::Kind::Tmp,
               static_cast<uint32_t>(k.temps.size()),
               {}};
        k.temps.push_back(std::move(t));
      }
      refOf[r] = ref;
      bop.outputs.push_back(ref);
    }
    if (!planAttrs(inner, bop.attrs, error))
      return false;
    k.body.push_back(std::move(bop));
  }
  return true;
}

} // namespace

bool buildPlan(const Module &m, int64_t maxTokens, const std::string &target,
               const std::string &arch, format::Plan &plan,
               std::string &error) {
  const Func *main = m.findFunc("main");
  if (!main || m.funcs.size() != 1) {
    error = "the module is not flat (run the default pipeline)";
    return false;
  }
  plan = format::Plan();
  plan.model = m.name;
  plan.arch = arch;
  plan.target = target;
  plan.maxTokens = maxTokens;

  std::map<const Value *, uint32_t> bufferOf;
  auto addBuffer = [&](const Value *v) -> bool {
    auto dt = planDType(v->type.elem);
    if (!v->type.isTensor() || !dt || !v->offset) {
      error =
          fmt::format("%{} has no arena placement (run plan-memory)", v->name);
      return false;
    }
    format::PlanBuffer b;
    b.name = v->name;
    b.dtype = *dt;
    for (const Dim &d : v->type.dims) {
      auto lin = d.affineIn("T");
      if (!lin || lin->coef < 0 || lin->constant < 0) {
        error = fmt::format("%{}: dim '{}' is not c*T + d or c*T / q + d",
                            v->name, d.str());
        return false;
      }
      b.shape.push_back({lin->coef, lin->constant, lin->div});
    }
    b.offset = *v->offset;
    b.bytes = ir::bytesAt(v->type, maxTokens, nullptr);
    plan.arenaBytes = std::max(plan.arenaBytes, b.offset + b.bytes);
    bufferOf[v] = static_cast<uint32_t>(plan.buffers.size());
    plan.buffers.push_back(std::move(b));
    return true;
  };
  std::map<std::string, uint32_t> weightOf;
  auto addWeight = [&](const WeightRef &w) -> uint32_t {
    const std::string &name = w.name->s;
    auto it = weightOf.find(name);
    if (it != weightOf.end())
      return it->second;
    format::PlanWeight pw;
    pw.name = name;
    pw.type =
        w.elem->isBlock
            ? w.elem->block
            : format::ggmlTypeOf(w.elem->dtype).value_or(format::GgmlType::F32);
    for (auto d = w.shape->rbegin(); d != w.shape->rend(); ++d)
      pw.dims.push_back(static_cast<uint64_t>(*d->constant()));
    uint32_t idx = static_cast<uint32_t>(plan.weights.size());
    weightOf[name] = idx;
    plan.weights.push_back(std::move(pw));
    return idx;
  };

  for (const Param &p : main->params) {
    if (p.isScalar() || !addBuffer(p.value))
      return error.empty() ? (error = "scalar parameter in @main", false)
                           : false;
    plan.inputs.push_back(bufferOf[p.value]);
  }
  // Generation states: storage outside the arena, one plan entry per
  // `state`; a state write's result is the state it wrote.
  const std::set<const Value *> states = stateValues(main->body);
  std::map<const Value *, uint32_t> stateOf;
  std::map<std::string, const Value *> stateNamed;
  auto addState = [&](const Operation &op) -> bool {
    const Value *v = op.results[0];
    const Attr *name = op.findAttr("name");
    format::PlanState st;
    st.name = name && name->value->kind == ExprKind::Str ? name->value->s : "";
    if (st.name.empty()) {
      error = fmt::format("state %{} has no literal name", v->name);
      return false;
    }
    if (!stateNamed.emplace(st.name, v).second) {
      error = fmt::format("states %{} and %{} are both named \"{}\"",
                          stateNamed[st.name]->name, v->name, st.name);
      return false;
    }
    auto dt = planDType(v->type.elem);
    if (!v->type.isTensor() || !dt) {
      error = fmt::format("state %{} is not a tensor of an activation type",
                          v->name);
      return false;
    }
    st.dtype = *dt;
    for (const Dim &d : v->type.dims) {
      std::optional<int64_t> c = d.constant();
      st.shape.push_back(c && *c >= 1 ? static_cast<uint64_t>(*c) : 0);
    }
    // f32 and bf16 dense; i8 rows with their scales (format::stateBytes).
    std::optional<uint64_t> bytes = format::stateBytes(st.dtype, st.shape);
    if (!bytes || *bytes > (uint64_t(1) << 50)) {
      error = fmt::format("state %{} of type {}: every dim must be a "
                          "positive constant, the whole below 2^50 bytes",
                          v->name, v->type.str());
      return false;
    }
    st.bytes = *bytes;
    stateOf[v] = static_cast<uint32_t>(plan.states.size());
    plan.states.push_back(std::move(st));
    return true;
  };
  for (const auto &opPtr : main->body.ops) {
    const Operation &op = *opPtr;
    if (op.kind == OpKind::Return) {
      for (const Operand &o : op.operands) {
        if (states.count(o.value)) {
          error = fmt::format("%{} is a state; a model returns arena values",
                              o.value->name);
          return false;
        }
        plan.outputs.push_back(bufferOf.at(o.value));
      }
      continue;
    }
    if (isStateDecl(op)) {
      if (!addState(op))
        return false;
      continue;
    }
    const bool writes = writesState(op);
    if (writes) {
      const Value *s = op.operands.empty() ? nullptr : op.operands[0].value;
      if (!s || !stateOf.count(s)) {
        error =
            fmt::format("'{}' writes %{} in place, which is not a state",
                        op.kind == OpKind::Kernel ? op.callee : opName(op.kind),
                        s ? s->name : std::string("?"));
        return false;
      }
      stateOf[op.results[0]] = stateOf.at(s);
    }
    for (const Value *r : op.results)
      if (!states.count(r) && !addBuffer(r))
        return false;
    if (op.kind == OpKind::Reshape) {
      // A view: its buffer aliases the operand's storage, and says so (the
      // validator's memory proof follows views to the value they show).
      if (op.operands[0].isValue() && states.count(op.operands[0].value)) {
        error = fmt::format("%{} views the state %{}; states are not arena "
                            "values",
                            op.results[0]->name, op.operands[0].value->name);
        return false;
      }
      if (op.operands[0].isValue())
        plan.buffers[bufferOf.at(op.results[0])].viewOf =
            bufferOf.at(op.operands[0].value);
      continue;
    }
    if (op.kind != OpKind::Kernel && op.kind != OpKind::Fused) {
      error = fmt::format("'{}' was not lowered (run lower-to-kernels)",
                          opName(op.kind));
      return false;
    }
    format::PlanKernel k;
    auto input = [&](const Operand &o) {
      format::PlanOperand po;
      if (o.isWeight()) {
        po.isWeight = true;
        po.index = addWeight(*o.weight);
      } else if (auto st = stateOf.find(o.value); st != stateOf.end()) {
        po.isState = true;
        po.index = st->second;
      } else {
        po.index = bufferOf.at(o.value);
      }
      k.inputs.push_back(po);
    };
    for (const Operand &o : op.operands)
      input(o);
    // A state write lists no output for the state it writes (its input 0).
    for (size_t r = writes ? 1 : 0; r < op.results.size(); ++r)
      k.outputs.push_back(bufferOf.at(op.results[r]));
    if (!planAttrs(op, k.attrs, error))
      return false;
    // The variant select-expert-kernels picked travels as the kernel's own
    // field (for a fused kernel, those of its body's GEMMs).
    auto takeVariant = [&](std::map<std::string, format::PlanAttr> &attrs) {
      auto it = attrs.find("variant");
      if (it == attrs.end())
        return;
      if (k.variant.find(it->second.s) == std::string::npos)
        k.variant += (k.variant.empty() ? "" : ",") + it->second.s;
      attrs.erase(it);
    };
    if (op.kind == OpKind::Kernel) {
      k.recipe = format::lookupRecipe(op.callee)->id;
      takeVariant(k.attrs);
    } else {
      k.fused = op.callee;
      k.attrs.erase("tied");
      for (int t : ir::tiedOperands(op))
        k.tied.push_back(t);
      if (!buildBody(op, k, input, error))
        return false;
      for (format::BodyOp &b : k.body)
        takeVariant(b.attrs);
    }
    ir::KernelCost c = ir::kernelCost(op);
    k.bytes = c.bytes;
    k.flops = c.flops;
    plan.kernels.push_back(std::move(k));
  }
  // The rows of a plan with state come with their positions and slots.
  if (!plan.states.empty() && plan.inputs.size() != 3) {
    error = fmt::format("a model with state reads three inputs (tokens, "
                        "positions, slots); @main reads {}",
                        plan.inputs.size());
    return false;
  }
  std::vector<ir::LiveSet> sets = ir::computeLiveness(*main, maxTokens, error);
  if (!error.empty())
    return false;
  plan.arenaLowerBound = ir::liveLowerBound(sets);
  return true;
}

} // namespace strata::codegen
