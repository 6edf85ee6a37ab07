//===- Pipelines.cpp - the one ordered compilation pipeline ---------------===//
#include "passes/Pass.h"

namespace strata::passes {

std::vector<std::string> defaultPipeline() {
  return {
      // Bind the description to the model file and flatten it.
      "expand",
      // The cached delta step reads its q/k/v row whole (before dce drops
      // the slices and norms this leaves unread).
      "fold-delta-inputs",
      // Merge repeated computations, then drop what nothing uses (a merge
      // can leave dead operands behind).
      "cse",
      "dce",
      // Only the last position's logits, where asked (--logits last).
      "keep-last-position",
      // The greedy token of each logits row, where asked (--greedy-ids).
      "add-greedy-ids",
      // Routed experts as sorted, grouped GEMMs (on every target).
      "group-experts",
      // Group ops into kernels: the gated-residual sites first (their
      // epilogues are elementwise too), then elementwise chains and matmul
      // epilogues.
      "fuse-hyper-connection",
      "fuse-elementwise",
      // In plans that decode: GEMMs reading the same rows as one launch.
      "fuse-siblings",
      // In plans that decode: row kernels over the same rows as one launch.
      "fuse-rows",
      // In plans that decode on a GPU: the routed experts' stacks as
      // moe_route's prefetch hints.
      "prefetch-experts",
      // In plans that decode on a GPU: the route and its sort as one launch
      // (after the hints, which the route keeps).
      "fuse-route-sort",
      // Pick the target's kernel variant for every GEMM.
      "select-expert-kernels",
      // Pick a catalog recipe for every op.
      "lower-to-kernels",
      // Give every stored activation its dtype (the precision policy).
      "assign-precision",
      // Place every activation in one arena.
      "plan-memory",
  };
}

} // namespace strata::passes
