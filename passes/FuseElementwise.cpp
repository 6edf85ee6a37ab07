//===- FuseElementwise.cpp - elementwise chains and matmul epilogues ------===//
//
// Chains of elementwise ops (the Unary and Binary classes of the op table,
// numpy broadcasting included) become one fused kernel, so each reads its
// inputs and writes its outputs once instead of once per op. An op whose
// result only an elementwise op reads takes that op and what follows as its
// epilogue, applied as it stores: a matmul's scale, silu, sigmoid, SwiGLU
// product or residual add, a convolution's silu. A group grows from its
// first op through ops that read its values, as long as the group can
// still be placed at one spot of the body (Rewriter); a value also read
// outside the group becomes an extra output. An elementwise group also takes
// in one producer whose result only it reads (the same epilogue, found from
// the other end).
//
// A slice or permute whose result (through reshapes) one op alone reads is
// that op's operand access, not a kernel: it folds into the reader as its
// prologue (the q/k/v split of a fused projection).
//
// A norm whose result (through reshapes) only a rope reads runs with it as
// one row kernel (the k and indexer paths' rms_norm + rope: the normalised
// row stays in shared memory); where a slice feeds the norm, the slice
// folds into the norm instead (MovePrologue) and the rope stays apart, so
// that the row's temporaries stay within shared memory.
//
// A state write is a kernel of its own (its state lives outside the arena),
// so it takes no fused body; the cached convolution takes its silu as an
// attribute instead (act = "silu"), as the prefill's convolution takes it
// as an epilogue: the decode step's silu kernel after each short
// convolution goes.
//
//===----------------------------------------------------------------------===//
#include "ir/Rewrite.h"
#include "passes/Pass.h"

#include <algorithm>

namespace strata::passes {

using namespace ir;

namespace {

/// Largest group: bodies stay small enough to read in a report.
constexpr size_t kMaxGroup = 12;

std::string groupName(const std::vector<Operation *> &group) {
  std::string name;
  for (size_t i = 0; i < group.size() && i < 4; ++i)
    name += (i ? "+" : "") + std::string(opName(group[i]->kind));
  if (group.size() > 4)
    name += "+etc";
  return name;
}

class ElementwiseChain : public RewritePattern {
public:
  const char *name() const override { return "elementwise-chain"; }

  bool matchAndRewrite(Operation &head, Rewriter &rw) override {
    const OpInfo *info = opInfo(head.kind);
    if (!info || info->cls == format::OpClass::View ||
        rw.position(&head) == SIZE_MAX)
      return false;
    const DefUse &du = rw.defUse();
    // Any other op only takes an epilogue that alone reads its one result.
    if (!isElementwise(head) &&
        (head.results.size() != 1 || !du.hasOneUse(head.results[0]) ||
         !isElementwise(*du.uses(head.results[0])[0].user)))
      return false;
    std::vector<Operation *> group{&head};
    auto inGroup = [&](const Operation *op) {
      return std::find(group.begin(), group.end(), op) != group.end();
    };
    auto tryAdd = [&](Operation *op) {
      std::vector<Operation *> bigger = group;
      bigger.push_back(op);
      if (!rw.canFuse(bigger))
        return false;
      group = std::move(bigger);
      return true;
    };
    bool grew = true;
    while (grew && group.size() < kMaxGroup) {
      grew = false;
      // Readers: elementwise ops that read a group value.
      for (size_t g = 0; g < group.size() && !grew; ++g)
        for (const Value *v : group[g]->results)
          for (const Use &u : du.uses(v)) {
            Operation *next = u.user;
            if (!isElementwise(*next) || rw.position(next) == SIZE_MAX ||
                inGroup(next))
              continue;
            if ((grew = tryAdd(next)))
              break;
          }
      // A producer: while the group is elementwise only, one other op whose
      // one result only the group reads joins it (the group becomes its
      // epilogue, e.g. a gated norm's sigmoid and product after the norm).
      bool onlyElementwise =
          std::all_of(group.begin(), group.end(),
                      [](const Operation *op) { return isElementwise(*op); });
      for (size_t g = 0; g < group.size() && !grew && onlyElementwise; ++g)
        for (const Operand &o : group[g]->operands) {
          Operation *p = o.isValue() ? du.definingOp(o.value) : nullptr;
          const OpInfo *info = p ? opInfo(p->kind) : nullptr;
          if (!info || info->cls == format::OpClass::View ||
              isElementwise(*p) || p->results.size() != 1 ||
              rw.position(p) == SIZE_MAX || inGroup(p) ||
              !du.hasOneUse(p->results[0]))
            continue;
          if ((grew = tryAdd(p)))
            break;
        }
    }
    if (group.size() < 2)
      return false;
    std::sort(group.begin(), group.end(), [&](Operation *a, Operation *b) {
      return rw.position(a) < rw.position(b);
    });
    return rw.fuse(group, groupName(group)) != nullptr;
  }
};

/// Whether a slice or permute may fold into its reader's kernel: the code
/// generator reads a GEMM's operands as contiguous rows (so neither folds
/// into matmul or the expert GEMMs) and views the inputs of attention and
/// the delta rule through strided slices (so permutes do not fold there).
bool foldable(OpKind move, OpKind reader) {
  switch (reader) {
  case OpKind::Matmul:
  case OpKind::MoeExperts:
  case OpKind::MoeGroupedSwiglu:
  case OpKind::MoeGroupedDown:
    return false;
  case OpKind::Attention:
  case OpKind::GatedDeltaRule:
    return move == OpKind::Slice;
  default:
    return true;
  }
}

class MovePrologue : public RewritePattern {
public:
  const char *name() const override { return "move-prologue"; }

