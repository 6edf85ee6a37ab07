//===- AttentionWs.h - QSA attention, warp-specialised --------------------===//
//
// attention_ws: QSA attention on sm_90 in three warpgroups, a producer
// gathering the union's K and V rows into mbarrier stages and two
// consumers on wgmma.
//
// A piece of the device library: DeviceLib.h includes it at its place in
// the emitted translation unit, and codegen/EmbedText.cmake inlines it
// there without this banner, so the emitted text is the library's.
//
//===----------------------------------------------------------------------===//
/// QSA attention, warp-specialised (sm_90a): attention_wg's sparse form
/// (all HG heads of KV head y for BQ = 128 / HG tokens, the union of their
/// selected blocks compacted in key order) in three warpgroups. Warpgroup
/// 0 produces: its first two warps gather the union's K rows, its last two
/// the V rows, by cp.async into two stages each, and complete each stage's
/// full barrier by cp.async.mbarrier.arrive, at 24 registers (setmaxnreg).
/// Warpgroups 1 and 2 consume 64 rows each at 240 registers: per chunk c they
/// wait for K_c (and V_{c-1}), issue S_c = Q K_c^T and O += P_{c-1} V_{c-1},
/// release K_c's stage once S_c has landed, run the online softmax, and release
/// V_{c-1}'s once that product has landed. No block barrier per chunk: the
/// two consumers run on their own, and the copies run as far ahead as the
/// stages allow. Shared memory: attention_wg's Q, K and V tiles, the eight
/// mbarriers (K full, K empty, V full, V empty; two stages each), then the
/// union tables (qsa_union_at).
/// PINGPONG: the consumers take turns to issue (FA3's ping-pong); EXPFIRST
/// keeps each step's wait for P V after the exponentials; SMX: the
/// softmax's variants (wg_softmax_chunk); ROLLED: the consumers' step as
/// one copy, P copied between steps (else unrolled by two, the two P
/// register sets taking turns).
/// TRACE (STRATA_ATTN_TRACE=1, a diagnostic): block (0, 0) (the last
/// tokens' tile) prints, per warp, the cycles each phase of the chunk loop
/// took in all (consumers: waiting for the stages, for the other
/// warpgroup's turn, issuing the products, waiting for S, the softmax,
/// waiting for P V, the rescale; the producer: waiting for free stages,
/// issuing the copies) and the loop's total. Its printf is a call, across
/// which ptxas serialises every wgmma (C7510): it times a slower kernel.
template <int H, int D, int DV, int HG, bool GATED, int BLOCK, int NB, int NBW,
          int NCW, bool COMPACT, bool PINGPONG, bool EXPFIRST, int SMX, long QT,
          long QH, long KT, long KH, long VT, long VH, long GT, long GH,
          bool TRACE = false, bool ROLLED = false, class G, class Y>
