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

void runNgramHash(KernelCtx &ctx) {
  ctx.expectInRank(0, 1, "tokens [T]");
  int64_t n = ctx.intAttr("n"), heads = ctx.intAttr("heads");
  int64_t eos = ctx.intAttr("eos");
  if (n < 2 || n > 64 || heads <= 0 || heads > 4096)
    fail(fmt::format("attributes 'n' (2..64) and 'heads' (1..4096) are out "
                     "of range: {} and {}",
                     n, heads));
  std::vector<int64_t> mults = ctx.intsAttr("mults");
  std::vector<int64_t> sizes = ctx.intsAttr("sizes");
  std::vector<int64_t> offsets = ctx.intsAttr("offsets");
  int64_t nh = (n - 1) * heads;
  if (int64_t(mults.size()) != n)
    fail(fmt::format("attribute 'mults' has {} entries, 'n' is {}",
                     mults.size(), n));
  if (int64_t(sizes.size()) != nh || int64_t(offsets.size()) != nh)
    fail(fmt::format("attributes 'sizes' and 'offsets' need (n-1)*heads = {} "
                     "entries, have {} and {}",
                     nh, sizes.size(), offsets.size()));
  for (int64_t k = 0; k < nh; ++k)
    if (sizes[k] <= 0 || offsets[k] < 0 || sizes[k] > INT32_MAX ||
        offsets[k] > INT32_MAX - (sizes[k] - 1))
      fail(fmt::format("head {}: size {} and offset {} do not give i32 ids", k,
                       sizes[k], offsets[k]));
  int64_t t = ctx.inShape(0)[0];
  ctx.expectOutShape(0, {t, nh});
  const int32_t *tok = ctx.i32(0);
  int32_t *y = ctx.outI32(0);
  std::vector<int64_t> back(n);
  for (int64_t i = 0; i < t; ++i) {
    // back[s]: the s-back token; an EOS ends the segment, so everything
    // before one (and before the prompt) reads as EOS. The current token
    // sees its own past even when it is an EOS.
    bool ended = false;
    for (int64_t s = 0; s < n; ++s) {
      int64_t p = i - s;
      back[s] = p < 0 || ended ? eos : tok[p];
      if (back[s] < 0)
        fail(fmt::format("token {} at {} is negative", back[s], p));
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
        y[i * nh + hh] = static_cast<int32_t>(mixed % sizes[hh] + offsets[hh]);
      }
    }
  }
}

} // namespace strata::runtime::cpu
