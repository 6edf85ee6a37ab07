//===- KeepLastPosition.cpp - logits of the last position only ------------===//
//
// Generation needs the next token's logits, the last position's, not the
// LM head over every prompt position (at T = 16384 on qwen4exp: 20.8 TFLOP
// and a 16 GB logits buffer). With `strata-compile --logits last`, each
// returned value of @main whose rows are the prompt's positions ([T, ...])
// keeps its last row only: where a matmul produces it (the LM head), the
// matmul reads the last row of its input instead,
//
//   %logits = matmul(%h, W)   =>   %h.last = last_rows(%h) {n = 1}
//                                  %logits = matmul(%h.last, W)  : [1, V]
//
// and any other returned value is cut after it is computed. Without the
// option the pass changes nothing.
//
//===----------------------------------------------------------------------===//
#include "ir/DefUse.h"
#include "passes/Pass.h"

#include <fmt/format.h>

namespace strata::passes {

using namespace ir;

namespace {

bool rowsAreTokens(const Type &t) {
  if (!t.isTensor() || t.rank() < 1)
    return false;
  auto lin = t.dims[0].affineIn("T");
  return lin && lin->coef == 1 && lin->div == 1 && lin->constant == 0;
}

class KeepLastPositionPass : public Pass {
public:
  const char *name() const override { return "keep-last-position"; }

  bool run(std::unique_ptr<Module> &m, PassContext &ctx) override {
    if (!checkNotPlanned(*m, name(), ctx))
      return false;
    if (!ctx.lastPositionOnly)
      return true;
    Func *main = m->findFunc("main");
    if (m->funcs.size() != 1 || !main || main->body.ops.empty() ||
        main->body.ops.back()->kind != OpKind::Return) {
      ctx.diag.error(m->loc, "keep-last-position needs one flat @main; run "
                             "expand first");
      return false;
    }
    DefUse du(main->body);
    Operation &ret = *main->body.ops.back();
    for (Operand &out : ret.operands) {
      if (!out.isValue() || !rowsAreTokens(out.value->type))
        continue;
      Operation *head = du.definingOp(out.value);
      bool viaHead = head && head->kind == OpKind::Matmul &&
                     du.hasOneUse(out.value) && head->operands[0].isValue() &&
                     rowsAreTokens(head->operands[0].value->type);
      Value *cut = viaHead ? head->operands[0].value : out.value;
      auto last = std::make_unique<Operation>();
      last->kind = OpKind::LastRows;
      last->loc = viaHead ? head->loc : ret.loc;
      Operand in;
      in.value = cut;
      in.loc = last->loc;
      last->operands.push_back(in);
      last->attrs.push_back(Attr{"n", Expr::makeInt(1, last->loc), last->loc});
      Type t = cut->type;
      t.dims[0] = Dim::constant(1);
      Value *lastValue = main->newValue(cut->name + ".last", t, last->loc);
      last->results.push_back(lastValue);
      last->declaredTypes.push_back(std::nullopt);
      // Just before its reader: the head, or the return.
      auto &ops = main->body.ops;
      auto at = std::find_if(ops.begin(), ops.end(), [&](const auto &p) {
        return p.get() == (viaHead ? head : &ret);
      });
      ops.insert(at, std::move(last));
      if (viaHead) {
        head->operands[0].value = lastValue;
        Type r = head->results[0]->type;
        r.dims[0] = Dim::constant(1);
        head->results[0]->type = r;
        for (auto &d : head->declaredTypes)
          if (d)
            d->dims[0] = Dim::constant(1);
      } else {
        out.value = lastValue;
      }
    }
    // The function's result types follow.
    for (size_t k = 0; k < ret.operands.size() && k < main->resultTypes.size();
         ++k)
      if (ret.operands[k].isValue())
        main->resultTypes[k] = ret.operands[k].value->type;
    return true;
  }
};

} // namespace

std::unique_ptr<Pass> createKeepLastPositionPass() {
  return std::make_unique<KeepLastPositionPass>();
}

} // namespace strata::passes