STRATA_FN void attention_ws(const bf16 *q, const bf16 *k, const bf16 *v,
                            const G *gate, const int32_t *index, Y *y, long T,
                            long TK, float scale) {
  constexpr int NT = 384, BQ = 128 / HG, KC = 64, LC = KC * 8 + 8,
                EPC = KC / BLOCK;
  constexpr int QSZ = (D / 8) * LC, KSZ = (D / 8) * LC, VSZ = (DV / 8) * LC;
  static_assert(D % 16 == 0 && DV % 64 == 0 && DV <= 256 && HG <= 128 &&
                    BLOCK >= 2 && KC % BLOCK == 0 && NBW * 32 <= 65536,
                "attention_ws");
  extern STRATA_SHARED __attribute__((aligned(128))) uint8_t strata_dyn[];
  mma_t *Qs = (mma_t *)strata_dyn;
  mma_t *Ks = Qs + 2 * QSZ;
  mma_t *Vs = Ks + 2 * KSZ;
  uint64_t *kfull = (uint64_t *)(Vs + 2 * VSZ), *kempty = kfull + 2,
           *vfull = kfull + 4, *vempty = kfull + 6;
  const QsaUnion qu =
      qsa_union_at<BQ, NBW, NCW, COMPACT>((uint32_t *)(kfull + 8));
  // The last tokens' tiles (the longest) first; a tile past T leaves.
  const long t0 = (long)(grid_x() - 1 - bid_x()) * BQ;
  if (t0 >= T)
    return;
  const int kh = bid_y(), h0 = kh * HG, tid = tid_x();
  const uint16_t *qb = (const uint16_t *)q;
  // Q: row R (warpgroup R / 64 of the consumers) is token R / HG, head
  // R % HG; rows past BQ HG repeat a token (computed, never stored).
  for (int i = tid; i < 128 * (D / 8); i += NT) {
    int row = i / (D / 8), c8 = i % (D / 8);
    long tt = t0 + row / HG;
    if (tt >= T)
      tt = T - 1;
    cp_async16(Qs + (row >> 6) * QSZ + c8 * LC + (row & 63) * 8,
               qb + tt * QT + (h0 + row % HG) * QH + c8 * 8);
  }
  cp_async_commit();
  if (tid == 0) {
    for (int s = 0; s < 2; ++s) {
      mbar_init(&kfull[s], 64);
      mbar_init(&vfull[s], 64);
      mbar_init(&kempty[s], 256);
      mbar_init(&vempty[s], 256);
    }
    mbar_init_fence();
  }
  // V's second stage holds zeros for the first step's P V (P = 0 there).
  for (int i = tid; i < VSZ / 8; i += NT)
    zero8(Vs + VSZ + i * 8);
  const int nch =
      qsa_union_build<BQ, NB, NBW, NCW, COMPACT, BLOCK, NT>(index, t0, T, qu);
  cp_async_wait_all();
  fence_proxy_async();
  sync_block();
  // The warpgroup's role (0 produces, 1 and 2 consume) from lane 0's thread
  // index, so ptxas knows the branches on it are warp-uniform: branching on
  // tid_x() itself, it took the consumers' code for a divergent path and
  // serialised every wgmma (C7520: each waited for the one before to land,
  // 20 waits a chunk a warpgroup instead of 2).
  const int role = shfl_i(tid >> 7, 0);
  if (role == 0) {
    // The producer: warps 0-1 gather K, warps 2-3 V, each pair on its own
    // stages' barriers, so V's copies never wait behind K's (in one loop,
    // V_{c-1} waited for K_c's stage to drain: ncu had the consumers
    // waiting for V at ~16 % of their time).
    wg_regs_dec<24>();
    const int half = shfl_i(tid >> 6, 0), pt = tid & 63, lane = tid & 31;
    auto gather =
        [&]<int W, long XT, long XH>(const bf16 *x, mma_t *dst,
                                     int c) __attribute__((always_inline)) {
          const uint16_t *xb = (const uint16_t *)x + kh * XH;
          // Lane e holds the chunk's e-th union block (EPC <= 32): one shared
          // load a chunk, then shuffles that do not wait on each other (a
          // load per row put its latency before every copy).
          const int blk = qu.list[c * EPC + lane % EPC];
          // A compile-time trip count (8 W / 64, W a multiple of 16): LLVM
          // unrolls no loop around a shuffle that would need a remainder.
          constexpr int IT = KC * (W / 8) / 64;
#pragma unroll 4
          for (int it = 0; it < IT; ++it) {
            const int i = pt + 64 * it, jj = i / (W / 8), c8 = i % (W / 8);
            int j = shfl_i(blk, jj / BLOCK) * BLOCK + jj % BLOCK;
            j = j < (int)TK ? j : (int)TK - 1;
            cp_async16_ca(dst + c8 * LC + jj * 8, xb + (long)j * XT + c8 * 8);
          }
        };
    long long tw = 0, tg = 0, t = TRACE ? clock_cycles() : 0;
    const long long t0c = t;
    auto lap = [&](long long &acc) __attribute__((always_inline)) {
      if constexpr (TRACE) {
        const long long n = clock_cycles();
        acc += n - t;
        t = n;
      }
    };
    uint64_t *full = half ? vfull : kfull, *empty = half ? vempty : kempty;
    for (int c = 0; c < nch; ++c) {
      // A stage's n-th fill waits for its (n-1)-th release (parity of n - 1;
      // the first passes on the fresh barrier). V's stage 1 first holds the
      // zeros the first step's P V reads: its release is V_1's wait.
      mbar_wait(&empty[c & 1], ((c >> 1) & 1) ^ (half && (c & 1) ? 0 : 1));
      lap(tw);
      if (half)
        gather.template operator()<DV, VT, VH>(v, Vs + (c & 1) * VSZ, c);
      else
        gather.template operator()<D, KT, KH>(k, Ks + (c & 1) * KSZ, c);
      cp_async_mbar_arrive(&full[c & 1]);
      lap(tg);
    }
    cp_async_wait_all();
    if constexpr (TRACE)
      if (bid_x() == 0 && bid_y() == 0 && (tid & 31) == 0)
        printf("attention_ws trace: producer warp %d (%c): chunks %d, cycles "
               "%lld: waiting for free stages %lld, issuing copies %lld\n",
               tid >> 5, half ? 'V' : 'K', nch, t - t0c, tw, tg);
    return;
  }
  wg_regs_inc<240>();
  // One copy of the consumer per warpgroup: its Q tile's address is then a
  // compile-time offset, so ptxas keeps the S product's descriptors in
  // uniform registers (computed from the warpgroup index they took 32
  // vector registers and spilled at 240).
  auto consume = [&]<int wg>() __attribute__((always_inline)) {
    const int ct = tid - 128, w = ct >> 5, g = (ct & 31) >> 2;
    const int tl0 = (16 * w + g) / HG, tl1 = (16 * w + g + 8) / HG;
    float o[DV / 2];
#pragma unroll
    for (int i = 0; i < DV / 2; ++i)
      o[i] = 0;
    const wg_desc dq = wg_desc_of(Qs + wg * QSZ, LC * 2),
                  dk0 = wg_desc_of(Ks, LC * 2),
                  dv0 = wg_desc_mn(Vs, 128, LC * 2);
    const uint32_t khi = (uint32_t)(dk0 >> 32);
    auto issuePV = [&](const uint32_t(*pp)[4], int vbuf)
                       __attribute__((always_inline)) {
                         wg_issue_pv<DV, KC, VSZ>(o, pp, dv0, vbuf);
                       };
    auto waitPV = [&]() __attribute__((always_inline)) { wg_wait_pv<DV>(o); };
    const float sc2 = scale * 1.4426950408889634f; // exp(x) = 2^(x log2 e)
    float m0 = -__builtin_inff(), m1 = -__builtin_inff(), l0 = 0, l1 = 0;
    uint32_t pA[KC / 16][4], pB[KC / 16][4];
    wg_zero_p<KC>(pA);
    int c = 0;
    // TRACE's phase counters (cycles): stages, turn, issue, S, softmax,
    // P V, rescale.
    long long ph[7] = {0, 0, 0, 0, 0, 0, 0}, t = TRACE ? clock_cycles() : 0;
    const long long t0c = t;
    auto lap = [&](int i) __attribute__((always_inline)) {
      if constexpr (TRACE) {
        const long long n = clock_cycles();
        ph[i] += n - t;
        t = n;
      }
    };
    if constexpr (PINGPONG)
      if (wg == 1)
        arrive_named(1, 256); // warpgroup 0 goes first
    // Chunk c: P V of the previous chunk from pp (zeros over zeros at c = 0);
    // this chunk's P into pc.
    auto stepFn = [&](const uint32_t(*pp)[4],
                      uint32_t(*pc)[4]) __attribute__((always_inline)) {
      const int b = c & 1;
      mbar_wait(&kfull[b], (c >> 1) & 1);
      if (c > 0)
        mbar_wait(&vfull[b ^ 1], ((c - 1) >> 1) & 1);
      // The copies wrote through the generic proxy; wgmma reads through the
      // async one.
      fence_proxy_async();
      lap(0);
      float s[32];
#pragma unroll
      for (int i = 0; i < 32; ++i)
        s[i] = 0;
      // Ping-pong: this warpgroup issues its products once the other has
      // issued its own (named barrier 1 + wg), so one's softmax runs under
      // the other's products instead of both at once.
      if constexpr (PINGPONG)
        sync_named(1 + wg, 256);
      lap(1);
      const uint32_t qlo = strata_opaque((uint32_t)dq),
                     klo = strata_opaque((uint32_t)dk0) + b * (KSZ * 2 / 16);
      wg_fence();
      // Descriptors stepped by 32-bit adds from opaque values, so LLVM does
      // not keep all 32 words live (ptxas still computes them ahead: what
      // keeps them out of the 240 vector registers is the Q tile's
      // compile-time address, see consume below).
      uint32_t ql = qlo, kl = klo;
#pragma unroll
      for (int dk = 0; dk < D; dk += 16) {
        wgmma_m64n64(s, wg_desc_make(ql, khi), wg_desc_make(kl, khi));
        ql = strata_opaque(ql + 2 * (LC * 2 / 16));
        kl = strata_opaque(kl + 2 * (LC * 2 / 16));
      }
      wg_commit();
      wg_fence();
      issuePV(pp, b ^ 1);
      // The other warpgroup's turn (warpgroup 1 skips its last: warpgroup 0
      // waits nch times and got one arrival ahead of the loop).
      if constexpr (PINGPONG)
        if (wg == 0 || c + 1 < nch)
          arrive_named(2 - wg, 256);
      lap(2);
      wg_wait_but_one(s);
      mbar_arrive(&kempty[b]);
      lap(3);
      auto lastCol = [&](int tl) __attribute__((always_inline)) {
        const int lim = (tl < BQ ? qu.vis[tl] : 0) - 1 - c * KC;
        return lim < -1 ? -1 : lim > KC ? KC : lim;
      };
      const uint32_t bitsA = tl0 < BQ ? qu.msk[c * BQ + tl0] : 0,
                     bitsB = tl1 < BQ ? qu.msk[c * BQ + tl1] : 0;
      float cA, cB;
      wg_softmax_chunk<BLOCK, KC, SMX>(s, pc, lastCol(tl0), lastCol(tl1), bitsA,
                                       bitsB, sc2, m0, m1, l0, l1, cA, cB);
      // EXPFIRST: nothing orders the wait for P V after the softmax, and
      // ptxas puts it before the exponentials (after the masks and maxima),
      // so this warpgroup's P V overlaps only part of its softmax. A branch
      // on the rows' sums (which are never negative: never taken) keeps the
      // wait after them.
      if constexpr (EXPFIRST)
        if (l0 == -1.0f && l1 == -1.0f)
          asm volatile("nanosleep.u32 0;" ::: "memory");
      lap(4);
      waitPV();
      // At c = 0 this releases the zeros (V_1 goes there next).
      mbar_arrive(&vempty[b ^ 1]);
      lap(5);
      wg_rescale_o<DV>(o, cA, cB);
      lap(6);
      ++c;
    };
    bool lastInB = false;
    if constexpr (ROLLED) {
      // One copy of the step (half the loop's code: instruction fetch was
      // ~15 % of the consumers' stall samples), P copied back once its
      // P V has landed, by volatile moves: left to LLVM the copies sank
      // into the loop's latch, where ptxas took them for writes to a
      // wgmma's inputs inside its pipeline stage and serialised (C7513).
      while (c < nch) {
        stepFn(pA, pB);
#pragma unroll
        for (int i = 0; i < KC / 16; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j)
            asm volatile("mov.b32 %0, %1;" : "=r"(pA[i][j]) : "r"(pB[i][j]));
      }
    } else {
      lastInB = wg_steps_alternating(
          pA, pB, stepFn,
          [&]() __attribute__((always_inline)) { return c < nch; });
    }
    // The last chunk's P V.
    if (nch > 0) {
      mbar_wait(&vfull[(nch - 1) & 1], ((nch - 1) >> 1) & 1);
      fence_proxy_async();
      wg_fence();
      if (lastInB)
        issuePV(pB, (nch - 1) & 1);
      else
        issuePV(pA, (nch - 1) & 1);
      waitPV();
    }
    if constexpr (TRACE)
      if (bid_x() == 0 && bid_y() == 0 && (ct & 31) == 0)
        printf("attention_ws trace: consumer warpgroup %d warp %d: chunks "
               "%d, cycles %lld: stages %lld, turn %lld, issue %lld, S %lld, "
               "softmax %lld, P V %lld, rescale %lld\n",
               wg, w, nch, t - t0c, ph[0], ph[1], ph[2], ph[3], ph[4], ph[5],
               ph[6]);
    wg_attention_store<H, DV, GATED, GT, GH>(
        o, l0, l1, t0 + tl0, t0 + tl1, h0 + (16 * w + g) % HG,
        h0 + (16 * w + g + 8) % HG, tl0 < BQ, tl1 < BQ, T, gate, y);
  };
  if (role == 1)
    consume.template operator()<0>();
  else
    consume.template operator()<1>();
}
