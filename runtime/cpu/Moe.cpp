//===- Moe.cpp - moe_route, moe_experts, moe_combine ----------------------===//
#include "runtime/cpu/CpuKernel.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>

namespace strata::runtime::cpu {

void runMoeRoute(KernelCtx &ctx) {
  ctx.expectInRank(0, 2, "router logits [T, E]");
  int64_t t = ctx.inShape(0)[0], e = ctx.inShape(0)[1];
  int64_t k = ctx.intAttr("k");
  if (k <= 0 || k > e)
    fail(fmt::format("attribute 'k' = {} must be in 1..{} (the expert count)",
                     k, e));
  std::string func = ctx.strAttr("func");
  if (func != "softmax" && func != "sigmoid")
    fail(fmt::format("attribute 'func' must be \"softmax\" or \"sigmoid\", "
                     "got \"{}\"",
                     func));
  if (!ctx.hasAttr("norm"))
    fail("missing attribute 'norm'");
  bool norm = ctx.boolAttr("norm", false);
  ctx.expectOutShape(0, {t, k});
  ctx.expectOutShape(1, {t, k});
  const float *logits = ctx.f32(0);
  float *weights = ctx.outF32(0);
  int32_t *ids = ctx.outI32(1);
  std::vector<float> p(e);
  std::vector<int32_t> order(k);
  std::vector<bool> taken(e);
  for (int64_t ti = 0; ti < t; ++ti) {
    const float *l = logits + ti * e;
    if (func == "softmax") {
      softmaxRow(l, p.data(), e);
    } else {
      for (int64_t i = 0; i < e; ++i)
        p[i] = sigmoidF32(l[i]);
    }
    // Top k by probability, descending; ties go to the lower expert id (a
    // NaN is never picked before a number).
    std::fill(taken.begin(), taken.end(), false);
    for (int64_t s = 0; s < k; ++s) {
      int64_t best = -1;
      for (int64_t i = 0; i < e; ++i)
        if (!taken[i] && (best < 0 || p[i] > p[best] ||
                          (std::isnan(p[best]) && !std::isnan(p[i]))))
          best = i;
      taken[best] = true;
      order[s] = static_cast<int32_t>(best);
    }
    float sum = 0;
    for (int64_t s = 0; s < k; ++s)
      sum += p[order[s]];
    for (int64_t s = 0; s < k; ++s) {
      ids[ti * k + s] = order[s];
      weights[ti * k + s] = norm ? p[order[s]] / sum : p[order[s]];
    }
  }
}

void runMoeExperts(KernelCtx &ctx) {
  ctx.expectInRank(0, 2, "an input [T, D]");
  ctx.expectInRank(1, 2, "expert ids [T, k]");
  ctx.expectInRank(2, 3, "gate experts [E, F, D]");
  ctx.expectInRank(3, 3, "up experts [E, F, D]");
  ctx.expectInRank(4, 3, "down experts [E, D, F]");
  int64_t t = ctx.inShape(0)[0], d = ctx.inShape(0)[1];
  int64_t k = ctx.inShape(1)[1];
  int64_t e = ctx.inShape(2)[0], f = ctx.inShape(2)[1];
  if (ctx.inShape(1)[0] != t)
    fail(fmt::format("{} must have {} rows", ctx.describeIn(1), t));
  if (ctx.inShape(2) != std::vector<int64_t>{e, f, d} ||
      ctx.inShape(3) != std::vector<int64_t>{e, f, d})
    fail(fmt::format("{} and {} must both be [{}, {}, {}]", ctx.describeIn(2),
                     ctx.describeIn(3), e, f, d));
  if (ctx.inShape(4) != std::vector<int64_t>{e, d, f})
    fail(fmt::format("{} must be [{}, {}, {}]", ctx.describeIn(4), e, d, f));
  ctx.expectOutShape(0, {t, k, d});
  const int32_t *ids = ctx.i32(1);
  for (int64_t i = 0; i < t * k; ++i)
    if (ids[i] < 0 || ids[i] >= e)
      fail(fmt::format("expert id {} at [{}, {}] of {} is not below the "
                       "expert count {}",
                       ids[i], i / k, i % k, ctx.describeIn(1), e));
  const float *x = ctx.f32(0);
  float *y = ctx.outF32(0);
  RowReader gate = ctx.rows(2), up = ctx.rows(3), down = ctx.rows(4);
  // Slots (t, s) grouped by expert, so each expert's rows are read once.
  std::vector<std::vector<int64_t>> slots(e);
  for (int64_t i = 0; i < t * k; ++i)
    slots[ids[i]].push_back(i);
  std::atomic<int64_t> nextExpert{0};
  onWorkers(ctx.threads(), e, t * k * 3 * f * d, [&](int, int) {
    std::vector<float> gs(d), us(d), ds(f), hidden;
    for (int64_t ex = nextExpert++; ex < e; ex = nextExpert++) {
      const std::vector<int64_t> &mine = slots[ex];
      if (mine.empty())
        continue;
      // hidden[m][j] = silu(gate_e[j] . x) * (up_e[j] . x) for slot m.
      hidden.assign(mine.size() * f, 0.0f);
      for (int64_t j = 0; j < f; ++j) {
        const float *gr = gate.get(ex * f + j, gs.data());
        const float *ur = up.get(ex * f + j, us.data());
        for (size_t m = 0; m < mine.size(); ++m) {
          const float *xt = x + (mine[m] / k) * d;
          float a = dotF32(gr, xt, d);
          hidden[m * f + j] = a * sigmoidF32(a) * dotF32(ur, xt, d);
        }
      }
      // y[t, s, c] = down_e[c] . hidden[m].
      for (int64_t c = 0; c < d; ++c) {
        const float *dr = down.get(ex * d + c, ds.data());
        for (size_t m = 0; m < mine.size(); ++m)
          y[mine[m] * d + c] = dotF32(dr, hidden.data() + m * f, f);
      }
    }
  });
}

/// out[t] = sum_j w[t, j] * row(t*k + j) + sigmoid(gate[t]) * shared[t],
/// summed in this order: moe_combine over per-slot rows and moe_scatter over
/// rows sorted by expert (\p row maps a slot to its row). Inputs from
/// \p first: the weights [T, k], then the optional shared expert and gate.
template <typename Row>
void combineSlots(KernelCtx &ctx, size_t first, int64_t t, int64_t k, int64_t d,
                  Row row) {
  const float *w = ctx.f32(first);
  const float *shared =
      ctx.numInputs() > first + 1 ? ctx.f32(first + 1) : nullptr;
  const float *gate =
      ctx.numInputs() > first + 2 ? ctx.f32(first + 2) : nullptr;
  float *out = ctx.outF32(0);
  for (int64_t ti = 0; ti < t; ++ti) {
    float g = gate ? sigmoidF32(gate[ti]) : 1.0f;
    for (int64_t c = 0; c < d; ++c) {
      float acc = 0;
      for (int64_t j = 0; j < k; ++j)
        acc += w[ti * k + j] * row(ti * k + j)[c];
      if (shared)
        acc += g * shared[ti * d + c];
      out[ti * d + c] = acc;
    }
  }
}

void runMoeCombine(KernelCtx &ctx) {
  ctx.expectInRank(0, 3, "expert outputs [T, k, D]");
  int64_t t = ctx.inShape(0)[0], k = ctx.inShape(0)[1];
  int64_t d = ctx.inShape(0)[2];
  if (ctx.inShape(1) != std::vector<int64_t>{t, k})
    fail(fmt::format("{} must be the weights [{}, {}]", ctx.describeIn(1), t,
                     k));
  if (ctx.numInputs() > 2 && ctx.inShape(2) != std::vector<int64_t>{t, d})
    fail(fmt::format("{} must be the shared expert [{}, {}]", ctx.describeIn(2),
                     t, d));
  if (ctx.numInputs() > 3 && ctx.inShape(3) != std::vector<int64_t>{t, 1})
    fail(fmt::format("{} must be the shared gate [{}, 1]", ctx.describeIn(3),
                     t));
  ctx.expectOutShape(0, {t, d});
  const float *y = ctx.f32(0);
  combineSlots(ctx, 1, t, k, d, [&](int64_t slot) { return y + slot * d; });
}

} // namespace strata::runtime::cpu

