//===- FuseRows.cpp - a decode step's row kernels, fewer launches ---------===//
//
// In a plan that decodes, a row kernel (a block a row: norms, rope, the
// experts' scatter, elementwise chains) moves a few kilobytes a step, so its
// launch and its wait on the kernel before it cost more than its work: the
// Qwen3-MoE decode step spent ~45 % of its kernel time in such kernels
// (docs/PERFORMANCE.md, H100, 2026-12-07). Two row kernels over the same
// rows become one launch:
//
// - one reads what the other writes (vertical: the residual add after the
//   experts' scatter and the next layer's rms_norm; the value passes in the
//   block's shared memory, and stays an output where others read it);
// - neither reads the other (horizontal: q's and k's norm + rope, each over
//   its own heads of the same token).
//
// A row kernel here is an op, or a fused kernel of ops, that the code
// generator's row family prints as a block a row (codegen/row/): every op
// reads the values of the group at the block's own row. That holds for the
// elementwise ops, rms_norm, l2_norm, hc_norm, rope, reshape and a slice
// of other than the row dim (row-local ops); moe_scatter and moe_combine
// read their expert rows at any row, so they join only where none of their
// operands is the group's. Every value a member writes has the rows as its
// leading dim. A state write or reader stays alone (Rewriter refuses it),
// as do the kernels of other families (GEMMs, attention, routing, sort).
//
// Groups grow greedily in body order: each row kernel with the nearest
// later one of the same rows, where Rewriter can place the pair at one
// spot (a kernel in between that reads the first and feeds the second
// keeps them apart), and where the merged kernel's row temporaries fit the
// shared memory the row family keeps them in (q's slice, norm and rope in
// the Qwen4-Exp attention layers would not: the slice + norm kernel and the
// rope stay apart there, as fuse-elementwise left them). Prefill-only plans are
// left as they are (a launch is noise at thousands of rows, and their kernels
// keep the forms measured).
// `--skip-pass fuse-rows` is the A/B.
//
//===----------------------------------------------------------------------===//
#include "ir/Rewrite.h"
#include "ir/Target.h"
#include "passes/Pass.h"

#include <algorithm>

