//===- AddGreedyIds.cpp - the greedy token of each logits row -------------===//
//
// A decode step of B rows returns B rows of logits (B x 248K floats on
// qwen4exp: 16 MB at B = 16), and greedy decoding wants one id of each:
// 64 bytes. Copying the rows to the host and scanning them there costs a
// step milliseconds. With `strata-compile --greedy-ids on` (the default of
// plans that decode, where @main returns logits [rows, vocab] alone) @main
// returns a second value, the argmax of each row of its first (the logits),
//
//   return %logits            =>   %logits.ids = argmax(%logits) : i32[T]
//                                  return %logits, %logits.ids
//
// so the runtime reads B ids where it needs no logits (Session::decodeGreedy)
// and the logits where it does (sampling, logprobs). Without the option the
// pass changes nothing.
//
//===----------------------------------------------------------------------===//
#include "passes/Pass.h"

#include <fmt/format.h>

namespace strata::passes {

using namespace ir;

namespace {

class AddGreedyIdsPass : public Pass {
public:
  const char *name() const override { return "add-greedy-ids"; }

  bool run(std::unique_ptr<Module> &m, PassContext &ctx) override {
    if (!checkNotPlanned(*m, name(), ctx))
      return false;
    using GreedyIds = PassContext::GreedyIds;
    if (ctx.greedyIds == GreedyIds::Off)
      return true;
    Func *main = m->findFunc("main");
    if (m->funcs.size() != 1 || !main || main->body.ops.empty() ||
        main->body.ops.back()->kind != OpKind::Return) {
      ctx.diag.error(m->loc, "add-greedy-ids needs one flat @main; run "
                             "expand first");
      return false;
    }
    Operation &ret = *main->body.ops.back();
    const Type *t = !ret.operands.empty() && ret.operands[0].isValue()
                        ? &ret.operands[0].value->type
                        : nullptr;
    const bool isLogits = t && t->isTensor() && t->rank() == 2 &&
                          t->elem.isFloat() && ret.operands.size() == 1;
    if (!isLogits && ctx.greedyIds == GreedyIds::WhereLogits)
      return true; // not a language model's head: nothing to add
    if (!t || !t->isTensor() || t->rank() != 2 || !t->elem.isFloat()) {
      ctx.diag.error(ret.loc,
                     fmt::format("greedy ids (strata-compile --greedy-ids "
                                 "on) need @main's first result to be "
                                 "logits [rows, vocab] of floats, not {}",
                                 t ? t->str() : std::string("a constant")));
      return false;
    }
    if (ret.operands.size() != 1) {
      ctx.diag.error(ret.loc,
                     fmt::format("greedy ids (strata-compile --greedy-ids "
                                 "on) are @main's second result, but it "
                                 "returns {} values already",
                                 ret.operands.size()));
      return false;
    }
    Value *logits = ret.operands[0].value;
    auto op = std::make_unique<Operation>();
    op->kind = OpKind::Argmax;
    op->loc = ret.loc;
    Operand in;
    in.value = logits;
    in.loc = ret.loc;
    op->operands.push_back(in);
    Value *ids = main->newValue(
        logits->name + ".ids",
        Type::tensor(ElemType::of(DType::I32), {t->dims[0]}), ret.loc);
    op->results.push_back(ids);
    op->declaredTypes.push_back(std::nullopt);
    auto &ops = main->body.ops;
    ops.insert(ops.end() - 1, std::move(op));
    Operand out;
    out.value = ids;
    out.loc = ret.loc;
    ret.operands.push_back(out);
    main->resultTypes.resize(1);
    main->resultTypes.push_back(ids->type);
    return true;
  }
};

} // namespace

std::unique_ptr<Pass> createAddGreedyIdsPass() {
  return std::make_unique<AddGreedyIdsPass>();
}

} // namespace strata::passes
