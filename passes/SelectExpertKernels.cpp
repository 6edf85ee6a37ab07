//===- SelectExpertKernels.cpp - a kernel variant per GEMM ----------------===//
//
// For every matmul and expert stack (inside fused kernels too), picks the
// target's kernel variant (KernelVariants.def) with the least predicted
// time and records it as the op's `variant` attribute, which the plan and
// --report carry. The cost model (ir/Target.h's predictGemm) reads the
// target description only:
//   rows M    = the tokens the GEMM sees: T for a dense matmul, the
//               expected rows per expert T*k/E for an expert stack
//   compute   = 2*Mpad*N*K*(stacks) / (path peak * efficiency), Mpad = M
//               rounded up to the variant's row tile (small M wastes tiles);
//               for quantised expert stacks at least the decode of N*K*stacks
//               values once per row tile (so 32 rows an expert take the
//               128-row tile: one decode, 2.1-2.8x faster than two of the
//               16-row tile on the H100)
//   memory    = (weight bytes + activations in and out) / bandwidth, plus
//               for int8-activation variants the pass that quantises the
//               activations (read f32, write int8)
//   time      = max(compute, memory)
// A weight type no variant of the target decodes is an error naming it.
//
//===----------------------------------------------------------------------===//
#include "ir/Target.h"
#include "passes/Pass.h"
#include "runtime/format/Quants.h"

#include <fmt/format.h>

namespace strata::passes {

using namespace ir;

namespace {

format::GgmlType weightType(const Operand &w) {
  Type t = w.type();
  return t.elem.isBlock
             ? t.elem.block
             : format::ggmlTypeOf(t.elem.dtype).value_or(format::GgmlType::F32);
}

double constOr(const Dim &d, double dflt) {
  auto c = d.constant();
  return c ? static_cast<double>(*c) : dflt;
}

/// Rows of a [T, ...] activation at T = maxTokens (all but the last dim).
double activationRows(const Type &t, int64_t maxTokens) {
  double rows = 1;
  for (size_t d = 0; d + 1 < t.rank(); ++d) {
    auto lin = t.dims[d].affineIn("T");
    rows *= lin ? static_cast<double>(lin->coef * maxTokens / lin->div +
                                      lin->constant)
                : 1.0;
  }
  return rows;
}

double weightBytes(const Operand &w, format::GgmlType type) {
  Type t = w.type();
  double elems = 1;
  for (const Dim &d : t.dims)
    elems *= constOr(d, 1);
  format::GgmlTypeInfo info = format::ggmlTypeInfo(type);
  return elems / info.blockSize * info.typeSize;
}

class SelectExpertKernelsPass : public Pass {
public:
  const char *name() const override { return "select-expert-kernels"; }

  bool run(std::unique_ptr<Module> &m, PassContext &ctx) override {
    const Target *target = lookupTarget(ctx.target);
    if (!target) {
      ctx.diag.error(m->loc, fmt::format("select-expert-kernels: unknown "
                                         "target '{}' (targets: {})",
                                         ctx.target, targetNames()));
      return false;
    }
    if (ctx.maxTokens <= 0) {
      ctx.diag.error(m->loc, "select-expert-kernels needs the maximum token "
                             "count (--max-tokens)");
      return false;
    }
    bool ok = true;
    for (auto &f : m->funcs)
      ok = selectIn(f->body, *target, ctx) && ok;
    return ok;
  }

private:
  bool selectIn(Block &b, const Target &target, PassContext &ctx) {
    bool ok = true;
    for (auto &opPtr : b.ops) {
      Operation &op = *opPtr;
      for (auto &region : op.regions)
        ok = selectIn(*region, target, ctx) && ok;
      std::string r = op.kind == OpKind::Kernel ? op.callee : opName(op.kind);
      const bool grouped = r == "moe_grouped_swiglu" || r == "moe_grouped_down";
      if (r != "matmul" && r != "moe_experts" && !grouped)
        continue;
      GemmCost g;
      const size_t wi = r == "matmul" ? 1 : r == "moe_grouped_swiglu" ? 3 : 2;
      const Operand &w = op.operands[wi];
      Type wt = w.type(), xt = op.operands[0].type();
      if (!wt.isTensor() || !xt.isTensor())
        continue; // the verifier reports unknown types
      g.type = weightType(w);
      const std::string weightName =
          w.isWeight() && w.weight->name->kind == ExprKind::Str
              ? w.weight->name->s
              : std::string();
      g.weightBytes = weightBytes(w, g.type);
      g.k = constOr(wt.dims.back(), 1);
      g.n = constOr(wt.dims[wt.rank() - 2], 1);
      double rows = activationRows(xt, ctx.maxTokens);
      if (grouped) {
        // Rows are the sorted slots: T*k/E per expert on average; the SwiGLU
        // kernel runs gate and up (two N = F GEMMs) over them.
        double e = constOr(wt.dims[0], 1);
        double slots = activationRows(op.results[0]->type, ctx.maxTokens);
        g.stacks = e;
        g.rows = slots / e;
        if (r == "moe_grouped_swiglu") {
          g.n *= 2;
          g.weightBytes *= 2;
        }
      } else if (r == "moe_experts") {
        // Each token goes to k of E experts: T*k/E rows per expert on
        // average; gate, up and down are three GEMMs over the stack.
        double e = constOr(wt.dims[0], 1);
        double k = constOr(op.operands[1].type().dims.back(), 1);
        g.stacks = e;
        g.rows = rows * k / e;
        g.n *= 3; // gate + up (N = F each) and down (K and N swapped)
      } else {
        g.rows = rows;
      }
      // The f32 policy keeps GEMM arithmetic in f32 (the matrix paths round
      // operands to f16/bf16): only F32-path variants then.
      const MatrixPath f32 = MatrixPath::F32;
      const bool f32Only = target.gpu && ctx.precision == "f32";
      const KernelVariant *best =
          cheapestVariant(target, g, f32Only ? &f32 : nullptr);
      if (!best) {
        std::string known;
        for (const KernelVariant *v : variantsOf(target))
          known += (known.empty() ? "" : ", ") + std::string(v->name);
        ctx.diag.error(
            op.loc,
            fmt::format("target '{}' has no {} kernel variant for "
                        "{} weights{} (its variants: {})",
                        target.name, r, format::ggmlTypeInfo(g.type).irName,
                        weightName.empty() ? ""
                                           : fmt::format(" ('{}')", weightName),
                        known));
        ok = false;
        continue;
      }
      std::erase_if(op.attrs,
                    [](const Attr &a) { return a.name == "variant"; });
      op.attrs.push_back(
          Attr{"variant", Expr::makeStr(best->name, op.loc), op.loc});
    }
    return ok;
  }
};

} // namespace

std::unique_ptr<Pass> createSelectExpertKernelsPass() {
  return std::make_unique<SelectExpertKernelsPass>();
}

} // namespace strata::passes
