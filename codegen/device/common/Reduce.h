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
/// One step of warp_sum_many: N values left at lane offset O.
template <int N, int O> STRATA_FN void warp_sum_step(float *v) {
  if constexpr (O >= 1) {
    if constexpr (N >= 2 * O) {
      // Halve: the lanes with bit O keep the upper half of the values and
      // send the lower half to their partner, which keeps the lower.
      const bool hi = (lane_id() & O) != 0;
#pragma unroll
      for (int i = 0; i < N / 2; ++i) {
        const float lo = v[i], up = v[i + N / 2];
        const float keep = hi ? up : lo, send = hi ? lo : up;
        v[i] = keep + shfl_xor_f(send, O);
      }
      warp_sum_step<N / 2, O / 2>(v);
    } else {
#pragma unroll
      for (int i = 0; i < N; ++i)
        v[i] += shfl_xor_f(v[i], O);
      warp_sum_step<N, O / 2>(v);
    }
  }
}
/// Sums each of the N values \p v (N a power of two) over the warp, with
/// warp_sum's pairs of lanes in its order (each sum bit for bit
/// warp_sum's), halving the values where the lanes still to pair can hold
/// them: 31 shuffles for 32 values where 32 warp_sums take 160. Lane l
/// ends with V = max(N / 32, 1) sums in v[0 .. V): those of values
/// (l % min(N, 32)) * V + j.
template <int N> STRATA_FN void warp_sum_many(float *v) {
  warp_sum_step<N, 16>(v);
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
