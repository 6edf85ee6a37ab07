//===- Pipelines.cpp - the one ordered compilation pipeline ---------------===//
#include "passes/Pass.h"

namespace strata::passes {

std::vector<std::string> defaultPipeline() {
  return {
      // Bind the description to the model file and flatten it.
      "expand",
      // Pick a catalog recipe for every op.
      "lower-to-kernels",
      // Place every activation in one arena.
      "plan-memory",
  };
}

} // namespace strata::passes
