//===- Indexer.cpp - QSA indexer pieces and PLE n-gram ids ----------------===//
//
// block_mean pools complete blocks of keys, qsa_select picks each query's
// blocks from them (docs/qwen4exp-model.md §3.7), ngram_hash computes the
// PLE layer's hashed n-gram ids (§3.4).
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/CpuKernel.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <numeric>

namespace strata::runtime::cpu {

void runBlockMean(KernelCtx &ctx) {
  ctx.expectInRank(0, 2, "an input [T, C]");
  int64_t block = ctx.intAttr("block");
  if (block <= 0)
    fail(fmt::format("attribute 'block' must be positive, got {}", block));
  int64_t t = ctx.inShape(0)[0], c = ctx.inShape(0)[1];
  int64_t nb = t / block;
  ctx.expectOutShape(0, {nb, c});
  const float *x = ctx.f32(0);
  float *y = ctx.outF32(0);
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t ci = 0; ci < c; ++ci) {
      float sum = 0;
      for (int64_t i = 0; i < block; ++i)
        sum += x[(b * block + i) * c + ci];
      y[b * c + ci] = sum / static_cast<float>(block);
    }
}

void runQsaSelect(KernelCtx &ctx) {
  ctx.expectInRank(0, 3, "queries [T, Hi, Di]");
  ctx.expectInRank(1, 2, "block keys [NB, Di]");
  int64_t block = ctx.intAttr("block"), top = ctx.intAttr("top");
  if (block <= 0 || top <= 0 || top > (int64_t(1) << 24))
    fail(fmt::format("attributes 'block' and 'top' must be positive (top at "
                     "most 2^24), got {} and {}",
                     block, top));
  int64_t t = ctx.inShape(0)[0], hi = ctx.inShape(0)[1];
  int64_t di = ctx.inShape(0)[2], nb = ctx.inShape(1)[0];
  if (ctx.inShape(1)[1] != di)
    fail(fmt::format("{} must have head dim {}", ctx.describeIn(1), di));
  if (nb < t / block)
    fail(fmt::format("{} has fewer than the {} complete blocks of {} tokens",
                     ctx.describeIn(1), t / block, t));
  ctx.expectOutShape(0, {t, top + 1});
  const float *q = ctx.f32(0), *kb = ctx.f32(1);
  int32_t *y = ctx.outI32(0);
  onWorkers(ctx.threads(), t, t * (t / block) * hi * di, [&](int w, int nw) {
    std::vector<float> score;
    std::vector<int32_t> order;
    for (int64_t ti = w; ti < t; ti += nw)
      selectBlocksRow(q + ti * hi * di, hi, di, kb, (ti + 1) / block, top,
                      score, order, y + ti * (top + 1));
  });
}

void selectBlocksRow(const float *q, int64_t hi, int64_t di, const float *kb,
                     int64_t nc, int64_t top, std::vector<float> &score,
                     std::vector<int32_t> &order, int32_t *row) {
  const float inv = 1.0f / std::sqrt(static_cast<float>(di));
  score.assign(nc, 0.0f);
  for (int64_t b = 0; b < nc; ++b) {
    float s = 0;
    for (int64_t h = 0; h < hi; ++h) {
      float d = dotF32(q + h * di, kb + b * di, di);
      s += d < 0 ? 0.0f : d;
    }
    s *= inv;
    // NaN ranks last, so the order below is strict and weak.
    score[b] = std::isnan(s) ? -std::numeric_limits<float>::infinity() : s;
  }
  int64_t chosen = std::min(top, nc);
  order.resize(nc);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + chosen, order.end(),
                    [&](int32_t a, int32_t b) {
                      return score[a] > score[b] ||
                             (score[a] == score[b] && a < b);
                    });
  for (int64_t k = 0; k < chosen; ++k)
    row[k] = order[k];
  row[chosen] = static_cast<int32_t>(nc); // the tail block
  for (int64_t k = chosen + 1; k <= top; ++k)
    row[k] = -1;
}

namespace {

/// ngram_hash's attributes, checked.
struct NgramSpec {
  int64_t n = 0, heads = 0, eos = 0;
  std::vector<int64_t> mults, sizes, offsets;

  int64_t ids() const { return (n - 1) * heads; }

  explicit NgramSpec(const KernelCtx &ctx)
      : n(ctx.intAttr("n")), heads(ctx.intAttr("heads")),
        eos(ctx.intAttr("eos")), mults(ctx.intsAttr("mults")),
        sizes(ctx.intsAttr("sizes")), offsets(ctx.intsAttr("offsets")) {
    if (n < 2 || n > 64 || heads <= 0 || heads > 4096)
      fail(fmt::format("attributes 'n' (2..64) and 'heads' (1..4096) are out "
                       "of range: {} and {}",
                       n, heads));
    if (int64_t(mults.size()) != n)
      fail(fmt::format("attribute 'mults' has {} entries, 'n' is {}",
                       mults.size(), n));
    if (int64_t(sizes.size()) != ids() || int64_t(offsets.size()) != ids())
      fail(fmt::format("attributes 'sizes' and 'offsets' need (n-1)*heads = "
                       "{} entries, have {} and {}",
                       ids(), sizes.size(), offsets.size()));
    for (int64_t k = 0; k < ids(); ++k)
      if (sizes[k] <= 0 || offsets[k] < 0 || sizes[k] > INT32_MAX ||
          offsets[k] > INT32_MAX - (sizes[k] - 1))
        fail(fmt::format("head {}: size {} and offset {} do not give i32 ids",
                         k, sizes[k], offsets[k]));
  }

