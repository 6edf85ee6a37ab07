//===- RouteForm.h - moe_route's choice of form -----------------*- C++ -*-===//
//
// Select, then emit, for moe_route (as for attention, the delta rule and
// the GEMM decode forms). The forms (codegen/device/sort/MoeRoute.h and
// codegen/row/RowEmitter.cpp):
//   Waves - a wave a token (wave_moe_route), 8 tokens a block: K rounds of
//           a wave argmax over the lanes' untaken candidates
//   Block - one token by the whole block (RowEmitter::routeDecode): each
//           wave's top k of its experts, then one wave's top k of theirs;
//           the kernel's own code in plans with state (a decode step), the
//           waves an alternate from two tokens
//   Row   - a block a token inside a fused row kernel, or past 1,024
//           experts (row_moe_route: k rounds of a block argmax)
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>

namespace strata::codegen {

/// What selection needs of a moe_route kernel.
struct RouteProblem {
  int64_t experts = 0;     ///< E, the router's logits a token
  int64_t k = 0;           ///< experts chosen a token
  bool alone = true;       ///< moe_route is the kernel's only op
  bool state = false;      ///< the plan has state (decodes)
  int64_t maxTokens = 1;   ///< the plan's largest run
  bool blockOption = true; ///< option moe-route-block
};

/// The form a moe_route kernel takes.
struct RouteForm {
  enum class Kind { Waves, Block, Row };
  /// The kernel's own code.
  Kind own = Kind::Row;
  /// The waves as an alternate from two tokens (own is Block).
  bool wavesFromTwo = false;
  /// The form that runs a launch of \p tokens rows.
  Kind at(int64_t tokens) const {
    return wavesFromTwo && tokens >= 2 ? Kind::Waves : own;
  }
};

/// Threads of a route block, and tokens a Waves block.
constexpr int kRouteThreads = 256;

/// The form of \p p: Row inside fused bodies and past 1,024 experts; else
/// Waves, and Block as the own code where the plan decodes (with an
/// alternate, so more than one token a run), the option allows, and one
/// wave can hold every wave's picks (8 k <= 128, k <= 32).
RouteForm selectRoute(const RouteProblem &p);

} // namespace strata::codegen
