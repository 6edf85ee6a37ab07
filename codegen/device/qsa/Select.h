//===- Select.h - qsa_select: a query row's top key blocks ----------------===//
//
// QSA's selection: a query row's scores of the visible key blocks, the
// best TOP of them by a bitonic sort in shared memory, or by a radix
// select where the row has more blocks than the top.
//
// A piece of the device library: DeviceLib.h includes it at its place in
// the emitted translation unit, and codegen/EmbedText.cmake inlines it
// there without this banner, so the emitted text is the library's.
//
//===----------------------------------------------------------------------===//
/// Sorts \p score / \p id (shared, \p p a power of two) in place by a
/// bitonic network: "before" = larger score, then lower id.
template <int NT> STRATA_FN void qsa_bitonic(float *score, int *id, int p) {
  for (int size = 2; size <= p; size <<= 1)
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int i = tid_x(); i < p / 2; i += NT) {
        int lo = 2 * i - (i & (stride - 1)), hi = lo + stride;
        bool down = (lo & size) != 0;
        bool before = score[hi] > score[lo] ||
                      (score[hi] == score[lo] && id[hi] < id[lo]);
        if (before != down) {
          float ts = score[lo];
          score[lo] = score[hi];
          score[hi] = ts;
          int ti = id[lo];
          id[lo] = id[hi];
          id[hi] = ti;
        }
      }
      sync_block();
    }
}

/// A qsa_select score (-inf or >= 0, zeros of either sign equal) as an
/// unsigned key of the same order: -inf 0, zero 1, x > 0 its bits + 1.
STRATA_FN uint32_t qsa_key(float s) {
  return s == -__builtin_inff() ? 0u : s == 0.0f ? 1u : sm_bits(s) + 1u;
}

/// The TOP best of the n scores (n > TOP; block b's id is b, read from \p id
/// unless IMPLICIT, where \p id may be shorter than n) in qsa_select's
/// order into y (then the tail block n, as qsa_select writes): the TOP-th
/// largest key by a radix select (four 8-bit digits, a shared histogram and
/// a block scan each), the blocks above it and the lowest ids at it
/// compacted in block order, then a bitonic sort of only those. Sorting all
/// n (up to 4,096 at T = 16,384) by the network kept the kernel LDS-bound.
template <int TOP, int NT, bool IMPLICIT = false>
STRATA_FN void qsa_top_select(const float *score, const int *id, int n,
                              int32_t *y) {
  constexpr int PT = TOP <= 1 ? 1 : 2 << (31 - __builtin_clz(TOP - 1));
  static_assert(NT == 256, "one histogram digit per thread");
  STRATA_SHARED int hist[256];
  STRATA_SHARED int tmp[NT / 32];
  STRATA_SHARED uint32_t pick[2];
  STRATA_SHARED float cs[PT];
  STRATA_SHARED int ci[PT];
  uint32_t prefix = 0, mask = 0;
  int k = TOP; // the rank (from 1) of the key sought among those at prefix
  for (int shift = 24; shift >= 0; shift -= 8) {
    hist[tid_x()] = 0;
    sync_block();
    for (int b = tid_x(); b < n; b += NT) {
      uint32_t u = qsa_key(score[b]);
      if ((u & mask) == prefix)
        __atomic_fetch_add(&hist[(u >> shift) & 255u], 1, __ATOMIC_RELAXED);
    }
    sync_block();
    // Thread i owns digit 255 - i: keys of larger digits come first.
    const int d = 255 - tid_x(), c = hist[d];
    int total;
    int above = block_exclusive_scan<NT>(c, tmp, &total);
    if (above < k && k <= above + c) {
      pick[0] = prefix | (uint32_t)d << shift;
      pick[1] = (uint32_t)(k - above);
    }
    sync_block();
    prefix = pick[0];
    k = (int)pick[1];
    mask |= 255u << shift;
  }
  // Selected: key > prefix, or key == prefix among the first k in block
  // order. Thread i scans the contiguous blocks [i R, i R + R).
  const int R = (n + NT - 1) / NT, b0 = tid_x() * R;
  const int b1 = b0 + R < n ? b0 + R : n;
  int eq = 0;
  for (int b = b0; b < b1; ++b)
    eq += qsa_key(score[b]) == prefix;
  int total;
  int eqBefore = block_exclusive_scan<NT>(eq, tmp, &total);
  int mine = 0;
  for (int b = b0, e = eqBefore; b < b1; ++b) {
    uint32_t u = qsa_key(score[b]);
    mine += u > prefix || (u == prefix && e++ < k);
  }
  int at = block_exclusive_scan<NT>(mine, tmp, &total);
  for (int b = b0, e = eqBefore; b < b1; ++b) {
    uint32_t u = qsa_key(score[b]);
    if (u > prefix || (u == prefix && e++ < k)) {
      cs[at] = score[b];
      ci[at] = IMPLICIT ? b : id[b];
      ++at;
    }
  }
  for (int i = TOP + tid_x(); i < PT; i += NT) {
    cs[i] = -__builtin_inff();
    ci[i] = 0x7fffffff;
  }
  sync_block();
  qsa_bitonic<NT>(cs, ci, PT);
  for (int i = tid_x(); i <= TOP; i += NT)
    y[i] = i < TOP ? ci[i] : n;
}