  /// The ids of one token from \p back[s], the s-back token (s = 0 .. n-1,
  /// EOS where there is none): an EOS ends the segment, so everything
  /// before one reads as EOS; the current token sees its own past even when
  /// it is an EOS. ngram_hash and ngram_hash_cached share it.
  void hashRow(std::vector<int64_t> &back, int32_t *y) const {
    bool ended = false;
    for (int64_t s = 0; s < n; ++s) {
      if (ended)
        back[s] = eos;
      if (back[s] < 0)
        fail(fmt::format("token {} at {} back is negative", back[s], s));
      ended = ended || (s > 0 && back[s] == eos);
    }
    for (int64_t order = 2; order <= n; ++order) {
      int64_t mixed = 0;
      for (int64_t s = 0; s < order; ++s) {
        int64_t prod;
        if (__builtin_mul_overflow(back[s], mults[s], &prod) || prod < 0)
          fail(fmt::format("token {} times multiplier {} leaves int64", back[s],
                           mults[s]));
        mixed ^= prod;
      }
      for (int64_t j = 0; j < heads; ++j) {
        int64_t hh = (order - 2) * heads + j;
        y[hh] = static_cast<int32_t>(mixed % sizes[hh] + offsets[hh]);
      }
    }
  }
};

} // namespace

void runNgramHash(KernelCtx &ctx) {
  ctx.expectInRank(0, 1, "tokens [T]");
  NgramSpec spec(ctx);
  int64_t t = ctx.inShape(0)[0];
  ctx.expectOutShape(0, {t, spec.ids()});
  const int32_t *tok = ctx.i32(0);
  int32_t *y = ctx.outI32(0);
  std::vector<int64_t> back(spec.n);
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t s = 0; s < spec.n; ++s)
      back[s] = i - s < 0 ? spec.eos : tok[i - s];
    spec.hashRow(back, y + i * spec.ids());
  }
}

void runNgramHashCached(KernelCtx &ctx) {
  const TensorArg &h = ctx.in(0);
  if (h.isWeight || h.dtype != format::PlanDType::F32)
    fail(fmt::format("{} must be an f32 state", ctx.describeIn(0)));
  ctx.expectInRank(0, 2, "a token history [S, n - 1]");
  ctx.expectInRank(1, 1, "tokens [T]");
  NgramSpec spec(ctx);
  const std::vector<int64_t> &hs = ctx.inShape(0);
  int64_t t = ctx.inShape(1)[0], w = spec.n - 1;
  if (hs[1] != w)
    fail(fmt::format("{} must hold n - 1 = {} tokens a slot", ctx.describeIn(0),
                     w));
  for (size_t i : {size_t(2), size_t(3)}) {
    ctx.expectInRank(i, 1, i == 2 ? "slots [T]" : "positions [T]");
    if (ctx.inShape(i)[0] != t)
      fail(fmt::format("{} must have {} rows", ctx.describeIn(i), t));
  }
  ctx.expectOutShape(0, {t, spec.ids()});
  float *hist = static_cast<float *>(h.data);
  const int32_t *tok = ctx.i32(1), *seq = ctx.i32(2), *pos = ctx.i32(3);
  int32_t *y = ctx.outI32(0);
  std::vector<int64_t> back(spec.n);
  for (int64_t r = 0; r < t; ++r) {
    if (seq[r] < 0 || seq[r] >= hs[0] || pos[r] < 0)
      fail(fmt::format("row {} is at position {} of slot {}, outside the "
                       "history's {} slots",
                       r, pos[r], seq[r], hs[0]));
    // Ids are kept as f32: exact below 2^24.
    if (tok[r] < 0 || tok[r] >= (1 << 24))
      fail(fmt::format("token {} of row {} is outside 0 .. 2^24 - 1, which "
                       "the f32 history holds exactly",
                       tok[r], r));
    float *ring = hist + int64_t(seq[r]) * w;
    int64_t p = pos[r];
    back[0] = tok[r];
    for (int64_t s = 1; s < spec.n; ++s)
      back[s] = p - s < 0 ? spec.eos : static_cast<int64_t>(ring[(p - s) % w]);
    spec.hashRow(back, y + r * spec.ids());
    ring[p % w] = static_cast<float>(tok[r]);
  }
}

} // namespace strata::runtime::cpu
