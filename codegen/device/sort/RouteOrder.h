//===- RouteOrder.h - moe_route's order of candidates ---------------------===//
//
// The comparison both moe_route forms (sort/MoeRoute.h) rank experts by:
// numbers before NaN, then the larger value, then the lower id.
//
// A piece of the device library: DeviceLib.h includes it at its place in
// the emitted translation unit, and codegen/EmbedText.cmake inlines it
// there without this banner, so the emitted text is the library's.
//
//===----------------------------------------------------------------------===//
/// moe_route's order: candidate (v, i) beats the best so far (bv, bi): any
/// number beats NaN, then the larger value, then the lower id; bi < 0 is
/// "none yet".
STRATA_FN bool route_better(float v, int i, float bv, int bi) {
  if (i < 0)
    return false;
  if (bi < 0)
    return true;
  if (sm_isnan(v) != sm_isnan(bv))
    return sm_isnan(bv);
  return v > bv || (v == bv && i < bi) || (sm_isnan(v) && i < bi);
}