namespace strata::runtime::cpu {

namespace {

/// Checks offsets[E + 1] (0, non-decreasing, ending at \p rows) and returns
/// E.
int64_t checkOffsets(KernelCtx &ctx, size_t in, int64_t rows) {
  ctx.expectInRank(in, 1, "expert offsets [E + 1]");
  int64_t n = ctx.inShape(in)[0];
  const int32_t *off = ctx.i32(in);
  if (n < 2 || off[0] != 0 || off[n - 1] != rows)
    fail(fmt::format("{} must run from 0 to the row count {}",
                     ctx.describeIn(in), rows));
  for (int64_t e = 0; e + 1 < n; ++e)
    if (off[e + 1] < off[e])
      fail(fmt::format("{} must not decrease (at expert {})",
                       ctx.describeIn(in), e));
  return n - 1;
}

/// Checks that perm[S] holds indices below \p limit.
void checkPerm(KernelCtx &ctx, size_t in, int64_t limit) {
  ctx.expectInRank(in, 1, "a permutation [S]");
  const int32_t *perm = ctx.i32(in);
  for (int64_t r = 0; r < ctx.inShape(in)[0]; ++r)
    if (perm[r] < 0 || perm[r] >= limit)
      fail(fmt::format("{} holds {} at {}, not below {}", ctx.describeIn(in),
                       perm[r], r, limit));
}

} // namespace

void runMoeSort(KernelCtx &ctx) {
  ctx.expectInRank(0, 2, "expert ids [T, k]");
  int64_t s = ctx.inShape(0)[0] * ctx.inShape(0)[1];
  int64_t e = ctx.intAttr("experts");
  if (e <= 0 || e > (int64_t(1) << 24))
    fail(fmt::format("attribute 'experts' = {} must be in 1..2^24", e));
  ctx.expectOutShape(0, {e + 1});
  ctx.expectOutShape(1, {s});
  ctx.expectOutShape(2, {s});
  const int32_t *ids = ctx.i32(0);
  int32_t *off = ctx.outI32(0), *perm = ctx.outI32(1), *rows = ctx.outI32(2);
  std::vector<int32_t> count(e + 1, 0);
  for (int64_t i = 0; i < s; ++i) {
    if (ids[i] < 0 || ids[i] >= e)
      fail(fmt::format("expert id {} at {} of {} is not below the expert "
                       "count {}",
                       ids[i], i, ctx.describeIn(0), e));
    ++count[ids[i] + 1];
  }
  for (int64_t x = 0; x < e; ++x)
    count[x + 1] += count[x];
  std::copy(count.begin(), count.end(), off);
  // Stable: slots of one expert stay in slot order. rows is the inverse, so
  // a kernel that writes one token's output finds its slots' rows directly.
  for (int64_t i = 0; i < s; ++i) {
    int32_t r = count[ids[i]]++;
    perm[r] = static_cast<int32_t>(i);
    rows[i] = r;
  }
}

void runMoeGroupedSwiglu(KernelCtx &ctx) {
  ctx.expectInRank(0, 2, "an input [T, D]");
  ctx.expectInRank(3, 3, "gate experts [E, F, D]");
  ctx.expectInRank(4, 3, "up experts [E, F, D]");
  int64_t t = ctx.inShape(0)[0], d = ctx.inShape(0)[1];
  int64_t e = ctx.inShape(3)[0], f = ctx.inShape(3)[1];
  if (ctx.inShape(3) != std::vector<int64_t>{e, f, d} ||
      ctx.inShape(4) != std::vector<int64_t>{e, f, d})
    fail(fmt::format("{} and {} must both be [{}, {}, {}]", ctx.describeIn(3),
                     ctx.describeIn(4), e, f, d));
  ctx.expectInRank(1, 1, "a permutation [T*k]");
  int64_t s = ctx.inShape(1)[0];
  if (t == 0 || s % t != 0)
    fail(fmt::format("{} must hold k rows per token of {}", ctx.describeIn(1),
                     ctx.describeIn(0)));
  int64_t k = s / t;
  checkPerm(ctx, 1, s);
  if (checkOffsets(ctx, 2, s) != e)
    fail(fmt::format("{} must have {} + 1 entries", ctx.describeIn(2), e));
  ctx.expectOutShape(0, {s, f});
  const float *x = ctx.f32(0);
  const int32_t *perm = ctx.i32(1), *off = ctx.i32(2);
  float *h = ctx.outF32(0);
  RowReader gate = ctx.rows(3), up = ctx.rows(4);
  std::atomic<int64_t> nextExpert{0};
  onWorkers(ctx.threads(), e, s * 2 * f * d, [&](int, int) {
    std::vector<float> gs(d), us(d);
    for (int64_t ex = nextExpert++; ex < e; ex = nextExpert++) {
      // The same sums in the same order as moe_experts' per-slot rows.
      for (int64_t j = 0; j < f; ++j) {
        const float *gr = gate.get(ex * f + j, gs.data());
        const float *ur = up.get(ex * f + j, us.data());
        for (int64_t r = off[ex]; r < off[ex + 1]; ++r) {
          const float *xt = x + (perm[r] / k) * d;
          float a = dotF32(gr, xt, d);
          h[r * f + j] = a * sigmoidF32(a) * dotF32(ur, xt, d);
        }
      }
    }
  });
}

void runMoeGroupedDown(KernelCtx &ctx) {
  ctx.expectInRank(0, 2, "hidden rows [S, F]");
  ctx.expectInRank(2, 3, "down experts [E, D, F]");
  int64_t s = ctx.inShape(0)[0], f = ctx.inShape(0)[1];
  int64_t e = ctx.inShape(2)[0], d = ctx.inShape(2)[1];
  if (ctx.inShape(2)[2] != f)
    fail(fmt::format("{} must be [{}, {}, {}]", ctx.describeIn(2), e, d, f));
  if (checkOffsets(ctx, 1, s) != e)
    fail(fmt::format("{} must have {} + 1 entries", ctx.describeIn(1), e));
  ctx.expectOutShape(0, {s, d});
  const float *h = ctx.f32(0);
  const int32_t *off = ctx.i32(1);
  float *y = ctx.outF32(0);
  RowReader down = ctx.rows(2);
  std::atomic<int64_t> nextExpert{0};
  onWorkers(ctx.threads(), e, s * d * f, [&](int, int) {
    std::vector<float> ds(f);
    for (int64_t ex = nextExpert++; ex < e; ex = nextExpert++)
      for (int64_t c = 0; c < d; ++c) {
        const float *dr = down.get(ex * d + c, ds.data());
        for (int64_t r = off[ex]; r < off[ex + 1]; ++r)
          y[r * d + c] = dotF32(dr, h + r * f, f);
      }
  });
}

void runMoeScatter(KernelCtx &ctx) {
  ctx.expectInRank(0, 2, "expert rows [S, D]");
  ctx.expectInRank(2, 2, "routing weights [T, k]");
  int64_t s = ctx.inShape(0)[0], d = ctx.inShape(0)[1];
  int64_t t = ctx.inShape(2)[0], k = ctx.inShape(2)[1];
  ctx.expectInRank(1, 1, "slot rows [S]");
  if (t * k != s || ctx.inShape(1) != std::vector<int64_t>{s})
    fail(fmt::format("{} and {} must have T*k = {} rows", ctx.describeIn(0),
                     ctx.describeIn(1), t * k));
  if (ctx.numInputs() > 3 && ctx.inShape(3) != std::vector<int64_t>{t, d})
    fail(fmt::format("{} must be the shared expert [{}, {}]", ctx.describeIn(3),
                     t, d));
  if (ctx.numInputs() > 4 && ctx.inShape(4) != std::vector<int64_t>{t, 1})
    fail(fmt::format("{} must be the shared gate [{}, 1]", ctx.describeIn(4),
                     t));
  ctx.expectOutShape(0, {t, d});
  // Each slot's row: in range, and no row read by two slots (then every row
  // is read once, as moe_sort's rows are).
  const int32_t *rows = ctx.i32(1);
  std::vector<int64_t> slotOf(s, -1);
  for (int64_t slot = 0; slot < s; ++slot) {
    int32_t r = rows[slot];
    if (r < 0 || r >= s)
      fail(fmt::format("{} holds row {} for slot {}, outside 0..{}",
                       ctx.describeIn(1), r, slot, s - 1));
    if (slotOf[r] >= 0)
      fail(fmt::format("{} names row {} twice (slots {} and {})",
                       ctx.describeIn(1), r, slotOf[r], slot));
    slotOf[r] = slot;
  }
  // moe_combine's sums in moe_combine's order.
  const float *y = ctx.f32(0);
  combineSlots(ctx, 2, t, k, d,
               [&](int64_t slot) { return y + int64_t(rows[slot]) * d; });
}

} // namespace strata::runtime::cpu
