//===- AttentionWg.h - attention on wgmma ---------------------------------===//
//
// attention_wg: flash attention on the warpgroup matrix units (wgmma),
// software-pipelined by one chunk, and the steps attention_ws shares
// (P V issue and wait, the online softmax of a chunk, the epilogue).
//
// A piece of the device library: DeviceLib.h includes it at its place in
// the emitted translation unit, and codegen/EmbedText.cmake inlines it
// there without this banner, so the emitted text is the library's.
//
//===----------------------------------------------------------------------===//
/// O += P V over one KC-key chunk: KC / 16 wgmma with P from registers (the
/// accumulator layout of S) and V MN-major in buffer \p vbuf (VSZ elements
/// each) from descriptor \p dv0 (buffer 0), stepped by 32-bit adds from a
/// value made opaque (see strata_opaque); one commit group.
template <int DV, int KC, int VSZ>
STRATA_FN void wg_issue_pv(float *o, const uint32_t (*pp)[4], wg_desc dv0,
                           int vbuf) {
  const uint32_t vhi = (uint32_t)(dv0 >> 32);
  const uint32_t vlo = strata_opaque((uint32_t)dv0) + vbuf * (VSZ * 2 / 16);
#pragma unroll
  for (int kk = 0; kk < KC / 16; ++kk)
    wgmma_rs_mn<DV>(o, pp[kk], wg_desc_make(vlo + kk * 16, vhi));
  wg_commit();
}
/// Waits for every product in flight and ties all of O to the wait.
template <int DV> STRATA_FN void wg_wait_pv(float *o) {
  wg_wait_all(o);
#pragma unroll
  for (int i = 32; i < DV / 2; i += 32)
    wg_pin32(o + i);
}
/// Zeroes a P register set (the first step's P V multiplies it).
template <int KC> STRATA_FN void wg_zero_p(uint32_t (*p)[4]) {
#pragma unroll
  for (int kk = 0; kk < KC / 16; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r)
      p[kk][r] = 0;
}
/// O's rows A and B times their corrections once the product in flight has
/// landed; a wave skips the DV / 2 multiplies when none of its rows' maxima
/// moved (most steps, once they settle).
template <int DV> STRATA_FN void wg_rescale_o(float *o, float cA, float cB) {
  if (__nvvm_vote_any_sync(0xffffffffu, cA != 1.0f || cB != 1.0f)) {
#pragma unroll
    for (int i = 0; i < DV / 2; ++i)
      o[i] *= (i & 2) ? cB : cA;
  }
}
/// Runs \p step(pp, pc) while \p more(), the two P register sets taking
/// turns (unrolled by two, so no copy joins them and the P being written
/// never shares a register with the P an in-flight P V reads); returns
/// whether the last step's P is in \p pB.
template <class Step, class More>
STRATA_FN bool wg_steps_alternating(uint32_t (*pA)[4], uint32_t (*pB)[4],
                                    Step &&step, More &&more) {
  bool lastInB = false;
  while (more()) {
    step(pA, pB);
    lastInB = true;
    if (!more())
      break;
    step(pB, pA);
    lastInB = false;
  }
  return lastInB;
}
/// attention_wg's online softmax of one 64-key chunk on S's accumulators
/// (rows g and g + 8 of this wave: A and B): the masks (columns past each
/// row's last visible one; with QSA the blocks its bits do not select), the
/// rows' new maxima (log2 units, the scale folded in), P as bf16 pairs into
/// \p pc (the register A operand of P V), the sums \p l0, \p l1 and the
/// corrections \p cA, \p cB for O.
/// SMX (A/B bits, STRATA_ATTN_SMX): 1 folds the scale into the exponent's
/// FFMA (the maxima taken on the raw products: scaling by a positive
/// number keeps their order); 2 reduces the maxima and sums by trees (4
/// dependent steps a row, not 16); 4 keeps a row's maximum until a chunk
/// exceeds it by more than 2^8 (P then up to 256: bf16 and the fp32 sums
/// hold it), so the O rescale runs only on such a jump, not on every new
/// maximum.
template <int BLOCK, int KC, int SMX = 0>
STRATA_FN void wg_softmax_chunk(float *s, uint32_t (*pc)[4], int limA, int limB,
                                uint32_t bitsA, uint32_t bitsB, float sc2,
                                float &m0, float &m1, float &l0, float &l1,
                                float &cA, float &cB) {
  constexpr bool FOLD = SMX & 1, TREE = SMX & 2, LAZY = SMX & 4;
  const int qd = tid_x() & 3;
  float mxA = -__builtin_inff(), mxB = -__builtin_inff();
  float ra[16], rb[16];
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const int col = 8 * (i >> 2) + 2 * qd + (i & 1);
    bool ok = col <= ((i & 2) ? limB : limA);
    if constexpr (BLOCK > 0)
      ok = ok &&
           ((((i & 2) ? bitsB : bitsA) >> (BLOCK < KC ? col / BLOCK : 0)) & 1u);
    s[i] = ok ? (FOLD ? s[i] : s[i] * sc2) : -__builtin_inff();
    if constexpr (TREE) {
      if (i & 2)
        rb[(i >> 2) * 2 + (i & 1)] = s[i];
      else
        ra[(i >> 2) * 2 + (i & 1)] = s[i];
    } else if (i & 2) {
      mxB = __builtin_fmaxf(mxB, s[i]);
    } else {
      mxA = __builtin_fmaxf(mxA, s[i]);
    }
  }
  if constexpr (TREE) {
#pragma unroll
    for (int w = 8; w >= 1; w >>= 1)
#pragma unroll
      for (int j = 0; j < w; ++j) {
        ra[j] = __builtin_fmaxf(ra[j], ra[j + w]);
        rb[j] = __builtin_fmaxf(rb[j], rb[j + w]);
      }
    mxA = ra[0], mxB = rb[0];
  }
  mxA = __builtin_fmaxf(mxA, shfl_xor_f(mxA, 1));
  mxA = __builtin_fmaxf(mxA, shfl_xor_f(mxA, 2));
  mxB = __builtin_fmaxf(mxB, shfl_xor_f(mxB, 1));
  mxB = __builtin_fmaxf(mxB, shfl_xor_f(mxB, 2));
  if constexpr (FOLD)
    mxA *= sc2, mxB *= sc2;
  float nA = __builtin_fmaxf(m0, mxA), nB = __builtin_fmaxf(m1, mxB);
  if constexpr (LAZY) {
    // -inf + 8 is -inf: a row's first visible key always sets its maximum.
    if (!(mxA > m0 + 8.0f))
      nA = m0;
    if (!(mxB > m1 + 8.0f))
      nB = m1;
  }
  // A row with no key yet subtracts 0: its p and correction are 0.
  const float uA = nA == -__builtin_inff() ? 0.0f : nA;
  const float uB = nB == -__builtin_inff() ? 0.0f : nB;
  // ex2.approx.ftz: no denormal fix-up around each of the 34 (a p below
  // 2^-126 is 0 beside a row sum of at least 1).
  cA = __nvvm_ex2_approx_ftz_f(m0 - uA);
  cB = __nvvm_ex2_approx_ftz_f(m1 - uB);
  m0 = nA, m1 = nB;
  float sA = 0, sB = 0;
