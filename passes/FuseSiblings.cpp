//===- FuseSiblings.cpp - GEMMs that read the same rows as one kernel -----===//
//
// In a plan that decodes, a GEMM of one row is a GEMV: its weight bytes
// take a microsecond or two at the target's bandwidth, while its launch and
// tail cost a few more. The projections that read the same normalised rows
// (attention's q, k, v and indexer q/k; the delta rule's qkv and z, and its
// beta and alpha gates; the shared expert's up and its gate logit) are
// independent of each other, so they run as one kernel: a chain per GEMM
// (with its epilogue), the chains side by side in one launch, each over its
// own blocks (codegen's GEMM family takes several chains, as the
// hyper-connection's K2 does). The rows of A are read once per kernel
// rather than once per GEMM.
//
// A member is a top-level matmul of a weight, or a fused kernel made of one
// such matmul and its elementwise epilogue that reads nothing but A.
// Members join by their weights' class, as the GEMM family selects one form
// for a whole kernel by its rows: f32 weights (the gates and the router,
// whose row-block form needs all chains in f32 weights) with each other;
// quantised and 16-bit weights with each other; a skinny f32 chain (at
// most kSkinnyGemmColumns columns: warp dot products in every form) with
// the latter, where it keeps the f32 group's row-block form. The kernel is
// named after its members ("matmul|matmul+sigmoid").
//
// Plans without state (prefill only) are left as they are: at thousands of
// rows a launch is noise, and their GEMMs keep the forms measured one
// kernel per GEMM (the TMA tile, persistent where it paid).
//
//===----------------------------------------------------------------------===//
#include "ir/OpCost.h"
#include "ir/Rewrite.h"
#include "passes/Pass.h"

#include <algorithm>
#include <map>

namespace strata::passes {

using namespace ir;

namespace {

/// Most GEMMs in one kernel: attention's five projections; the body stays
/// readable in a report.
constexpr size_t kMaxSiblings = 8;

/// The weight classes members join by.
enum class WeightClass { F32, Other };

/// A member: the op, the rows it multiplies and its weights' class.
struct Member {
  Operation *op = nullptr;
  Value *a = nullptr;
  WeightClass cls = WeightClass::Other;
};

/// The class of a matmul's weight operand; nullopt where operand 1 is no
/// bound weight or the output's columns are not constant.
std::optional<WeightClass> classOf(const Operation &mm) {
  if (mm.operands.size() != 2 || !mm.operands[1].isWeight() ||
      mm.results.size() != 1)
    return std::nullopt;
  const Type w = mm.operands[1].type(), y = mm.results[0]->type;
  if (!w.isTensor() || !y.isTensor() || y.dims.empty())
    return std::nullopt;
  std::optional<int64_t> n = y.dims.back().constant();
  if (!n)
    return std::nullopt;
  const bool f32 = !w.elem.isBlock && w.elem.dtype == DType::F32;
  return f32 && *n > kSkinnyGemmColumns ? WeightClass::F32 : WeightClass::Other;
}

/// \p op as a member, or nullopt.
std::optional<Member> memberOf(const Rewriter &rw, Operation &op) {
  if (rw.position(&op) == SIZE_MAX)
    return std::nullopt;
  if (op.kind == OpKind::Matmul) {
    std::optional<WeightClass> cls = classOf(op);
    if (!cls || !op.operands[0].isValue())
      return std::nullopt;
    return Member{&op, op.operands[0].value, *cls};
  }
  // A fused matmul + epilogue reading A alone.
  if (op.kind != OpKind::Fused || op.regions.size() != 1 ||
      op.findAttr("tied") || op.operands.size() != 1 ||
      !op.operands[0].isValue())
    return std::nullopt;
  const Block &body = *op.regions[0];
  if (body.args.size() != 1)
    return std::nullopt;
  const Operation *mm = nullptr;
  for (const auto &inner : body.ops) {
    if (inner->kind == OpKind::Yield)
      continue;
    if (inner->kind == OpKind::Matmul && !mm) {
      mm = inner.get();
      continue;
    }
    if (!isElementwise(*inner) && inner->kind != OpKind::Reshape)
      return std::nullopt;
  }
  if (!mm || !mm->operands[0].isValue() ||
      mm->operands[0].value != body.args[0])
    return std::nullopt;
  std::optional<WeightClass> cls = classOf(*mm);
  if (!cls)
    return std::nullopt;
  return Member{&op, op.operands[0].value, *cls};
}

/// The kernel's name: its members' names in body order.
std::string siblingName(const std::vector<Operation *> &members) {
  std::string name;
  for (const Operation *op : members)
    name += (name.empty() ? "" : "|") + (op->kind == OpKind::Fused
                                             ? op->callee
                                             : std::string(opName(op->kind)));
  return name;
}

class FuseSiblingsPass : public Pass {
public:
  const char *name() const override { return "fuse-siblings"; }

  bool run(std::unique_ptr<Module> &m, PassContext &ctx) override {
    if (!checkNotPlanned(*m, name(), ctx))
      return false;
    if (ctx.maxContext <= 0)
      return true;
    for (auto &f : m->funcs) {
      Rewriter rw(*f);
      // Groups by (A, class), in body order of their first members.
      std::map<std::pair<const Value *, WeightClass>, size_t> index;
      std::vector<std::vector<Operation *>> groups;
      for (auto &op : f->body.ops) {
        std::optional<Member> mem = memberOf(rw, *op);
        if (!mem)
          continue;
        auto key = std::make_pair(static_cast<const Value *>(mem->a), mem->cls);
        auto [it, fresh] = index.emplace(key, groups.size());
        if (fresh)
          groups.emplace_back();
        if (groups[it->second].size() < kMaxSiblings)
          groups[it->second].push_back(mem->op);
      }
      // Each member reads only A and weights, so a group fits one spot
      // unless a state write or its reader is among them (Rewriter refuses).
      for (const std::vector<Operation *> &g : groups)
        if (g.size() >= 2 && rw.canFuse(g))
          rw.fuseKernels(g, siblingName(g));
    }
    return true;
  }
};

} // namespace

std::unique_ptr<Pass> createFuseSiblingsPass() {
  return std::make_unique<FuseSiblingsPass>();
}

} // namespace strata::passes
