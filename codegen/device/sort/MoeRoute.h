//===- MoeRoute.h - moe_route: probabilities and top-k --------------------===//
//
// moe_route of one token: softmax or sigmoid of the router's logits,
// then the top K in RouteOrder.h's order, by a wave per token
// (wave_moe_route) or by a block (row_moe_route).
//
// A piece of the device library: DeviceLib.h includes it at its place in
// the emitted translation unit, and codegen/EmbedText.cmake inlines it
// there without this banner, so the emitted text is the library's.
//
//===----------------------------------------------------------------------===//
/// A wave's top \p K of its lanes' candidates, round s's winner returned
/// to lane s (0 past the candidates): K rounds of a wave max of
/// route_keys over each lane's best untaken key, only the winning lane
/// rescanning its \p PL keys for its next best (keys are unique, so the
/// lane whose best won is the one that holds it). \p key: the lane's
/// candidates, 0 for none, cleared as they are taken. The rounds stay a
/// loop: unrolled, the kernel's code (K rounds of the rescan) took longer
/// to fetch than to run at one token (18.8 us a layer on the H200). Both
/// moe_route forms take it (wave_moe_route; the block form of one token,
/// codegen/sort/RouteEmitter.cpp, a wave's share of the experts).
template <int PL> STRATA_FN uint64_t wave_top_keys(uint64_t (&key)[PL], int K) {
  const int lane = lane_id();
  auto best = [&]() {
    uint64_t b = 0;
#pragma unroll
    for (int i = 0; i < PL; ++i)
      b = key[i] > b ? key[i] : b;
    return b;
  };
  uint64_t lk = best();
  uint64_t mk = 0;
#pragma unroll 1
  for (int s = 0; s < K; ++s) {
    uint64_t bk = lk;
#pragma unroll
    for (int d = 16; d >= 1; d >>= 1)
      bk = route_key_max_xor(bk, d);
    if (lane == s)
      mk = bk;
    if (bk != 0 && lk == bk) {
#pragma unroll
      for (int i = 0; i < PL; ++i)
        key[i] = key[i] == bk ? 0 : key[i];
      lk = best();
    }
  }
  return mk;
}

/// moe_route of one token by one wave (kernels of several tokens per block,
/// no block barrier): lane l holds probabilities l, l + 32, ... in
/// registers (softmax by wave reductions, or sigmoid), then the top K
/// (descending, ties to the lower id, NaN never before a number, as
/// row_moe_route) by K rounds of a wave argmax of route_keys over each
/// lane's best untaken candidate; only the winning lane looks for its next
/// best. A block-wide round (row_moe_route) made 8 waves repeat every
/// reduction: the kernel was instruction-bound (ncu: IPC 3.1) at 0.6 ms a
/// layer.
template <int E, int K, bool SOFTMAX, bool NORM, class X, class W>
STRATA_FN void wave_moe_route(const X *x, W *w, int32_t *ids) {
  constexpr int PL = (E + 31) / 32;
  static_assert(PL <= 32, "one taken bit per register");
  static_assert(K <= 32, "a lane per round's winner");
  const int lane = lane_id();
  float p[PL];
  uint32_t taken = 0; // bit i: expert lane + 32 i taken (or past E)
#pragma unroll
  for (int i = 0; i < PL; ++i) {
    const int e = lane + 32 * i;
    p[i] = e < E ? ld(x, e) : 0.0f;
    taken |= e < E ? 0u : 1u << i;
  }
  if (SOFTMAX) {
    float m = -__builtin_inff();
#pragma unroll
    for (int i = 0; i < PL; ++i)
      m = !(taken >> i & 1u) && p[i] > m ? p[i] : m;
#pragma unroll
    for (int d = 16; d >= 1; d >>= 1) {
      float o = shfl_xor_f(m, d);
      m = o > m ? o : m;
    }
    float sum = 0;
#pragma unroll
    for (int i = 0; i < PL; ++i) {
      p[i] = strata_exp(p[i] - m);
      sum += taken >> i & 1u ? 0.0f : p[i];
    }
#pragma unroll
    for (int d = 16; d >= 1; d >>= 1)
      sum += shfl_xor_f(sum, d);
#pragma unroll
    for (int i = 0; i < PL; ++i)
      p[i] /= sum;
  } else {
#pragma unroll
    for (int i = 0; i < PL; ++i)
      p[i] = sm_sigmoid(p[i]);
  }
  // Each candidate as its route_key (0 once taken or past E).
  uint64_t key[PL];
#pragma unroll
  for (int i = 0; i < PL; ++i)
    key[i] = taken >> i & 1u ? 0 : route_key(p[i], lane + 32 * i);
  // Round s's winner in lane s.
  const uint64_t mk = wave_top_keys<PL>(key, K);
  const float mv = route_key_value(mk);
  const int mi = route_key_id(mk);
  // The rounds' values summed in order (as row_moe_route does).
  float sum = 0;
  if (NORM) {
#pragma unroll 1
    for (int s = 0; s < K; ++s)
      sum += shfl_f(mv, s);
  }
  if (lane < K) {
    ids[lane] = mi;
    st(w, lane, NORM ? mv / sum : mv);
  }
}

