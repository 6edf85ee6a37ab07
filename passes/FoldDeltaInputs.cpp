//===- FoldDeltaInputs.cpp - the delta step reads its packed q/k/v row ----===//
//
// The gated delta net projects one row of q, k and v together (qkv, after
// its convolution), then slices it three ways and l2-normalises q and k per
// head before the recurrence:
//
//   %q0 = slice(%x) {axis = 1, start = 0, end = Hk*Dk}     %q1 = reshape(%q0)
//   %k0 = slice(%x) {axis = 1, start = Hk*Dk, end = 2*Hk*Dk}  ...
//   %v0 = slice(%x) {axis = 1, start = 2*Hk*Dk, end = C}   %v = reshape(%v0)
//   %q = l2_norm(%q1) {eps, form = "add"}    %k = l2_norm(%k1) {eps, ...}
//   %st1, %o = gated_delta_cached(%st, %q, %k, %v, %g, %beta, %seq, %pos)
//
// In a decode step each of those is a kernel of a few hundred bytes (three
// a layer: 108 of the full Qwen4-Exp's 1,195), while the step's block
// already reads every q and k value of its head. This pass gives the step
// the packed row instead:
//
//   %st1, %o = gated_delta_qkv_cached(%st, %x, %g, %beta, %seq, %pos)
//                {hk = Hk, eps, scale, heads}
//
// whose kernel normalises q and k itself; the slices and norms are left
// without readers for dce. The CPU backend normalises with l2_norm's own
// row function, so a plan's results are bit for bit those of the unfolded
// ops. Only the cached step (plans that decode) is folded: the prefill's
// chunked rule keeps its inputs (at thousands of rows the slices are
// noise, and its kernels read q and k as tiles).
//
//===----------------------------------------------------------------------===//
#include "ir/DefUse.h"
#include "passes/Pass.h"

#include <optional>

namespace strata::passes {

using namespace ir;

namespace {

/// The literal int attribute \p name of \p op.
std::optional<int64_t> intOf(const Operation &op, const char *name) {
  const Attr *a = op.findAttr(name);
  if (!a || !a->value || a->value->kind != ExprKind::Int)
    return std::nullopt;
  return a->value->i;
}

/// The constant dims of \p v's type, or an empty vector.
std::vector<int64_t> dimsOf(const Value *v) {
  std::vector<int64_t> out;
  if (!v->type.isTensor())
    return {};
  for (const Dim &d : v->type.dims) {
    std::optional<int64_t> c = d.constant();
    out.push_back(c ? *c : -1);
  }
  return out;
}

/// A value read as reshape(slice(x)) of columns [start, end) of a rank-2
/// x, or nothing.
struct SliceOf {
  Value *x = nullptr;
  int64_t start = 0, end = 0;
};

std::optional<SliceOf> reshapedSlice(const DefUse &du, const Operand &in) {
  if (!in.isValue())
    return std::nullopt;
  const Operation *rs = du.definingOp(in.value);
  if (!rs || rs->kind != OpKind::Reshape || !rs->operands[0].isValue())
    return std::nullopt;
  const Operation *sl = du.definingOp(rs->operands[0].value);
  if (!sl || sl->kind != OpKind::Slice || !sl->operands[0].isValue())
    return std::nullopt;
  Value *x = sl->operands[0].value;
  auto axis = intOf(*sl, "axis"), start = intOf(*sl, "start"),
       end = intOf(*sl, "end");
  if (!x->type.isTensor() || x->type.rank() != 2 || !axis || !start || !end ||
      (*axis != 1 && *axis != -1))
    return std::nullopt;
  return SliceOf{x, *start, *end};
}

/// The input of an l2_norm {form = "add"} and its eps, or nothing.
std::optional<std::pair<const Operand *, double>> normOf(const DefUse &du,
                                                         const Operand &in) {
  if (!in.isValue())
    return std::nullopt;
  const Operation *n = du.definingOp(in.value);
  if (!n || n->kind != OpKind::L2Norm)
    return std::nullopt;
  const Attr *form = n->findAttr("form"), *eps = n->findAttr("eps");
  if (!form || !form->value || form->value->kind != ExprKind::Str ||
      form->value->s != "add" || !eps || !eps->value ||
      eps->value->kind != ExprKind::Float)
    return std::nullopt;
  return std::make_pair(&n->operands[0], eps->value->f);
}

/// Folds \p op (a gated_delta_cached) if its q, k and v are the pattern;
/// returns whether it did.
bool fold(const DefUse &du, Operation &op) {
  if (op.operands.size() != 8 || op.results.size() != 2)
    return false;
  auto qn = normOf(du, op.operands[1]), kn = normOf(du, op.operands[2]);
  if (!qn || !kn || qn->second != kn->second)
    return false;
  auto q = reshapedSlice(du, *qn->first), k = reshapedSlice(du, *kn->first),
       v = reshapedSlice(du, op.operands[3]);
  if (!q || !k || !v || q->x != k->x || q->x != v->x)
    return false;
  const std::vector<int64_t> qd = dimsOf(qn->first->value),
                             vd = dimsOf(op.operands[3].value),
                             xd = dimsOf(q->x),
                             sd = dimsOf(op.operands[0].value);
  if (qd.size() != 3 || vd.size() != 3 || xd.size() != 2 || sd.size() != 4)
    return false;
  const int64_t hk = qd[1], dk = qd[2], h = vd[1], dv = vd[2], a = hk * dk;
  if (hk <= 0 || dk <= 0 || h <= 0 || dv <= 0 || sd[1] != h || sd[2] != dk ||
      sd[3] != dv || q->start != 0 || q->end != a || k->start != a ||
      k->end != 2 * a || v->start != 2 * a || v->end != xd[1] ||
      xd[1] != 2 * a + h * dv)
    return false;
  std::vector<Operand> ins{op.operands[0], Operand{},      op.operands[4],
                           op.operands[5], op.operands[6], op.operands[7]};
  ins[1].value = q->x;
  ins[1].loc = op.operands[1].loc;
  std::vector<Attr> attrs{
      Attr{"hk", Expr::makeInt(hk, op.loc), op.loc},
      Attr{"eps", Expr::makeFloat(qn->second, op.loc), op.loc}};
  for (const char *name : {"scale", "heads"})
    if (const Attr *at = op.findAttr(name))
      attrs.push_back(*at);
  op.kind = OpKind::GatedDeltaQkvCached;
  op.operands = std::move(ins);
  op.attrs = std::move(attrs);
  return true;
}

class FoldDeltaInputsPass : public Pass {
public:
  const char *name() const override { return "fold-delta-inputs"; }

  bool run(std::unique_ptr<Module> &m, PassContext &ctx) override {
    if (!checkNotPlanned(*m, name(), ctx))
      return false;
    Func *main = m->findFunc("main");
    if (!main)
      return true;
    DefUse du(main->body);
    for (auto &op : main->body.ops)
      if (op->kind == OpKind::GatedDeltaCached)
        fold(du, *op);
    return true;
  }
};

} // namespace

std::unique_ptr<Pass> createFoldDeltaInputsPass() {
  return std::make_unique<FoldDeltaInputsPass>();
}

} // namespace strata::passes
