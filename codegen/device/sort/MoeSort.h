//===- MoeSort.h - moe_sort across blocks ---------------------------------===//
//
// moe_sort's two launches: per slice of slots the experts' counts, then
// the offsets and the stable permutation of each slice's slots; and its one
// launch for runs of one slice (moe_sort_one).
//
// A piece of the device library: DeviceLib.h includes it at its place in
// the emitted translation unit, and codegen/EmbedText.cmake inlines it
// there without this banner, so the emitted text is the library's.
//
//===----------------------------------------------------------------------===//
/// moe_sort across blocks, first launch: block b counts each expert among
/// the slots [b SL, (b + 1) SL) (shared atomics) into counts[b][E] (the
/// kernel's workspace; blocks past S write zeros).
template <int E, int NT, int SL>
STRATA_FN void moe_sort_count(const int32_t *ids, int32_t *counts, long S) {
  STRATA_SHARED int count[E];
  for (int e = tid_x(); e < E; e += NT)
    count[e] = 0;
  sync_block();
  const long s0 = (long)bid_x() * SL, s1 = s0 + SL < S ? s0 + SL : S;
  for (long s = s0 + tid_x(); s < s1; s += NT)
    __atomic_fetch_add(&count[ids[s]], 1, __ATOMIC_RELAXED);
  sync_block();
  for (int e = tid_x(); e < E; e += NT)
    counts[(long)bid_x() * E + e] = count[e];
}

/// moe_sort across blocks, second launch: block b takes every block's
/// counts (S / SL + 1 blocks, as the grid), the offsets off[e] (an exclusive
/// scan of the totals; block 0 stores them, off[E] = S) and its own bases
/// off[e] + the counts of e in earlier blocks, then the stable permutation of
/// its slots in rounds of NT (rank inside a wave by the wave's match mask,
/// across waves by per-wave counts) and each slot's row.
template <int E, int NT, int SL>
STRATA_FN void moe_sort_scatter(const int32_t *ids, const int32_t *counts,
                                int32_t *off, int32_t *perm, int32_t *rows,
                                long S) {
  constexpr int NW = NT / 32, PER = (E + NT - 1) / NT;
  STRATA_SHARED int base[E];
  STRATA_SHARED int tot[E];
  STRATA_SHARED int wc[NW * E];
  STRATA_SHARED int tmp[NW];
  const int b = bid_x(), nb = (int)(S / SL) + 1;
  for (int e = tid_x(); e < E; e += NT) {
    int before = 0, all = 0;
    for (int x = 0; x < nb; ++x) {
      int c = counts[(long)x * E + e];
      before += x < b ? c : 0;
      all += c;
    }
    base[e] = before;
    tot[e] = all;
  }
  for (int i = tid_x(); i < NW * E; i += NT)
    wc[i] = 0;
  sync_block();
  // Thread i owns experts [i PER, i PER + PER): their totals' scan.
  const int e0 = tid_x() * PER;
  int mine = 0;
  for (int e = e0; e < e0 + PER && e < E; ++e)
    mine += tot[e];
  int total;
  int run = block_exclusive_scan<NT>(mine, tmp, &total);
  for (int e = e0; e < e0 + PER && e < E; ++e) {
    if (b == 0)
      off[e] = run;
    base[e] += run;
    run += tot[e];
  }
  if (b == 0 && tid_x() == 0)
    off[E] = total;
  sync_block();
  const int w = tid_x() >> 5, lane = lane_id();
  const long s1 = ((long)b + 1) * SL < S ? ((long)b + 1) * SL : S;
  for (long r0 = (long)b * SL; r0 < s1; r0 += NT) {
    long s = r0 + tid_x();
    int e = s < s1 ? ids[s] : -1;
    const uint32_t same = wave_match(e);
    const int cnt = __builtin_popcount(same);
    const int rank = __builtin_popcount(same & ((1u << lane) - 1u));
    const bool first = rank == 0;
    if (e >= 0 && first)
      wc[w * E + e] = cnt;
    sync_block();
    int before = 0, all = 0;
    if (e >= 0) {
      for (int x = 0; x < NW; ++x) {
        int c = wc[x * E + e];
        if (x < w)
          before += c;
        all += c;
      }
      int at = base[e] + before + rank;
      perm[at] = (int32_t)s;
      if (rows)
        rows[s] = at;
    }
    sync_block();
    // The wave's first holder of e clears its count; the round's last
    // holder (last wave with e, last lane) advances the base.
    if (e >= 0) {
      bool lastWave = true;
      for (int x = w + 1; x < NW; ++x)
        lastWave = lastWave && wc[x * E + e] == 0;
      if (lastWave && rank == cnt - 1)
        base[e] += all;
    }
    sync_block();
    if (e >= 0 && first)
      wc[w * E + e] = 0;
    sync_block();
  }
}

/// moe_sort in one launch of one block, for runs whose S slots fit one
/// slice (S < SL: a decode step's rows x k): the experts' counts in shared
/// memory, then moe_sort_scatter's scan and ranks over them (the counts of
/// one block, as the two launches' with one slice), so the permutation and
/// offsets are the two launches' exactly.
template <int E, int NT, int SL>
STRATA_FN void moe_sort_one(const int32_t *ids, int32_t *off, int32_t *perm,
                            int32_t *rows, long S) {
  STRATA_SHARED int32_t counts[E];
  for (int e = tid_x(); e < E; e += NT)
    counts[e] = 0;
  sync_block();
  for (long s = tid_x(); s < S; s += NT)
    __atomic_fetch_add(&counts[ids[s]], 1, __ATOMIC_RELAXED);
  sync_block();
  moe_sort_scatter<E, NT, SL>(ids, counts, off, perm, rows, S);
}