namespace strata::passes {

using namespace ir;

namespace {

/// Most ops in one row kernel: the body stays readable in a report.
constexpr size_t kMaxRowOps = 16;

/// How an op may take part in a row kernel.
enum class RowUse {
  No,       ///< not a row op
  Local,    ///< reads its operands at the block's own row
  Producer, ///< writes its own row, reads some operand at any row
};

RowUse rowUse(const Operation &op) {
  if (isElementwise(op))
    return RowUse::Local;
  switch (op.kind) {
  case OpKind::RmsNorm:
  case OpKind::L2Norm:
  case OpKind::HcNorm:
  case OpKind::Rope:
  case OpKind::Reshape:
    return RowUse::Local;
  case OpKind::Slice: {
    const Attr *axis = op.findAttr("axis");
    return axis && axis->value->kind == ExprKind::Int && axis->value->i != 0
               ? RowUse::Local
               : RowUse::No;
  }
  case OpKind::MoeScatter:
  case OpKind::MoeCombine:
    return RowUse::Producer;
  default:
    return RowUse::No;
  }
}

/// The leading dim of every result of \p op, or nullopt where they differ
/// or one is no tensor with dims.
std::optional<Dim> rowsOf(const Operation &op) {
  std::optional<Dim> rows;
  for (const Value *r : op.results) {
    if (!r->type.isTensor() || r->type.dims.empty())
      return std::nullopt;
    if (rows && !(*rows == r->type.dims[0]))
      return std::nullopt;
    rows = r->type.dims[0];
  }
  return rows;
}

/// The ops a member contributes: itself, or a fused kernel's body.
std::vector<const Operation *> opsOf(const Operation &m) {
  std::vector<const Operation *> ops;
  if (m.kind != OpKind::Fused) {
    ops.push_back(&m);
    return ops;
  }
  for (const auto &inner : m.regions[0]->ops)
    if (inner->kind != OpKind::Yield)
      ops.push_back(inner.get());
  return ops;
}

/// A top-level row kernel and the rows it writes, or nullopt.
std::optional<Dim> rowKernel(const Rewriter &rw, const Operation &op) {
  // A top-level view is no kernel: fused, it would become a copy.
  const OpInfo *info = opInfo(op.kind);
  if (rw.position(&op) == SIZE_MAX ||
      (info && info->cls == format::OpClass::View))
    return std::nullopt;
  if (op.kind == OpKind::Fused &&
      (op.regions.size() != 1 || op.findAttr("tied")))
    return std::nullopt;
  // The fused kernel's results are its body's yielded values: checking
  // every inner value checks them too.
  std::optional<Dim> rows;
  for (const Operation *inner : opsOf(op)) {
    if (rowUse(*inner) == RowUse::No)
      return std::nullopt;
    std::optional<Dim> r = rowsOf(*inner);
    if (!r || (rows && !(*rows == *r)))
      return std::nullopt;
    rows = r;
  }
  return rows;
}

/// Whether a producer (moe_scatter, moe_combine) of member \p b reads a
/// value member \p a writes: inside one kernel it would read another row of
/// a block's shared memory.
bool producerReads(const Operation &a, const Operation &b) {
  for (const Operation *inner : opsOf(b)) {
    if (rowUse(*inner) != RowUse::Producer)
      continue;
    // Operands of a fused body's op are block arguments; map them back to
    // the kernel's operands by position.
    for (const Operand &o : inner->operands) {
      if (!o.isValue())
        continue;
      const Value *v = o.value;
      if (b.kind == OpKind::Fused) {
        const std::vector<Value *> &args = b.regions[0]->args;
        auto at = std::find(args.begin(), args.end(), v);
        if (at == args.end())
          continue; // defined inside b's own body: b is a kernel already
        v = b.operands[at - args.begin()].value;
      }
      if (std::find(a.results.begin(), a.results.end(), v) != a.results.end())
        return true;
    }
  }
  return false;
}

/// The merged kernel's name: the members' names, "+" where the second
/// reads the first, "|" where they run side by side.
std::string mergedName(const Operation &a, const Operation &b, bool reads) {
  auto nameOf = [](const Operation &op) {
    return op.kind == OpKind::Fused ? op.callee : std::string(opName(op.kind));
  };
  return nameOf(a) + (reads ? "+" : "|") + nameOf(b);
}

/// Bytes of one row of \p v (f32 and i32 temporaries: 4 an element); a
/// large number where its row is not constant.
int64_t rowBytes(const Value &v) {
  int64_t n = 4;
  for (size_t d = 1; d < v.type.dims.size(); ++d) {
    std::optional<int64_t> c = v.type.dims[d].constant();
    if (!c)
      return INT64_MAX / 4;
    n *= *c;
  }
  return n;
}

/// The bytes a row of the temporaries of \p a and \p b merged takes:
/// each fused body's values it does not yield, and the members' results
/// that nothing outside the pair reads.
int64_t mergedTempBytes(const DefUse &du, const Operation &a,
                        const Operation &b) {
  int64_t bytes = 0;
  for (const Operation *m : {&a, &b}) {
    if (m->kind == OpKind::Fused) {
      std::vector<const Value *> yielded;
      for (const auto &inner : m->regions[0]->ops)
        if (inner->kind == OpKind::Yield)
          for (const Operand &o : inner->operands)
            yielded.push_back(o.value);
      for (const Operation *inner : opsOf(*m))
        for (const Value *r : inner->results)
          if (std::find(yielded.begin(), yielded.end(), r) == yielded.end())
            bytes += rowBytes(*r);
    }
    for (const Value *r : m->results) {
      const std::vector<Use> &uses = du.uses(r);
      if (std::all_of(uses.begin(), uses.end(), [&](const Use &u) {
            return u.user == &a || u.user == &b;
          }))
        bytes += rowBytes(*r);
    }
  }
  return bytes;
}

/// The shared memory the row family keeps a row's temporaries in: the
/// smallest static budget of the GPU targets, less what the family's own
/// reductions take (codegen's staticSharedBudget). Past it the temporaries
/// go to a global workspace: a merge that needs that is not made.
int64_t rowTempBudget() {
  int64_t v = INT64_MAX;
  for (const Target &t : allTargets())
    if (t.gpu)
      v = std::min(v, t.staticSharedPerBlock);
  return v - 4 * 1024;
}

/// Whether \p b reads a result of \p a.
bool reads(const Operation &a, const Operation &b) {
  for (const Operand &o : b.operands)
    if (o.isValue() && std::find(a.results.begin(), a.results.end(), o.value) !=
                           a.results.end())
      return true;
  return false;
}

/// Fuses members \p a and \p b (top-level, a before b) into one kernel;
/// false (IR unchanged) where it cannot.
bool merge(Rewriter &rw, Operation *a, Operation *b) {
  if (opsOf(*a).size() + opsOf(*b).size() > kMaxRowOps ||
      producerReads(*a, *b) ||
      mergedTempBytes(rw.defUse(), *a, *b) > rowTempBudget() ||
      !rw.canFuse({a, b}))
    return false;
  return rw.fuseKernels({a, b}, mergedName(*a, *b, reads(*a, *b))) != nullptr;
}

class FuseRowsPass : public Pass {
public:
  const char *name() const override { return "fuse-rows"; }

  bool run(std::unique_ptr<Module> &m, PassContext &ctx) override {
    if (!checkNotPlanned(*m, name(), ctx))
      return false;
    if (ctx.maxContext <= 0)
      return true;
    for (auto &f : m->funcs) {
      Rewriter rw(*f);
      // Each row kernel with the nearest later one of the same rows, until
      // no pair merges; a merge restarts from the merged kernel's spot.
      size_t i = 0;
      while (i < f->body.ops.size()) {
        Operation *a = f->body.ops[i].get();
        std::optional<Dim> rows = rowKernel(rw, *a);
        Operation *b = nullptr;
        for (size_t j = i + 1; rows && j < f->body.ops.size() && !b; ++j) {
          std::optional<Dim> r = rowKernel(rw, *f->body.ops[j]);
          if (r && *r == *rows)
            b = f->body.ops[j].get();
        }
        if (b && merge(rw, a, b)) {
          i = std::min(i, rw.lastRewriteStart());
          continue;
        }
        ++i;
      }
    }
    return true;
  }
};

} // namespace

std::unique_ptr<Pass> createFuseRowsPass() {
  return std::make_unique<FuseRowsPass>();
}

} // namespace strata::passes
