//===- Reduce.h - wave and block reductions and scans ---------------------===//
//
// Sums and maxima over a wave (shuffles) and over a block (the waves'
// partials in shared memory), and the block's exclusive prefix sum.
//
// A piece of the device library: DeviceLib.h includes it at its place in
// the emitted translation unit, and codegen/EmbedText.cmake inlines it
// there without this banner, so the emitted text is the library's.
//
//===----------------------------------------------------------------------===//
STRATA_FN float warp_sum(float v) {
  for (int m = 16; m >= 1; m >>= 1)
    v += shfl_xor_f(v, m);
  return v;
}
STRATA_FN float warp_max(float v) {
  for (int m = 16; m >= 1; m >>= 1) {
    float o = shfl_xor_f(v, m);
    v = o > v ? o : v;
  }
  return v;
}
/// Sum of \p v over the block's NT threads, returned to all of them. \p red
/// is 32 floats of shared memory (reused: the leading barrier protects it).
template <int NT> STRATA_FN float block_sum(float v, float *red) {
  v = warp_sum(v);
  if (NT <= 32)
    return v;
  sync_block();
  if (lane_id() == 0)
    red[tid_x() >> 5] = v;
  sync_block();
  v = lane_id() < NT / 32 ? red[lane_id()] : 0.0f;
  return warp_sum(v);
}
/// Exclusive prefix sum of \p v over the block's NT threads (in thread
/// order) by wave shuffles and the waves' totals in \p tmp (NT / 32 ints);
/// \p total gets the block's sum. Ends with a barrier (tmp reusable after).
template <int NT>
STRATA_FN int block_exclusive_scan(int v, int *tmp, int *total) {
  const int lane = lane_id(), w = tid_x() >> 5;
  int x = v;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    int y = shfl_i(x, lane >= d ? lane - d : lane);
    x += lane >= d ? y : 0;
  }
  if (lane == 31)
    tmp[w] = x;
  sync_block();
  int before = 0, all = 0;
  for (int i = 0; i < NT / 32; ++i) {
    before += i < w ? tmp[i] : 0;
    all += tmp[i];
  }
  *total = all;
  sync_block();
  return before + x - v;
}

template <int NT> STRATA_FN float block_max(float v, float *red) {
  v = warp_max(v);
  if (NT <= 32)
    return v;
  sync_block();
  if (lane_id() == 0)
    red[tid_x() >> 5] = v;
  sync_block();
  v = lane_id() < NT / 32 ? red[lane_id()] : -__builtin_inff();
  return warp_max(v);
}
