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

/// route_better's order as one integer: route_key(v, i) > route_key(bv, bi)
/// exactly when route_better(v, i, bv, bi), and 0 (below every candidate)
/// is "none" (i < 0). The high word is the value's bits made monotone (NaN
/// lowest, -0 as +0), the low word the id's complement (ties to the lower
/// id). The top-k rounds then compare one 64-bit integer a shuffle step
/// instead of route_better's NaN-aware chain: the block form's rounds were
/// bound by that chain's latency (ncu: "wait" the top stall, 2,700
/// instructions a warp, 13 us a layer on the H200,
/// bench/results/ncu-decode-20261204/).
STRATA_FN uint64_t route_key(float v, int i) {
  if (i < 0)
    return 0;
  const uint32_t u = sm_bits(v), a = u & 0x7fffffffu;
  const uint32_t hi = a > 0x7f800000u ? 0u
                      : a == 0        ? 0x80000000u
                      : u >> 31       ? ~u
                                      : u | 0x80000000u;
  return (uint64_t)hi << 32 | (uint64_t)(0xffffffffu - (uint32_t)i);
}

/// The value of a key (0 for none, a quiet NaN for NaN, +0 for either zero).
STRATA_FN float route_key_value(uint64_t k) {
  const uint32_t hi = (uint32_t)(k >> 32);
  if (k == 0)
    return 0.0f;
  if (hi == 0)
    return sm_from_bits(0x7fc00000u);
  return sm_from_bits(hi >> 31 ? hi & 0x7fffffffu : ~hi);
}

/// The id of a key (-1 for none).
STRATA_FN int route_key_id(uint64_t k) {
  return k == 0 ? -1 : (int)(0xffffffffu - (uint32_t)k);
}

/// The larger of a key and lane (lane ^ m)'s.
STRATA_FN uint64_t route_key_max_xor(uint64_t k, int m) {
  const uint32_t lo = (uint32_t)shfl_xor_i((int)(uint32_t)k, m),
                 hi = (uint32_t)shfl_xor_i((int)(uint32_t)(k >> 32), m);
  const uint64_t o = (uint64_t)hi << 32 | lo;
  return o > k ? o : k;
}
