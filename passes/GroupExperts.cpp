//===- GroupExperts.cpp - routed experts as sorted, grouped GEMMs ---------===//
//
// The MoE block as every target runs it: instead of a SwiGLU per (token,
// slot), the slots are sorted by expert once and each expert's rows form one
// contiguous GEMM, so an expert's weights stream once per layer:
//
//   %y = moe_experts(%x, %ids, gate, up, down)
//   %m = moe_combine(%y, %w [, %s [, %g]])
// =>
//   %y.off, %y.perm, %y.slot_rows = moe_sort(%ids) {experts = E}
//   %y.h = moe_grouped_swiglu(%x, %y.perm, %y.off, gate, up)
//   %y.rows = moe_grouped_down(%y.h, %y.off, down)
//   %m = moe_scatter(%y.rows, %y.slot_rows, %w [, %s [, %g]])
//
// The scatter reads where each slot's row went (slot_rows, the inverse of
// perm), so a kernel writing one token's output finds its k rows directly.
//
// The grouped form computes the per-slot form's sums in the same order, so
// the logits are equal (runtime/cpu/Moe.cpp). Applies where the expert
// outputs are read by a combine alone.
//
//===----------------------------------------------------------------------===//
#include "ir/DefUse.h"
#include "passes/Pass.h"

#include <fmt/format.h>

namespace strata::passes {

using namespace ir;

namespace {

Operand valueOperand(Value *v, SourceLoc loc) {
  Operand o;
  o.value = v;
  o.loc = loc;
  return o;
}

class GroupExpertsPass : public Pass {
public:
  const char *name() const override { return "group-experts"; }

  bool run(std::unique_ptr<Module> &m, PassContext &ctx) override {
    if (!checkNotPlanned(*m, name(), ctx))
      return false;
    for (auto &f : m->funcs)
      rewrite(*f);
    return true;
  }

private:
  static void rewrite(Func &f) {
    DefUse du(f.body);
    std::vector<std::unique_ptr<Operation>> out;
    std::map<const Operation *, std::unique_ptr<Operation>> combineFor;
    for (auto &opPtr : f.body.ops) {
      Operation &op = *opPtr;
      if (auto it = combineFor.find(&op); it != combineFor.end()) {
        out.push_back(std::move(it->second));
        continue;
      }
      Operation *combine = nullptr;
      if (op.kind == OpKind::MoeExperts && du.hasOneUse(op.results[0]) &&
          du.uses(op.results[0])[0].operand == 0 &&
          du.uses(op.results[0])[0].user->kind == OpKind::MoeCombine)
        combine = du.uses(op.results[0])[0].user;
      Type gate = op.operands.size() == 5 ? op.operands[2].type() : Type();
      Type y = op.results.empty() ? Type() : op.results[0]->type;
      auto experts = gate.isTensor() && gate.rank() == 3
                         ? gate.dims[0].constant()
                         : std::nullopt;
      if (!combine || !experts || !y.isTensor() || y.rank() != 3) {
        out.push_back(std::move(opPtr));
        continue;
      }
      const SourceLoc loc = op.loc;
      const std::string &base = op.results[0]->name;
      Dim slots = y.dims[0] * y.dims[1];
      auto make = [&](OpKind kind, std::vector<Operand> operands,
                      std::vector<std::pair<std::string, Type>> results) {
        auto n = std::make_unique<Operation>();
        n->kind = kind;
        n->loc = loc;
        n->operands = std::move(operands);
        for (auto &[suffix, type] : results) {
          n->results.push_back(f.newValue(base + "." + suffix, type, loc));
          n->declaredTypes.push_back(std::nullopt);
        }
        return n;
      };
      auto sort = make(
          OpKind::MoeSort, {op.operands[1]},
          {{"off", Type::tensor(ElemType::of(DType::I32),
                                {Dim::constant(*experts + 1)})},
           {"perm", Type::tensor(ElemType::of(DType::I32), {slots})},
           // Not "rows": that is the grouped down GEMM's result.
           {"slot_rows", Type::tensor(ElemType::of(DType::I32), {slots})}});
      sort->attrs.push_back(Attr{"experts", Expr::makeInt(*experts, loc), loc});
      Value *off = sort->results[0], *perm = sort->results[1],
            *slotRows = sort->results[2];
      auto swiglu =
          make(OpKind::MoeGroupedSwiglu,
               {op.operands[0], valueOperand(perm, loc), valueOperand(off, loc),
                op.operands[2], op.operands[3]},
               {{"h", Type::tensor(ElemType::of(DType::F32),
                                   {slots, gate.dims[1]})}});
      auto down = make(OpKind::MoeGroupedDown,
                       {valueOperand(swiglu->results[0], loc),
                        valueOperand(off, loc), op.operands[4]},
                       {{"rows", Type::tensor(ElemType::of(DType::F32),
                                              {slots, y.dims[2]})}});
      // The combine becomes a scatter of the rows, where the combine was.
      auto scatter = std::make_unique<Operation>();
      scatter->kind = OpKind::MoeScatter;
      scatter->loc = combine->loc;
      scatter->operands.push_back(valueOperand(down->results[0], loc));
      scatter->operands.push_back(valueOperand(slotRows, loc));
      for (size_t i = 1; i < combine->operands.size(); ++i)
        scatter->operands.push_back(combine->operands[i]);
      scatter->results = combine->results;
      scatter->declaredTypes = combine->declaredTypes;
      combineFor[combine] = std::move(scatter);
      out.push_back(std::move(sort));
      out.push_back(std::move(swiglu));
      out.push_back(std::move(down));
    }
    f.body.ops = std::move(out);
  }
};

} // namespace

std::unique_ptr<Pass> createGroupExpertsPass() {
  return std::make_unique<GroupExpertsPass>();
}

} // namespace strata::passes