#pragma unroll
  for (int i = 0; i < 32; i += 2) {
    const float u = (i & 2) ? uB : uA;
    const float p0 = __nvvm_ex2_approx_ftz_f(
                    FOLD ? __builtin_fmaf(s[i], sc2, -u) : s[i] - u),
                p1 = __nvvm_ex2_approx_ftz_f(
                    FOLD ? __builtin_fmaf(s[i + 1], sc2, -u) : s[i + 1] - u);
    if constexpr (TREE) {
      if (i & 2)
        rb[(i >> 2)] = p0 + p1;
      else
        ra[(i >> 2)] = p0 + p1;
    } else if (i & 2) {
      sB += p0 + p1;
    } else {
      sA += p0 + p1;
    }
    pc[i / 8][(i % 8) / 2] = mma_pack2(p0, p1);
  }
  if constexpr (TREE) {
#pragma unroll
    for (int w = 4; w >= 1; w >>= 1)
#pragma unroll
      for (int j = 0; j < w; ++j) {
        ra[j] += ra[j + w];
        rb[j] += rb[j + w];
      }
    sA = ra[0], sB = rb[0];
  }
  l0 = l0 * cA + sA;
  l1 = l1 * cB + sB;
}
/// attention_wg's epilogue for this thread's rows A and B (tokens tA, tB,
/// heads hA, hB; okA/okB false for padding rows): O / l, times the gate's
/// sigmoid when GATED, stored by element pairs (each lane holds column
/// pairs (2 qd, 2 qd + 1): one 2-element access each for the gate and the
/// output; the emitter keeps both 4-byte aligned).
template <int H, int DV, bool GATED, long GT, long GH, class G, class Y>
STRATA_FN void wg_attention_store(const float *o, float l0, float l1, long tA,
                                  long tB, int hA, int hB, bool okA, bool okB,
                                  long T, const G *gate, Y *y) {
  const int qd = tid_x() & 3;
  l0 += shfl_xor_f(l0, 1);
  l0 += shfl_xor_f(l0, 2);
  l1 += shfl_xor_f(l1, 1);
  l1 += shfl_xor_f(l1, 2);
  const float rA = l0 > 0 ? 1.0f / l0 : 0.0f, rB = l1 > 0 ? 1.0f / l1 : 0.0f;
#pragma unroll
  for (int i = 0; i < DV / 2; i += 2) {
    const long t = (i & 2) ? tB : tA;
    const int h = (i & 2) ? hB : hA, col = 8 * (i >> 2) + 2 * qd;
    if (t >= T || !((i & 2) ? okB : okA))
      continue;
    const float r = (i & 2) ? rB : rA;
    float v0 = o[i] * r, v1 = o[i + 1] * r;
    if (GATED) {
      float g0, g1;
      ld2(gate, t * GT + h * GH + col, &g0, &g1);
      v0 *= sm_sigmoid(g0);
      v1 *= sm_sigmoid(g1);
    }
    st2(y, (t * H + h) * DV + col, v0, v1);
  }
}
/// Flash attention on the warpgroup matrix units (sm_90a) for query heads
/// that share a KV head. Block (x, y): 8 waves, two warpgroups of 64 rows;
/// wave w takes head h0 + w % NHB (h0 = NHB y; NHB divides HG) and the 16
/// tokens from t0 + 16 (w / NHB) (t0 = BQ (grid x - 1 - x), BQ = 128 /
/// NHB: the longest tiles first), so each
/// staged chunk of 64 keys and values serves 128 query rows. Per chunk and
/// warpgroup: S = Q K^T by wgmma with both operands in shared memory
/// (K-major), the online softmax on S's accumulators (each row's 64 values
/// over the 4 lanes of a quad: 2 shuffles for the max; sums stay per lane
/// until the end), and O += P V with P straight from the accumulators as
/// the register A operand (its layout is the accumulator's) and V MN-major,
/// as it lies in memory. Software-pipelined by one chunk: step j issues
/// S_j and then O += P_{j-1} V_{j-1}, so the matrix units run the P V
/// product while the waves do step j's softmax; the O rescale waits for it.
/// Hence K runs one chunk ahead of V: step j copies (cp.async) K_{j+1} and
/// V_j, each into the buffer its chunk two steps back has left, and waits
/// for K_j and V_{j-1} (copied a step earlier) before the proxy fence, which
/// then has nothing in flight to drain. Keys past TK read key TK - 1
/// (finite, masked). Masks as attention_gqa's; with QSA, the chunks none of
/// the BQ tokens selects are skipped (a bitmap of chunks). Dynamic shared
/// memory: Q [2][D / 8][64 x 8 + 8], then two buffers of K [D / 8][64 x 8 +
/// 8] and V [DV / 8][64 x 8 + 8] (bf16), the QSA row bitmaps [BQ][NBW] and
/// the chunk bitmap [NCW].
///
/// SPARSE (QSA, causal): a block takes all HG heads of one KV head for BQ =
/// 128 / HG tokens (row r: token r / HG, head r % HG; rows past BQ HG are
/// padding), and its keys are the union of those tokens' selected blocks,
/// compacted in key order: chunk c holds the keys of union blocks [EPC c,
/// EPC c + EPC) (EPC = 64 / BLOCK), gathered row by row. Selections of
/// nearby tokens overlap, so with few tokens a tile the union is much
/// smaller than the causal prefix (bench/qsa_union.py: 10 tokens visit
/// ~0.6 of the dense-causal keys on the synthetic qwen4exp, 32 tokens in
/// 64-key chunks all of them). Each row's mask in chunk c: EPC bits (which
/// union blocks its token selected) and its last visible column (the union
/// keys up to its token, counted once per token). Shared memory after V:
/// the union's tables (QsaUnion; COMPACT: without the row bitmaps, for
/// plans whose row bitmaps do not fit).
template <int NHB, int H, int D, int DV, int HG, bool CAUSAL, bool GATED,
          int BLOCK, int NB, int NBW, int NCW, bool SPARSE, bool COMPACT,
          long QT, long QH, long KT, long KH, long VT, long VH, long GT,
          long GH, class G, class Y>