/// qsa_select of query row t: the scores of the visible complete blocks
/// b < (t+1)/BLOCK (sum over indexer heads of relu(q_h . kb_b), times
/// \p inv; NaN ranks as -inf), the TOP best (descending, ties to the lower
/// block) by a bitonic sort in shared memory (P = a power of two >= the
/// block count), then the tail block, then -1 padding. IDS < P (rows too
/// long for P ids in LDS): \p id holds IDS entries, written only for rows
/// the bitonic sort takes (their P is at most IDS: IDS is the top's power
/// of two, so longer rows have more visible blocks than the top and go to
/// the radix select, which knows a block by its index).
template <int HI, int DI, int BLOCK, int TOP, int NT, int P, int IDS = P,
          class Q, class K, class Y>
STRATA_FN void row_qsa_select(const Q *q, const K *kb, Y *y, long t, long T,
                              float inv, float *score, int *id, float *qs) {
  int nc = (int)((t + 1) / BLOCK);
  // This row's sort size: the smallest power of two holding its visible
  // blocks (early rows sort a few, not P).
  int p = 1;
  while (p < nc)
    p <<= 1;
  // The query row once into LDS (every thread reads all of it), then each
  // thread's blocks with 4-element vector loads of kb, every head's dot
  // product from one pass over the key (kb is read once, not once a head).
  for (int i = tid_x(); i < HI * DI; i += NT)
    qs[i] = ld(q, i);
  sync_block();
  for (int b = tid_x(); b < p; b += NT) {
    float s = -__builtin_inff();
    if (b < nc) {
      float d[HI];
#pragma unroll
      for (int h = 0; h < HI; ++h)
        d[h] = 0;
      if constexpr (DI % 4 == 0) {
        // Unrolled 8 steps, not fully: fully unrolled, ptxas spills.
#pragma unroll 8
        for (int c = 0; c < DI; c += 4) {
          float kv[4];
          ld4(kb, (long)b * DI + c, kv);
#pragma unroll
          for (int h = 0; h < HI; ++h)
            d[h] += qs[h * DI + c] * kv[0] + qs[h * DI + c + 1] * kv[1] +
                    qs[h * DI + c + 2] * kv[2] + qs[h * DI + c + 3] * kv[3];
        }
      } else {
        for (int c = 0; c < DI; ++c) {
          float kv = ld(kb, (long)b * DI + c);
#pragma unroll
          for (int h = 0; h < HI; ++h)
            d[h] += qs[h * DI + c] * kv;
        }
      }
      s = 0;
#pragma unroll
      for (int h = 0; h < HI; ++h)
        s += d[h] < 0 ? 0.0f : d[h];
      s *= inv;
      if (sm_isnan(s))
        s = -__builtin_inff();
    }
    score[b] = s;
    if (IDS == P || p <= IDS)
      id[b] = b < nc ? b : 0x7fffffff;
  }
  sync_block();
  static_assert(IDS == P || (NT == 256 && TOP > 0 && IDS >= TOP),
                "row_qsa_select: compact ids need the radix select");
  if constexpr (NT == 256 && TOP > 0) {
    if (nc > TOP) {
      qsa_top_select<TOP, NT, (IDS < P)>(score, id, nc, y);
      return;
    }
  }
  qsa_bitonic<NT>(score, id, p);
  int chosen = TOP < nc ? TOP : nc;
  for (int k = tid_x(); k <= TOP; k += NT)
    y[k] = k < chosen ? id[k] : (k == chosen ? nc : -1);
}
