//===- Rewrite.h - rewrite patterns, driver, kernel fusion ------*- C++ -*-===//
//
// Passes that transform by local rules are sets of patterns: each looks at
// one op and, if it matches, rewrites through a Rewriter, which keeps the
// def-use chains right. applyPatterns drives them over a function body to a
// fixed point. Rewriter::fuse is the one way ops become a fused kernel.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/DefUse.h"

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace strata::ir {

/// Edits a function body while keeping its def-use chains.
class Rewriter {
public:
  explicit Rewriter(Func &f);

  Func &func() { return func_; }
  const DefUse &defUse() const { return *du_; }
  /// Position of \p op in the body (ops of nested regions have none).
  size_t position(const Operation *op) const;

  /// Replaces the body ops \p group by one `fused "name"` kernel whose
  /// inputs are the values the group reads from outside it, whose outputs
  /// are the group's values read outside it, and whose temporaries are the
  /// rest. \p ties names (group result, the value it overwrites) pairs:
  /// each becomes a `tied` entry when the overwritten value is an input
  /// read by nothing after the group. The kernel goes where the last op
  /// was (or the first, if ops in between read the group's values and the
  /// group reads nothing defined in between). Returns the kernel, or
  /// nullptr (IR unchanged) when the group has no outputs or cannot be
  /// placed in one spot.
  Operation *fuse(const std::vector<Operation *> &group,
                  const std::string &name,
                  const std::vector<std::pair<Value *, Value *>> &ties = {});

  /// Puts the body of `fused` kernel \p op back into the function body at
  /// its place (its block arguments replaced by its operands, its results by
  /// the values it yields) and returns the ops, in body order; empty (IR
  /// unchanged) where \p op is no top-level fused kernel or ties results to
  /// inputs. With fuse(), regroups kernels (fuse-siblings).
  std::vector<Operation *> unfuse(Operation *op);

  /// Fuses \p members (top-level ops and fused kernels, in any order) into
  /// one kernel named \p name: a fused member's body joins the others'
  /// ops (unfuse, then fuse). Returns the kernel, or nullptr where a member
  /// cannot give its body back or the ops cannot be placed (the callers
  /// check canFuse(members) first: then only unfuse can refuse, a member
  /// that ties results to inputs).
  Operation *fuseKernels(const std::vector<Operation *> &members,
                         const std::string &name);

  /// True if fuse(\p group, ...) would succeed.
  bool canFuse(const std::vector<Operation *> &group) const;

  /// The body position of the first op the last rewrite moved or replaced
  /// (ops before it are as they were): where a driver resumes.
  size_t lastRewriteStart() const { return lastStart_; }

private:
  /// The analysis fuse() acts on; nullopt when \p group cannot be fused.
  struct Plan {
    std::vector<Operation *> group; ///< in body order
    std::vector<Value *> inputs, outputs;
    bool atLast = true;
  };
  std::optional<Plan> analyse(const std::vector<Operation *> &group) const;
  void rebuild();
  std::string freshName(const std::string &base);

  Func &func_;
  std::unique_ptr<DefUse> du_;
  std::unordered_map<const Operation *, size_t> pos_;
  std::set<std::string> names_;
  size_t lastStart_ = 0;
};

/// A local rewrite rooted at one op of a function body.
class RewritePattern {
public:
  virtual ~RewritePattern() = default;
  virtual const char *name() const = 0;
  /// Rewrites at \p op if it matches; returns true if the IR changed.
  virtual bool matchAndRewrite(Operation &op, Rewriter &rw) = 0;
};

/// Applies \p patterns to the ops of \p f's body, first pattern first,
/// until none applies. Returns the number of rewrites.
size_t applyPatterns(Func &f,
                     const std::vector<std::unique_ptr<RewritePattern>> &ps);

} // namespace strata::ir