/// moe_route of one token: probabilities (softmax or sigmoid) of E logits
/// into shared \p p, then the top K (descending, ties to the lower id, NaN
/// never before a number) by K rounds of a block argmax.
template <int E, int K, int NT, bool SOFTMAX, bool NORM, class X, class W>
STRATA_FN void row_moe_route(const X *x, W *w, int32_t *ids, float *p,
                             float *red, int *redi) {
  if (SOFTMAX) {
    float m = -__builtin_inff();
    for (int i = tid_x(); i < E; i += NT) {
      float v = ld(x, i);
      m = v > m ? v : m;
    }
    m = block_max<NT>(m, red);
    float s = 0;
    for (int i = tid_x(); i < E; i += NT) {
      p[i] = strata_exp(ld(x, i) - m);
      s += p[i];
    }
    s = block_sum<NT>(s, red);
    for (int i = tid_x(); i < E; i += NT)
      p[i] /= s;
  } else {
    for (int i = tid_x(); i < E; i += NT)
      p[i] = sm_sigmoid(ld(x, i));
  }
  sync_block();
  float sum = 0;
  // The picks, in shared memory (a register array indexed by the round
  // would go to scratch).
  STRATA_SHARED float chosen[K];
  STRATA_SHARED int chosenId[K];
  // One barrier per round: the wave bests go to red/redi by the round's
  // parity (so a slow wave still reading last round's never sees them
  // overwritten), every thread reduces them to the block best itself, and
  // the thread that holds the winner marks it (no other thread reads it).
  STRATA_SHARED float redv[2][NT / 32];
  STRATA_SHARED int redn[2][NT / 32];
  for (int s = 0; s < K; ++s) {
    // Best (number before NaN, larger value, lower id) per thread, wave,
    // block; taken experts hold the bit pattern 0xffffffff and are skipped.
    float bv = 0;
    int bi = -1;
    for (int i = tid_x(); i < E; i += NT) {
      float v = p[i];
      if (sm_bits(v) != 0xffffffffu && route_better(v, i, bv, bi))
        bv = v, bi = i;
    }
    for (int m = 16; m >= 1; m >>= 1) {
      float ov = shfl_xor_f(bv, m);
      int oi = shfl_xor_i(bi, m);
      if (route_better(ov, oi, bv, bi))
        bv = ov, bi = oi;
    }
    if (lane_id() == 0) {
      redv[s & 1][tid_x() >> 5] = bv;
      redn[s & 1][tid_x() >> 5] = bi;
    }
    sync_block();
    bv = redv[s & 1][0], bi = redn[s & 1][0];
    for (int j = 1; j < NT / 32; ++j)
      if (route_better(redv[s & 1][j], redn[s & 1][j], bv, bi))
        bv = redv[s & 1][j], bi = redn[s & 1][j];
    if (bi % NT == tid_x())
      p[bi] = sm_from_bits(0xffffffffu);
    if (tid_x() == 0) {
      chosen[s] = bv;
      chosenId[s] = bi;
    }
  }
  sync_block();
  if (tid_x() == 0)
    for (int s = 0; s < K; ++s)
      sum += chosen[s];
  if (tid_x() == 0)
    for (int s = 0; s < K; ++s) {
      ids[s] = chosenId[s];
      st(w, s, NORM ? chosen[s] / sum : chosen[s]);
    }
}
