//===- Conv1d.h - conv1d_causal over blocks of rows -----------------------===//
//
// The row family's conv1d_causal (+ silu) special: blocks of rows x
// channels with the block's weights loaded once.
//
// A piece of the device library: DeviceLib.h includes it at its place in
// the emitted translation unit, and codegen/EmbedText.cmake inlines it
// there without this banner, so the emitted text is the library's.
//
//===----------------------------------------------------------------------===//
/// conv1d_causal (y[t][c] = sum_j w[c][j] x[t - (KW - 1 - j) DIL][c], x and
/// y [T][C]) with an optional silu, over RT rows from bid_y() RT and four
/// channels per thread from (bid_x() NT + tid_x()) 4: the block's weights
/// are loaded once, then each row's taps by vector loads (earlier rows hit
/// L1) and one vector store. One block a row re-read all C x KW weights for
/// every row (160 KB a row at the seed's 10,240 channels) and staged the
/// row in LDS.
template <int C, int KW, int DIL, int RT, int NT, bool SILU, class X, class W,
          class Y>
STRATA_FN void conv1d_rows(const X *x, const W *w, Y *y, long T) {
  static_assert(C % 4 == 0, "four channels per thread");
  const long i0 = ((long)bid_x() * NT + tid_x()) * 4;
  if (i0 >= C)
    return;
  float wv[4][KW];
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    if constexpr (KW == 4)
      ld4(w, (i0 + u) * 4, wv[u]);
    else
#pragma unroll
      for (int j = 0; j < KW; ++j)
        wv[u][j] = ld(w, (i0 + u) * KW + j);
  }
  const long r0 = (long)bid_y() * RT;
#pragma unroll 4
  for (int rr = 0; rr < RT; ++rr) {
    const long r = r0 + rr;
    if (r >= T)
      break;
    float s[4] = {0, 0, 0, 0};
#pragma unroll
    for (int j = 0; j < KW; ++j) {
      const long src = r - (long)(KW - 1 - j) * DIL;
      if (src < 0)
        continue;
      float xv[4];
      ld4(x, src * C + i0, xv);
#pragma unroll
      for (int u = 0; u < 4; ++u)
        s[u] += wv[u][j] * xv[u];
    }
    if (SILU)
#pragma unroll
      for (int u = 0; u < 4; ++u)
        s[u] = sm_silu(s[u]);
    st4(y, r * C + i0, s);
  }
}
