//===- AttentionLayouts.h - the attention forms' shared memory --*- C++ -*-===//
//
// One source for the shared memory of the portable attention forms: the
// host sizes each form with it (codegen/attention/AttentionForm.cpp,
// selectAttention) and the kernel carves its buffers with it
// (AttentionGqa.h) or checks its own arrays against it at compile time
// (AttentionTile.h), so the two cannot disagree. Plain constexpr C++: it
// compiles in the host library and, embedded as text, in every device
// translation unit (a constexpr function is callable from device code).
//
//===----------------------------------------------------------------------===//
/// attention_gqa's dynamic shared memory, byte offsets from its base: Q
/// [16 NRG][D + 8], K [KC][D + 8], V^T [DV][KC + 8], P [16 NRG][KC + 8]
/// (the 2-byte matrix type), the NSP waves' partial maxima and sums
/// [NSP][16 NRG] each (f32), the QSA bitmap [16][NBW] (words; NBW 0 without
/// QSA), and for the sparse form the union of the 16 rows' blocks [NBW]
/// (words) and a chunk's block ids [EPC] (ints; EPC = KC / BLOCK, 0 without
/// the sparse form); `bytes` in all.
struct gqa_layout {
  long q, k, vt, p, mx, sm, sel, uni, ids, bytes;
};

/// The layout of NRG row groups of 16 query rows, NSP waves a group, KC
/// keys a chunk, key dim D, value dim DV, NBW words a bitmap row and EPC
/// union blocks a chunk (0: not the sparse form).
constexpr gqa_layout gqa_layout_of(long nrg, long nsp, long kc, long d, long dv,
                                   long nbw, long epc = 0) {
  const long r = 16 * nrg;
  gqa_layout l{};
  l.q = 0;
  l.k = l.q + 2 * r * (d + 8);
  l.vt = l.k + 2 * kc * (d + 8);
  l.p = l.vt + 2 * dv * (kc + 8);
  l.mx = l.p + 2 * r * (kc + 8);
  l.sm = l.mx + 4 * nsp * r;
  l.sel = l.sm + 4 * nsp * r;
  l.uni = l.sel + 4 * 16 * nbw;
  l.ids = l.uni + (epc > 0 ? 4 * nbw : 0);
  l.bytes = l.ids + 4 * epc;
  return l;
}

/// attention_tile's static shared memory in bytes: Q [BQ][D], K [KC][D +
/// 1], V [KC][DV] in the inputs' element sizes (QB, KB, VB bytes), the
/// scores [BQ][KC] (f32), the QSA bitmap [BQ][NBW] (words; one word
/// without QSA, NBW 0) and the chunk flag (a word).
constexpr long attention_tile_shared(long bq, long kc, long d, long dv,
                                     long nbw, long qb, long kb, long vb) {
  return qb * bq * d + kb * kc * (d + 1) + vb * kc * dv + 4 * bq * kc +
         4 * (nbw > 0 ? bq * nbw : 1) + 4;
}
