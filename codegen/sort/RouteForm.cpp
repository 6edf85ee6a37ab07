//===- RouteForm.cpp - moe_route's choice of form -------------------------===//
#include "codegen/sort/RouteForm.h"

namespace strata::codegen {

RouteForm selectRoute(const RouteProblem &p) {
  RouteForm f;
  if (!p.alone || p.experts > 1024)
    return f;
  f.own = RouteForm::Kind::Waves;
  constexpr int64_t waves = kRouteThreads / 32;
  if (p.blockOption && p.state && p.maxTokens > 1 && p.k <= 32 &&
      waves * p.k <= 4 * 32) {
    f.own = RouteForm::Kind::Block;
    f.wavesFromTwo = true;
  }
  return f;
}

} // namespace strata::codegen
