//===- FuseHyperConnection.cpp - three kernels per gated-residual site ----===//
//
// The gated-residual read/write of hyper-connection models (qwen4exp:
// ../shared/reference/qwen4exp.md §3.2) as the three-kernel schedule whose
// traffic floor the report prints. Recognised from the IR's structure, not
// from weight names: a site is an `hc_read(xn, g)` whose
//   - xn = hc_norm(R, w), with R optionally = hc_write(R0, F, lambda);
//   - g  = (unary ops, reshape)(matmul(lo, W_up)), every value read once;
//   - lo = (unary ops)(matmul(xf, W_down)), xf = reshape(xn), read once;
// and becomes
//   K1 "hc_write_norm"  = hc_write + hc_norm: R read once and written once,
//                         in place over R0 (tied), plus the normalised image;
//                         where F is the MoE combine's (or scatter's) and
//                         only the write reads it, the combine joins K1;
//   K2 "hc_down_inject" = every matmul that reads xf with its unary epilogue
//                         (the down projection and the injection logits,
//                         sharing the A reads); "hc_down" at a site without
//                         injection (the final mixer);
//   K3 "hc_up_mix"      = the up projection, its sigmoid and the stream mean
//                         as one kernel: the [T, HC, D] gate never leaves it.
// A value read outside its kernel-to-be (an extra use) blocks the site: the
// schedule would have to materialise it.
//
//===----------------------------------------------------------------------===//
#include "ir/Rewrite.h"
#include "passes/Pass.h"

namespace strata::passes {

using namespace ir;

namespace {

bool isTopLevelKind(const Rewriter &rw, const Operation *op, OpKind kind) {
  return op && op->kind == kind && rw.position(op) != SIZE_MAX;
}

bool isUnary(const Operation *op) {
  const OpInfo *info = op ? opInfo(op->kind) : nullptr;
  return info && info->cls == format::OpClass::Unary;
}

/// Walks back from \p v through unary ops (and reshapes when \p views)
/// whose results are read once, to the matmul that starts the chain; the
/// ops go to \p chain. Returns the matmul or nullptr.
Operation *chainToMatmul(const Rewriter &rw, Value *v, bool views,
                         std::vector<Operation *> &chain) {
  const DefUse &du = rw.defUse();
  while (true) {
    Operation *d = du.definingOp(v);
    if (!d || rw.position(d) == SIZE_MAX)
      return nullptr;
    if (d->kind == OpKind::Matmul)
      return d->operands[0].isValue() ? (chain.push_back(d), d) : nullptr;
    bool step = isUnary(d) || (views && d->kind == OpKind::Reshape);
    if (!step || !d->operands[0].isValue())
      return nullptr;
    chain.push_back(d);
    v = d->operands[0].value;
    if (!du.hasOneUse(v))
      return nullptr;
  }
}

class HyperConnectionSite : public RewritePattern {
public:
  const char *name() const override { return "hc-site"; }

  bool matchAndRewrite(Operation &read, Rewriter &rw) override {
    if (read.kind != OpKind::HcRead || !read.operands[0].isValue() ||
        !read.operands[1].isValue())
      return false;
    const DefUse &du = rw.defUse();
    Value *xn = read.operands[0].value;
    Operation *norm = du.definingOp(xn);
    if (!isTopLevelKind(rw, norm, OpKind::HcNorm) ||
        !norm->operands[0].isValue())
      return false;

    // K3: hc_read <- (reshape, unary)* <- matmul(lo, W_up).
    std::vector<Operation *> k3{&read};
    Value *g = read.operands[1].value;
    if (!du.hasOneUse(g))
      return false;
    Operation *up = chainToMatmul(rw, g, /*views=*/true, k3);
    if (!up || !du.hasOneUse(up->results[0]))
      return false;
    Value *lo = up->operands[0].value;

    // K2: lo <- unary* <- matmul(xf, W_down), xf = reshape(xn) or xn; plus
    // every other matmul reading xf with its unary epilogue.
    std::vector<Operation *> k2;
    if (!du.hasOneUse(lo))
      return false;
    Operation *down = chainToMatmul(rw, lo, /*views=*/false, k2);
    if (!down)
      return false;
    Value *xf = down->operands[0].value;
    Operation *view = du.definingOp(xf);
    if (xf != xn &&
        !(isTopLevelKind(rw, view, OpKind::Reshape) &&
          view->operands[0].isValue() && view->operands[0].value == xn))
      return false;
    bool inject = false;
    for (const Use &u : du.uses(xf)) {
      Operation *m = u.user;
      if (m == down || m->kind != OpKind::Matmul || u.operand != 0 ||
          rw.position(m) == SIZE_MAX)
        continue;
      inject = true;
      k2.push_back(m);
      Value *v = m->results[0];
      while (du.hasOneUse(v) && isUnary(du.uses(v)[0].user) &&
             rw.position(du.uses(v)[0].user) != SIZE_MAX) {
        Operation *next = du.uses(v)[0].user;
        k2.push_back(next);
        v = next->results[0];
      }
    }

    // K1: hc_write (when R comes from one) + hc_norm.
    std::vector<Operation *> k1{norm};
    Value *r = norm->operands[0].value;
    Operation *write = du.definingOp(r);
    std::vector<std::pair<Value *, Value *>> ties;
    if (isTopLevelKind(rw, write, OpKind::HcWrite) &&
        write->operands[0].isValue()) {
      k1.push_back(write);
      ties.push_back({r, write->operands[0].value});
      // Where the MoE combine (grouped: the scatter) produces F for this
      // write alone, it joins K1: F never reaches memory.
      Value *f =
          write->operands[1].isValue() ? write->operands[1].value : nullptr;
      Operation *combine = f ? du.definingOp(f) : nullptr;
      if (combine && du.hasOneUse(f) && rw.position(combine) != SIZE_MAX &&
          (combine->kind == OpKind::MoeScatter ||
           combine->kind == OpKind::MoeCombine))
        k1.push_back(combine);
    }

    if (!rw.fuse(k3, "hc_up_mix"))
      return false;
    rw.fuse(k2, inject ? "hc_down_inject" : "hc_down");
    if (k1.size() > 1)
      rw.fuse(k1, k1.size() > 2 ? "hc_combine_write_norm" : "hc_write_norm",
              ties);
    return true;
  }
};

class FuseHyperConnectionPass : public Pass {
public:
  const char *name() const override { return "fuse-hyper-connection"; }

  bool run(std::unique_ptr<Module> &m, PassContext &ctx) override {
    if (!checkNotPlanned(*m, name(), ctx))
      return false;
    std::vector<std::unique_ptr<RewritePattern>> patterns;
    patterns.push_back(std::make_unique<HyperConnectionSite>());
    for (auto &f : m->funcs)
      applyPatterns(*f, patterns);
    return true;
  }
};

} // namespace

std::unique_ptr<Pass> createFuseHyperConnectionPass() {
  return std::make_unique<FuseHyperConnectionPass>();
}

} // namespace strata::passes