STRATA_FN void attention_wg(const bf16 *q, const bf16 *k, const bf16 *v,
                            const G *gate, const int32_t *index, Y *y, long T,
                            long TK, float scale) {
  constexpr int NT = 256, BQ = SPARSE ? 128 / HG : 128 / NHB, KC = 64,
                LC = KC * 8 + 8;
  constexpr int QSZ = (D / 8) * LC, KSZ = (D / 8) * LC, VSZ = (DV / 8) * LC;
  static_assert(D % 16 == 0 && DV % 64 == 0 && DV <= 256, "attention_wg");
  static_assert(BLOCK == 0 || (KC % BLOCK == 0 && KC / BLOCK <= 32) ||
                    BLOCK % KC == 0,
                "attention_wg: QSA block");
  static_assert(!SPARSE || (CAUSAL && NHB == HG && HG <= 128 && BLOCK >= 2 &&
                            KC % BLOCK == 0 && NBW * 32 <= 65536),
                "attention_wg: sparse form");
  constexpr int EPC = SPARSE ? KC / BLOCK : 1; // union blocks a chunk
  extern STRATA_SHARED __attribute__((aligned(128))) uint8_t strata_dyn[];
  mma_t *Qs = (mma_t *)strata_dyn;
  mma_t *Ks = Qs + 2 * QSZ;
  mma_t *Vs = Ks + 2 * KSZ;
  uint32_t *sel = (uint32_t *)(Vs + 2 * VSZ);
  uint32_t *csel = sel + BQ * NBW;
  // The sparse form's tables (see above).
  const QsaUnion qu = qsa_union_at<BQ, NBW, NCW, COMPACT>(sel);
  const uint32_t *msk = qu.msk;
  const int *vis = qu.vis;
  const uint16_t *ulist = qu.list;
  // The last tokens' tiles (the longest: causal) first, so the short ones
  // fill in behind them at the end of the grid; a tile past T (the grid
  // rounds up) leaves at once.
  const long t0 = (long)(grid_x() - 1 - bid_x()) * BQ;
  if (t0 >= T)
    return;
  const int h0 = bid_y() * NHB, kh = h0 / HG;
  const int tid = tid_x(), w = tid >> 5, wg = w >> 2, g = (tid & 31) >> 2;
  const uint16_t *qb = (const uint16_t *)q, *kb = (const uint16_t *)k,
                 *vb = (const uint16_t *)v;
  // Row R of the block's 128 (warpgroup R / 64, wave R / 16): its token
  // (local; BQ and past for padding rows) and its head within the group.
  auto rowTok = [](int row) __attribute__((always_inline)) {
    return SPARSE ? row / HG : 16 * ((row >> 4) / NHB) + (row & 15);
  };
  auto rowHead = [](int row) __attribute__((always_inline)) {
    return SPARSE ? row % HG : (row >> 4) % NHB;
  };
  for (int i = tid; i < 128 * (D / 8); i += NT) {
    int row = i / (D / 8), c8 = i % (D / 8);
    long tt = t0 + rowTok(row);
    if (tt >= T)
      tt = T - 1; // computed, never stored
    cp_async16(Qs + (row >> 6) * QSZ + c8 * LC + (row & 63) * 8,
               qb + tt * QT + (h0 + rowHead(row)) * QH + c8 * 8);
  }
  const long last = CAUSAL ? (t0 + BQ - 1 < T ? t0 + BQ - 1 : T - 1) : TK - 1;
  int nch = (int)(last / KC) + 1;
  if constexpr (SPARSE) {
    nch =
        qsa_union_build<BQ, NB, NBW, NCW, COMPACT, BLOCK, NT>(index, t0, T, qu);
  } else if constexpr (BLOCK > 0) {
    qsa_bitmap<BQ, NB, NBW, NT>(index, t0, T, sel);
    for (int i = tid; i < NCW; i += NT)
      csel[i] = 0;
    sync_block();
    // Chunk c is needed when any row selects a block overlapping it.
    for (int c = tid; c < nch; c += NT) {
      long b0 = (long)c * KC / BLOCK;
      constexpr int NBC = BLOCK < KC ? KC / BLOCK : 1;
      uint32_t any = 0;
      if (b0 < NBW * 32)
        for (int r = 0; r < BQ; ++r)
          any |= sel[r * NBW + b0 / 32] >> (b0 % 32);
      if (any & (NBC == 32 ? 0xffffffffu : (1u << NBC) - 1u))
        __atomic_fetch_or(&csel[c / 32], 1u << (c % 32), __ATOMIC_RELAXED);
    }
    sync_block();
  }
  // The next needed chunk after c (nch when none).
  auto next = [&](int c) __attribute__((always_inline)) {
    if constexpr (BLOCK == 0 || SPARSE) {
      return c + 1;
    } else {
      for (int n = c + 1; n < nch;) {
        uint32_t word = csel[n / 32] >> (n % 32);
        if (word)
          return n + __builtin_ctz(word) < nch ? n + __builtin_ctz(word) : nch;
        n = (n / 32 + 1) * 32;
      }
      return nch;
    }
  };
  float o[DV / 2];
#pragma unroll
  for (int i = 0; i < DV / 2; ++i)
    o[i] = 0;
  // A chunk's rows of X (K or V: W values a row, rows XT apart) into
  // buffer dst ([W / 8][64 x 8 + 8]). Whole chunks (the common case) by
  // fixed offsets from one source and one destination pointer a thread;
  // the chunk past TK reads key TK - 1 instead. Sparse: row jj is key
  // jj % BLOCK of the chunk's union block jj / BLOCK.
  auto loadX = [&]<int W, long XT, long XH>(
                   const uint16_t *x, mma_t *dst,
                   int c) __attribute__((always_inline)) {
    const long j0 = (long)c * KC;
    if constexpr (SPARSE) {
      constexpr int RP = NT / (W / 8); // rows a pass
      if constexpr (NT % (W / 8) == 0 && KC % RP == 0 && RP % BLOCK == 0) {
        // A thread's rows are key jj % BLOCK of every (RP / BLOCK)-th
        // union block from jj / BLOCK. The thread index made opaque, so
        // ptxas recomputes these addresses each step rather than keep
        // them live through the loop (where they spilled).
        const int to = (int)strata_opaque((uint32_t)tid);
        const int jj = to / (W / 8), c8 = to % (W / 8);
        const uint16_t *ub = ulist + c * EPC + jj / BLOCK;
        const uint16_t *src = x + kh * XH + c8 * 8;
        mma_t *d = dst + c8 * LC + jj * 8;
#pragma unroll 1
        for (int n = 0; n < KC / RP; ++n) {
          // 32-bit key arithmetic: the loop runs at the register limit.
          const int j = (int)ub[n * (RP / BLOCK)] * BLOCK + jj % BLOCK;
          cp_async16_ca(d + n * RP * 8,
                        src + (long)(j < (int)TK ? j : (int)TK - 1) * XT);
        }
        return;
      }
      for (int i = tid; i < KC * (W / 8); i += NT) {
        int jj = i / (W / 8), c8 = i % (W / 8);
        long j = (long)ulist[c * EPC + jj / BLOCK] * BLOCK + jj % BLOCK;
        if (j >= TK)
          j = TK - 1;
        cp_async16_ca(dst + c8 * LC + jj * 8, x + j * XT + kh * XH + c8 * 8);
      }
      return;
    }
    if constexpr (NT % (W / 8) == 0 && KC % (NT / (W / 8)) == 0) {
      constexpr int RP = NT / (W / 8); // rows a pass
      if (j0 + KC <= TK) {
        const int jj = tid / (W / 8), c8 = tid % (W / 8);
        const uint16_t *src = x + (j0 + jj) * XT + kh * XH + c8 * 8;
        mma_t *d = dst + c8 * LC + jj * 8;
#pragma unroll
        for (int n = 0; n < KC / RP; ++n)
          cp_async16_ca(d + n * RP * 8, src + n * RP * XT);
        return;
      }
    }
    for (int i = tid; i < KC * (W / 8); i += NT) {
      int jj = i / (W / 8), c8 = i % (W / 8);
      long j = j0 + jj;
      if (j >= TK)
        j = TK - 1;
      cp_async16_ca(dst + c8 * LC + jj * 8, x + j * XT + kh * XH + c8 * 8);
    }
  };
  auto loadK = [&](int c, int buf) __attribute__((always_inline)) {
    loadX.template operator()<D, KT, KH>(kb, Ks + buf * KSZ, c);
  };
  auto loadV = [&](int c, int buf) __attribute__((always_inline)) {
    loadX.template operator()<DV, VT, VH>(vb, Vs + buf * VSZ, c);
  };
  // O += P V for the chunk whose V is in buffer vbuf (P from registers).
  // Descriptor words: Q (this warpgroup's), K and V buffer 0, stepped by
  // 32-bit adds from values made opaque each step (see strata_opaque).
  const wg_desc dq = wg_desc_of(Qs + wg * QSZ, LC * 2),
                dk0 = wg_desc_of(Ks, LC * 2), dv0 = wg_desc_mn(Vs, 128, LC * 2);
  const uint32_t khi = (uint32_t)(dk0 >> 32);
  auto issuePV = [&](const uint32_t(*pp)[4], int vbuf)
                     __attribute__((always_inline)) {
                       wg_issue_pv<DV, KC, VSZ>(o, pp, dv0, vbuf);
                     };
  auto waitPV = [&]() __attribute__((always_inline)) { wg_wait_pv<DV>(o); };
  // Rows g and g + 8 of this wave: their tokens (local to the block).
  const int tl0 = rowTok(16 * w + g), tl1 = rowTok(16 * w + g + 8);
  const float sc2 = scale * 1.4426950408889634f; // exp(x) = 2^(x log2 e)
  float m0 = -__builtin_inff(), m1 = -__builtin_inff(), l0 = 0, l1 = 0;
  // P of the previous step's chunk and this step's: two register sets used
  // in turn (steps unrolled by two), so no copy joins them and the P being
  // written never shares a register with the P an in-flight P V reads.
  uint32_t pA[KC / 16][4], pB[KC / 16][4];
  wg_zero_p<KC>(pA);
  for (int i = tid; i < VSZ / 8; i += NT)
    zero8(Vs + VSZ + i * 8);
  int c = next(-1), step = 0;
  if (c < nch)
    loadK(c, 0);
  cp_async_commit();
  // One step: chunk c; P V of the previous chunk from pp; this P into pc.
  auto stepFn = [&](const uint32_t(*pp)[4],
                    uint32_t(*pc)[4]) __attribute__((always_inline)) {
    const int cn = next(c), b = step & 1;
    cp_async_wait_all();
    fence_proxy_async();
    sync_block();
    float s[32];
#pragma unroll
    for (int i = 0; i < 32; ++i)
      s[i] = 0;
    const uint32_t qlo = strata_opaque((uint32_t)dq),
                   klo = strata_opaque((uint32_t)dk0) + b * (KSZ * 2 / 16);
    wg_fence();
#pragma unroll
    for (int dk = 0; dk < D; dk += 16)
      wgmma_m64n64(s, wg_desc_make(qlo + (dk / 8) * (LC * 2 / 16), khi),
                   wg_desc_make(klo + (dk / 8) * (LC * 2 / 16), khi));
    wg_commit();
    // Step 0's P is 0 and its V buffer zeros: one uniform path, so no
    // accumulator is read on a path the compiler could not prove waited.
    wg_fence();
    issuePV(pp, b ^ 1);
    // The copies after the products are issued (they only touch buffers
    // those do not read), so the matrix units start at once and the copies'
    // address work (the sparse form's union lookups) overlaps them.
    if (cn < nch)
      loadK(cn, b ^ 1);
    loadV(c, b);
    cp_async_commit();
    wg_wait_but_one(s);
    // Masks (causal, past TK, QSA) and each row's maximum, in log2 units.
    const long j0 = (long)c * KC;
    // Each row's last visible column of the chunk (-1: none), so the masks
    // are 32-bit compares against compile-time columns.
    auto lastCol = [&](int tl) __attribute__((always_inline)) {
      if constexpr (SPARSE) {
        const int lim = (tl < BQ ? vis[tl] : 0) - 1 - c * KC;
        return lim < -1 ? -1 : lim > KC ? KC : lim;
      }
      long lim = (CAUSAL && t0 + tl < TK ? t0 + tl : TK - 1) - j0;
      return (int)(lim < -1 ? -1 : lim > KC ? KC : lim);
    };
    const int limA = lastCol(tl0), limB = lastCol(tl1);
    uint32_t bitsA = 0xffffffffu, bitsB = 0xffffffffu;
    if constexpr (SPARSE) {
      bitsA = tl0 < BQ ? msk[c * BQ + tl0] : 0;
      bitsB = tl1 < BQ ? msk[c * BQ + tl1] : 0;
    } else if constexpr (BLOCK > 0) {
      long b0 = j0 / BLOCK;
      bitsA = b0 < NBW * 32 ? sel[tl0 * NBW + b0 / 32] >> (b0 % 32) : 0;
      bitsB = b0 < NBW * 32 ? sel[tl1 * NBW + b0 / 32] >> (b0 % 32) : 0;
    }
    float cA, cB;
    wg_softmax_chunk<BLOCK, KC>(s, pc, limA, limB, bitsA, bitsB, sc2, m0, m1,
                                l0, l1, cA, cB);
    // O holds the chunks before this one (scale m before it): rescale once
    // the P V in flight has landed.
    waitPV();
    wg_rescale_o<DV>(o, cA, cB);
    c = cn;
    ++step;
  };
  const bool lastInB = wg_steps_alternating(
      pA, pB, stepFn, [&]() __attribute__((always_inline)) { return c < nch; });
  // The last chunk's P V (its V was copied by the last step).
  if (step > 0) {
    cp_async_wait_all();
    fence_proxy_async();
    sync_block();
    wg_fence();
    if (lastInB)
      issuePV(pB, (step - 1) & 1);
    else
      issuePV(pA, (step - 1) & 1);
    waitPV();
  }
  cp_async_wait_all();
  wg_attention_store<H, DV, GATED, GT, GH>(
      o, l0, l1, t0 + tl0, t0 + tl1, h0 + rowHead(16 * w + g),
      h0 + rowHead(16 * w + g + 8), tl0 < BQ, tl1 < BQ, T, gate, y);
}
