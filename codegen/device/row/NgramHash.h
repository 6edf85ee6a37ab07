//===- NgramHash.h - ngram_hash of one token ------------------------------===//
//
// The row family's ngram_hash: a token's hashes of its last N tokens,
// per order and head.
//
// A piece of the device library: DeviceLib.h includes it at its place in
// the emitted translation unit, and codegen/EmbedText.cmake inlines it
// there without this banner, so the emitted text is the library's.
//
//===----------------------------------------------------------------------===//
/// ngram_hash of token t: the last N tokens (EOS history before the start
/// and after an EOS), per order 2..N the XOR of token * multiplier, then per
/// head (mixed mod size) + offset. One thread.
template <int N, int HEADS>
STRATA_FN void ngram_hash_row(const int32_t *tok, long t, long eos,
                              const long *mults, const long *sizes,
                              const long *offs, int32_t *y) {
  long back[N];
  bool ended = false;
  for (int s = 0; s < N; ++s) {
    long p = t - s;
    back[s] = p < 0 || ended ? eos : (long)tok[p];
    ended = ended || (s > 0 && back[s] == eos);
  }
  for (int order = 2; order <= N; ++order) {
    long mixed = 0;
    for (int s = 0; s < order; ++s)
      mixed ^= back[s] * mults[s];
    for (int j = 0; j < HEADS; ++j) {
      int hh = (order - 2) * HEADS + j;
      y[hh] = (int32_t)(mixed % sizes[hh] + offs[hh]);
    }
  }
}
