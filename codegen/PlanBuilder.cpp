//===- PlanBuilder.cpp - a planned module as a runtime plan ---------------===//
#include "codegen/PlanBuilder.h"

#include "ir/Liveness.h"
#include "runtime/format/Quants.h"

#include <fmt/format.h>

#include <map>

namespace strata::codegen {

using namespace ir;

namespace {

std::optional<format::PlanDType> planDType(const ElemType &e) {
  if (e.isBlock)
    return std::nullopt;
  switch (e.dtype) {
  case DType::F32:
    return format::PlanDType::F32;
  case DType::F16:
    return format::PlanDType::F16;
  case DType::BF16:
    return format::PlanDType::BF16;
  case DType::I32:
    return format::PlanDType::I32;
  case DType::I64:
    return format::PlanDType::I64;
  case DType::Bool:
    return format::PlanDType::Bool;
  }
  return std::nullopt;
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

uint64_t elements(const Type &t, int64_t maxTokens) {
  uint64_t n = 1;
  for (const Dim &d : t.dims) {
    auto lin = d.affineIn("T");
    n *= lin ? static_cast<uint64_t>(lin->coef * maxTokens / lin->div +
                                     lin->constant)
             : 0;
  }
  return n;
}

/// Bytes moved and FLOPs of one kernel at T = maxTokens: every operand read
/// once, every result written once (a weight read in full, as a GEMM
/// streams it); FLOPs from the recipe's arithmetic.
void cost(const Operation &op, int64_t maxTokens, uint64_t &bytes,
          uint64_t &flops) {
  bytes = 0;
  for (const Operand &o : op.operands) {
    Type t = o.type();
    if (t.elem.isBlock || o.isWeight()) {
      uint64_t rowLen = t.dims.empty() ? 1 : *t.dims.back().constant();
      uint64_t rows = elements(t, maxTokens) / std::max<uint64_t>(rowLen, 1);
      if (t.elem.isBlock)
        bytes += rows * format::rowSizeInBytes(t.elem.block, rowLen);
      else
        bytes += elements(t, maxTokens) * (t.elem.dtype == DType::F32 ? 4 : 2);
    } else {
      bytes += ir::bytesAt(t, maxTokens, nullptr);
    }
  }
  uint64_t out = 0;
  for (const Value *r : op.results) {
    bytes += ir::bytesAt(r->type, maxTokens, nullptr);
    out += elements(r->type, maxTokens);
  }
  const std::string &r = op.callee;
  auto dimOf = [&](size_t operand, size_t d) -> uint64_t {
    Type t = op.operands[operand].type();
    auto lin = d < t.dims.size() ? t.dims[d].affineIn("T") : std::nullopt;
    return lin ? lin->coef * maxTokens / lin->div + lin->constant : 0;
  };
  if (r == "matmul") {
    flops = 2 * out * dimOf(1, 1);
  } else if (r == "moe_experts") {
    // Per (token, slot): gate and up (2*F*D each) and down (2*D*F).
    uint64_t slots = elements(op.results[0]->type, maxTokens) / dimOf(0, 1);
    flops = slots * 6 * dimOf(2, 1) * dimOf(2, 2);
  } else if (r == "attention") {
    // Causal: about T*T/2 scores per head, each 2*D for QK and 2*Dv for PV.
    uint64_t t = dimOf(0, 0), h = dimOf(0, 1), d = dimOf(0, 2);
    uint64_t dv = dimOf(2, 2);
    flops = t * (t + 1) / 2 * h * 2 * (d + dv);
  } else if (r == "gated_delta_rule") {
    uint64_t t = dimOf(2, 0), h = dimOf(2, 1), dk = dimOf(0, 2),
             dv = dimOf(2, 2);
    flops = t * h * dk * dv * 8;
  } else {
    flops = out;
  }
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
    pw.type = w.elem->isBlock                ? w.elem->block
              : w.elem->dtype == DType::F16  ? format::GgmlType::F16
              : w.elem->dtype == DType::BF16 ? format::GgmlType::BF16
              : w.elem->dtype == DType::I32  ? format::GgmlType::I32
                                             : format::GgmlType::F32;
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
  for (const auto &opPtr : main->body.ops) {
    const Operation &op = *opPtr;
    if (op.kind == OpKind::Return) {
      for (const Operand &o : op.operands)
        plan.outputs.push_back(bufferOf.at(o.value));
      continue;
    }
    for (const Value *r : op.results)
      if (!addBuffer(r))
        return false;
    if (op.kind == OpKind::Reshape)
      continue; // a view: its buffer aliases the operand's storage
    if (op.kind != OpKind::Kernel) {
      error = fmt::format("'{}' was not lowered (run lower-to-kernels)",
                          opName(op.kind));
      return false;
    }
    format::PlanKernel k;
    k.recipe = format::lookupRecipe(op.callee)->id;
    for (const Operand &o : op.operands) {
      format::PlanOperand po;
      if (o.isWeight()) {
        po.isWeight = true;
        po.index = addWeight(*o.weight);
      } else {
        po.index = bufferOf.at(o.value);
      }
      k.inputs.push_back(po);
    }
    for (const Value *r : op.results)
      k.outputs.push_back(bufferOf.at(r));
    for (const Attr &a : op.attrs) {
      auto pa = planAttr(*a.value);
      if (!pa) {
        error = fmt::format("attribute '{}' of kernel<{}> is not a literal",
                            a.name, op.callee);
        return false;
      }
      k.attrs[a.name] = *pa;
    }
    cost(op, maxTokens, k.bytes, k.flops);
    plan.kernels.push_back(std::move(k));
  }
  std::vector<ir::LiveSet> sets = ir::computeLiveness(*main, maxTokens, error);
  if (!error.empty())
    return false;
  plan.arenaLowerBound = ir::liveLowerBound(sets);
  return true;
}

} // namespace strata::codegen
