//===- SortEmitter.cpp - the sort/route family: moe_sort ------------------===//
//
// moe_sort over slices of slots: a pre-launch counts each slice's experts
// into the workspace, the kernel scans the counts and ranks its slice
// stably (codegen/device/sort/MoeSort.h), in the form selectSort chose
// (SortForm.h); with moe-sort-one, decode-sized runs in one launch of one
// block and the two launches an alternate. moe_route alone is
// sort/RouteEmitter.cpp.
//
//===----------------------------------------------------------------------===//
#include "codegen/EmitterImpl.h"
#include "codegen/Options.h"
#include "codegen/sort/SortForm.h"

#include <string>
#include <utility>

namespace strata::codegen::detail {

using format::BodyOp;
using format::Recipe;

void emitSortKernel(Emitter &e) {
  if (e.body.size() == 1 && e.body[0].recipe == Recipe::MoeRoute)
    return emitRouteKernel(e);
  if (e.body.size() == 2 && e.body[0].recipe == Recipe::MoeRoute &&
      e.body[1].recipe == Recipe::MoeSort)
    return emitRouteSortKernel(e);
  if (e.body.size() != 1)
    throw Unsupported("moe_sort with a fused body");
  const BodyOp &op = e.body[0];
  Tensor ids = e.tensor(op.inputs[0]);
  int64_t experts = e.intAttr(op, "experts");
  // The block and slice (SortForm.h): two launches over slices of slots
  // (S / slice + 1 blocks).
  SortProblem sp;
  sp.experts = experts;
  sp.state = !e.plan.states.empty();
  sp.oneOption = option(e.plan, Opt::MoeSortOne) != 0;
  sp.rowsAreTokens = ids.shape[0].coef == 1 && ids.shape[0].constant == 0 &&
                     ids.shape[0].div == 1;
  const SortForm form = selectSort(sp);
  if (!form.fits)
    throw Unsupported("too many experts for one block's counts");
  const int kThreads = form.threads;
  const int64_t kSlice = form.slice;
  int64_t k = constProduct(ids.shape, 1);
  e.workspace = true;
  std::string params = e.params();
  std::string slots = fmt::format("{} * {}L", dimExpr(ids.shape[0]), k);
  const char *rowsOut = e.kernel.outputs.size() > 2 ? "out2" : "(int32_t *)0";
  format::PlanDim rows = ids.shape[0];
  if (rows.div != 1)
    throw Unsupported("moe_sort over a divided token count");
  // S / kSlice + 1 blocks, S = k (coef T + constant); one more where the
  // constant's share may round down (PlanDim floors coef T alone), so the
  // grid covers what the kernels count (extra blocks have empty slices).
  format::PlanDim blocks{k * rows.coef,
                         k * rows.constant / kSlice + 1 +
                             (k * rows.constant % kSlice != 0),
                         kSlice};
  if (rows.coef == 0)
    blocks = {0, k * rows.constant / kSlice + 1, 1};
  // counts[blocks][experts] as int32 (the two launches'; the one-launch
  // form keeps its counts in shared memory).
  const format::PlanDim workspace{blocks.coef * experts * 4,
                                  blocks.constant * experts * 4, blocks.div};
  // moe-sort-one (SortForm::one): runs of T x k < kSlice slots (decode
  // steps) sort in one launch of one block; the two launches an alternate
  // from the first T whose slots fill a slice, where the plan runs that
  // many.
  EmittedKernel own;
  if (form.one) {
    e.line("STRATA_KERNEL({}) void @SYMBOL@({}) {{", kThreads, params);
    e.prologue();
    e.line("  moe_sort_one<{}, {}, {}>({}, out0, out1, {}, {});", experts,
           kThreads, kSlice, ids.ptr, rowsOut, slots);
    e.line("}}");
    e.out.grid = {{0, 1, 1}, {0, 1, 1}, {0, 1, 1}};
    e.out.block = {kThreads, 1, 1};
    e.out.workspace = workspace;
    if (form.twoLaunchTokens(k) > e.plan.maxTokens)
      return;
    own = std::move(e.out);
    e.out = EmittedKernel{};
  }
  // The two launches (the kernel's own code, or the alternate `_slices`).
  const std::string sym = form.one ? "@SYMBOL@_slices" : "@SYMBOL@";
  e.line("STRATA_KERNEL({}) void {}_prep({}) {{", kThreads, sym, params);
  e.prologue();
  e.line("  moe_sort_count<{}, {}, {}>({}, (int32_t *)ws, {});", experts,
         kThreads, kSlice, ids.ptr, slots);
  e.line("}}");
  e.line("STRATA_KERNEL({}) void {}({}) {{", kThreads, sym, params);
  e.prologue();
  e.line("  moe_sort_scatter<{}, {}, {}>({}, (const int32_t *)ws, out0, out1, "
         "{}, {});",
         experts, kThreads, kSlice, ids.ptr, rowsOut, slots);
  e.line("}}");
  e.out.grid = {blocks, {0, 1, 1}, {0, 1, 1}};
  e.out.block = {kThreads, 1, 1};
  format::PlanPreLaunch pre;
  pre.grid = e.out.grid;
  pre.block = e.out.block;
  e.out.pre = std::move(pre);
  e.out.workspace = workspace;
  if (form.one) {
    EmittedKernel two = std::move(e.out);
    two.minTokens = form.twoLaunchTokens(k);
    two.suffix = "_slices";
    two.args = own.args; // the same parameters (e.params() set own's)
    own.alternates.push_back(std::move(two));
    e.out = std::move(own);
  }
}

} // namespace strata::codegen::detail
