//===- SortEmitter.cpp - the sort/route family: moe_sort ------------------===//
//
// moe_sort over slices of slots: a pre-launch counts each slice's experts
// into the workspace, the kernel scans the counts and ranks its slice
// stably (codegen/device/sort/MoeSort.h), in the form selectSort chose
// (SortForm.h). moe_route alone is sort/RouteEmitter.cpp.
//
//===----------------------------------------------------------------------===//
#include "codegen/EmitterImpl.h"
#include "codegen/sort/SortForm.h"

#include <string>
#include <utility>

namespace strata::codegen::detail {

using format::BodyOp;
using format::Recipe;

void emitSortKernel(Emitter &e) {
  if (e.body.size() == 1 && e.body[0].recipe == Recipe::MoeRoute)
    return emitRouteKernel(e);
  if (e.body.size() != 1)
    throw Unsupported("moe_sort with a fused body");
  const BodyOp &op = e.body[0];
  Tensor ids = e.tensor(op.inputs[0]);
  int64_t experts = e.intAttr(op, "experts");
  // The block and slice (SortForm.h): two launches over slices of slots
  // (S / slice + 1 blocks).
  const SortForm form = selectSort(experts);
  if (!form.fits)
    throw Unsupported("too many experts for one block's counts");
  const int kThreads = form.threads;
  const int64_t kSlice = form.slice;
  int64_t k = constProduct(ids.shape, 1);
  e.workspace = true;
  std::string params = e.params();
  std::string slots = fmt::format("{} * {}L", dimExpr(ids.shape[0]), k);
  e.line("STRATA_KERNEL({}) void @SYMBOL@_prep({}) {{", kThreads, params);
  e.prologue();
  e.line("  moe_sort_count<{}, {}, {}>({}, (int32_t *)ws, {});", experts,
         kThreads, kSlice, ids.ptr, slots);
  e.line("}}");
  e.line("STRATA_KERNEL({}) void @SYMBOL@({}) {{", kThreads, params);
  e.prologue();
  e.line("  moe_sort_scatter<{}, {}, {}>({}, (const int32_t *)ws, out0, out1, "
         "{}, {});",
         experts, kThreads, kSlice, ids.ptr,
         e.kernel.outputs.size() > 2 ? "out2" : "(int32_t *)0", slots);
  e.line("}}");
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
  e.out.grid = {blocks, {0, 1, 1}, {0, 1, 1}};
  e.out.block = {kThreads, 1, 1};
  format::PlanPreLaunch pre;
  pre.grid = e.out.grid;
  pre.block = e.out.block;
  e.out.pre = std::move(pre);
  // counts[blocks][experts] as int32.
  e.out.workspace = {blocks.coef * experts * 4, blocks.constant * experts * 4,
                     blocks.div};
}

} // namespace strata::codegen::detail
