//===- Pass.h - passes and the pass manager ---------------------*- C++ -*-===//
#pragma once

#include "ir/Diagnostics.h"
#include "ir/Module.h"

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace strata::format {
class ModelInfo;
}

namespace strata::passes {

/// What a pass may use besides the module.
struct PassContext {
  ir::DiagnosticEngine &diag;
  /// Metadata and tensor infos bound by `expand` (nullptr if none given).
  const format::ModelInfo *model = nullptr;
  /// Upper bound on the ops `expand` may produce, so a description cannot
  /// blow up memory (nested repeats).
  size_t maxExpandedOps = size_t(1) << 22;
  /// The token count T is planned for (plan-memory sizes buffers at it).
  int64_t maxTokens = 0;
  /// The compilation target ("host", "gfx1151", "sm_90"; Targets.def).
  std::string target = "host";
  /// Storage precision of activations (assign-precision): "f32" or
  /// "bf16"; the target's default unless the user chose.
  std::string precision = "f32";
  /// Storage of the KV caches (assign-precision; strata-compile --kv):
  /// "f32", "bf16" or "i8" (int8 rows with an f32 scale each).
  std::string kv = "f32";
  /// keep-last-position: plan the last position's outputs only.
  bool lastPositionOnly = false;
  /// add-greedy-ids: @main also returns the argmax of each logits row
  /// (On: or the pass fails naming why it cannot; WhereLogits: where its
  /// first result is logits [rows, vocab], the default of plans that
  /// decode).
  enum class GreedyIds { Off, WhereLogits, On };
  GreedyIds greedyIds = GreedyIds::Off;
  /// The setting of `--greedy-ids on|off` (\p asked; none: the default)
  /// for a plan that decodes (\p decodes: --max-context) or not.
  static GreedyIds greedyIdsFor(std::optional<bool> asked, bool decodes) {
    if (asked)
      return *asked ? GreedyIds::On : GreedyIds::Off;
    return decodes ? GreedyIds::WhereLogits : GreedyIds::Off;
  }
  /// Generation (strata-compile --max-context N --max-batch B): the
  /// positions and sequence slots a plan's state holds, what the builtins
  /// max_context() and max_batch() give; generation() is maxContext > 0.
  int64_t maxContext = 0;
  int64_t maxBatch = 0;
  /// Filled by expand: every metadata key the description looked up and
  /// the value folded in (ir::EvalEnv::baked).
  std::map<std::string, std::string> bakedMeta = {};
};

/// A transformation of a module.
class Pass {
public:
  virtual ~Pass() = default;
  /// The pass's command-line name, e.g. "expand".
  virtual const char *name() const = 0;
  /// Transforms \p m in place. Returns false after reporting diagnostics;
  /// the module may then be in any state and must not be used.
  virtual bool run(std::unique_ptr<ir::Module> &m, PassContext &ctx) = 0;
};

/// For passes that change the op list: reports an error naming \p pass and
/// returns false if plan-memory has already placed a value of \p m (its
/// liveness and arena bound would no longer describe the ops).
bool checkNotPlanned(const ir::Module &m, const char *pass, PassContext &ctx);

/// True if the plan decodes (--max-context) on a GPU target: the passes
/// that trade launches or L2 hints for decode steps act only there.
bool decodesOnGpu(const PassContext &ctx);

/// Creates the pass named \p name, or nullptr if there is none.
std::unique_ptr<Pass> createPass(const std::string &name);

/// One registered pass: name and one-line summary (Passes.def).
struct PassInfo {
  const char *name;
  const char *summary;
};
/// Every registered pass, in Passes.def order.
const std::vector<PassInfo> &allPasses();

/// Runs passes in order, verifying after each one.
class PassManager {
public:
  /// Called after each pass with its name and the module.
  using Hook = std::function<void(const std::string &, const ir::Module &)>;

  void add(std::unique_ptr<Pass> p) { passes_.push_back(std::move(p)); }
  void setAfterPassHook(Hook h) { after_ = std::move(h); }
  /// Runs every pass; stops at the first failure (pass or verifier).
  bool run(std::unique_ptr<ir::Module> &m, PassContext &ctx);

private:
  std::vector<std::unique_ptr<Pass>> passes_;
  Hook after_;
};

/// The default compilation pipeline, as pass names in order.
std::vector<std::string> defaultPipeline();

} // namespace strata::passes