  bool matchAndRewrite(Operation &move, Rewriter &rw) override {
    if ((move.kind != OpKind::Slice && move.kind != OpKind::Permute) ||
        rw.position(&move) == SIZE_MAX)
      return false;
    const DefUse &du = rw.defUse();
    std::vector<Operation *> group{&move};
    Value *v = move.results[0];
    while (true) {
      if (!du.hasOneUse(v))
        return false;
      Operation *reader = du.uses(v)[0].user;
      if (rw.position(reader) == SIZE_MAX)
        return false;
      group.push_back(reader);
      if (reader->kind != OpKind::Reshape)
        break;
      v = reader->results[0];
    }
    Operation *reader = group.back();
    if (!opInfo(reader->kind) || !foldable(move.kind, reader->kind))
      return false;
    return rw.fuse(group, std::string(opName(move.kind)) + "+" +
                              opName(reader->kind)) != nullptr;
  }
};

/// Folds each silu that alone reads a cached convolution's output into
/// the convolution (act = "silu"). Returns the number folded.
int foldStateEpilogues(Func &f) {
  DefUse du(f.body);
  int folded = 0;
  for (size_t i = 0; i < f.body.ops.size(); ++i) {
    Operation &conv = *f.body.ops[i];
    if (conv.kind != OpKind::Conv1dCached || conv.results.size() != 2 ||
        conv.findAttr("act") || !du.hasOneUse(conv.results[1]))
      continue;
    Operation *act = du.uses(conv.results[1])[0].user;
    if (act->kind != OpKind::Silu || act->results.size() != 1 ||
        !(act->results[0]->type == conv.results[1]->type))
      continue;
    auto at = std::find_if(
        f.body.ops.begin(), f.body.ops.end(),
        [&](const std::unique_ptr<Operation> &op) { return op.get() == act; });
    if (at == f.body.ops.end())
      continue; // read inside a nested region
    conv.attrs.push_back({"act", Expr::makeStr("silu", conv.loc), conv.loc});
    du.replaceAllUsesWith(act->results[0], conv.results[1]);
    du.dropUses(*act);
    f.body.ops.erase(at);
    ++folded;
  }
  return folded;
}

/// The op defining \p v through single-use reshapes, those reshapes
/// appended to \p chain (nearest last); nullptr where \p v is an argument
/// or a reshape's result has other readers.
Operation *throughReshapes(const Value *v, const DefUse &du,
                           std::vector<Operation *> &chain) {
  Operation *d = du.definingOp(v);
  while (d && d->kind == OpKind::Reshape) {
    if (!du.hasOneUse(d->results[0]))
      return nullptr;
    chain.push_back(d);
    const Operand &o = d->operands[0];
    d = o.isValue() ? du.definingOp(o.value) : nullptr;
  }
  return d;
}

class NormRope : public RewritePattern {
public:
  const char *name() const override { return "norm-rope"; }

  bool matchAndRewrite(Operation &rope, Rewriter &rw) override {
    if (rope.kind != OpKind::Rope || rw.position(&rope) == SIZE_MAX ||
        !rope.operands[0].isValue())
      return false;
    const DefUse &du = rw.defUse();
    std::vector<Operation *> group{&rope};
    Operation *norm = throughReshapes(rope.operands[0].value, du, group);
    if (!norm ||
        (norm->kind != OpKind::RmsNorm && norm->kind != OpKind::L2Norm) ||
        norm->results.size() != 1 || !du.hasOneUse(norm->results[0]) ||
        rw.position(norm) == SIZE_MAX || !norm->operands[0].isValue())
      return false;
    // A slice read by the norm alone folds into the norm (MovePrologue).
    std::vector<Operation *> views;
    if (Operation *in = throughReshapes(norm->operands[0].value, du, views))
      if (in->kind == OpKind::Slice && du.hasOneUse(in->results[0]))
        return false;
    group.push_back(norm);
    return rw.fuse(group, std::string(opName(norm->kind)) + "+rope") != nullptr;
  }
};

class FuseElementwisePass : public Pass {
public:
  const char *name() const override { return "fuse-elementwise"; }

  bool run(std::unique_ptr<Module> &m, PassContext &ctx) override {
    if (!checkNotPlanned(*m, name(), ctx))
      return false;
    std::vector<std::unique_ptr<RewritePattern>> patterns;
    patterns.push_back(std::make_unique<ElementwiseChain>());
    patterns.push_back(std::make_unique<MovePrologue>());
    patterns.push_back(std::make_unique<NormRope>());
    for (auto &f : m->funcs) {
      foldStateEpilogues(*f);
      applyPatterns(*f, patterns);
    }
    return true;
  }
};

} // namespace

std::unique_ptr<Pass> createFuseElementwisePass() {
  return std::make_unique<FuseElementwisePass>();
}

} // namespace strata::passes
