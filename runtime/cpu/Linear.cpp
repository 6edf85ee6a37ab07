//===- Linear.cpp - matmul, get_rows, arange ------------------------------===//
#include "runtime/cpu/CpuKernel.h"

#include <fmt/format.h>

#include <cstring>

namespace strata::runtime::cpu {

void runMatmul(KernelCtx &ctx) {
  const std::vector<int64_t> &xs = ctx.inShape(0);
  if (xs.empty())
    fail(fmt::format("{} must have rank >= 1", ctx.describeIn(0)));
  ctx.expectInRank(1, 2, "a weight [N, K]");
  int64_t n = ctx.inShape(1)[0], k = ctx.inShape(1)[1];
  if (xs.back() != k)
    fail(fmt::format("contraction dims differ: {} vs {}", ctx.describeIn(0),
                     ctx.describeIn(1)));
  std::vector<int64_t> want = xs;
  want.back() = n;
  ctx.expectOutShape(0, want);
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < xs.size(); ++d)
    rows *= xs[d];
  const float *x = ctx.f32(0);
  float *y = ctx.outF32(0);
  RowReader w = ctx.rows(1);
  // Weight-stationary: each weight row is dequantised once and used for
  // every input row; each worker takes a contiguous range of columns.
  onWorkers(ctx.threads(), n, rows * n * k, [&](int worker, int workers) {
    std::vector<float> scratch(k);
    for (int64_t j = n * worker / workers; j < n * (worker + 1) / workers;
         ++j) {
      const float *wr = w.get(j, scratch.data());
      for (int64_t r = 0; r < rows; ++r)
        y[r * n + j] = dotF32(x + r * k, wr, k);
    }
  });
}

void runGetRows(KernelCtx &ctx) {
  ctx.expectInRank(0, 2, "a table [V, D]");
  int64_t v = ctx.inShape(0)[0], d = ctx.inShape(0)[1];
  std::vector<int64_t> want = ctx.inShape(1);
  want.push_back(d);
  ctx.expectOutShape(0, want);
  const int32_t *ids = ctx.i32(1);
  int64_t t = ctx.in(1).numElements();
  for (int64_t i = 0; i < t; ++i)
    if (ids[i] < 0 || ids[i] >= v)
      fail(fmt::format("row id {} at position {} of {} is outside the table "
                       "{} of {} rows",
                       ids[i], i, ctx.describeIn(1), ctx.in(0).name, v));
  float *y = ctx.outF32(0);
  RowReader table = ctx.rows(0);
  for (int64_t i = 0; i < t; ++i)
    table.read(ids[i], y + i * d);
}

void runArange(KernelCtx &ctx) {
  const std::vector<int64_t> &xs = ctx.inShape(0);
  if (xs.empty())
    fail(fmt::format("{} must have rank >= 1 (its first dim is the length)",
                     ctx.describeIn(0)));
  int64_t n = xs[0];
  int64_t step = ctx.intAttr("step");
  ctx.expectOutShape(0, {n});
  if (ctx.out(0).dtype == format::PlanDType::I32 ||
      ctx.out(0).dtype == format::PlanDType::I64) {
    int32_t *y = ctx.outI32(0);
    for (int64_t i = 0; i < n; ++i)
      y[i] = static_cast<int32_t>(i * step);
    return;
  }
  float *y = ctx.outF32(0);
  for (int64_t i = 0; i < n; ++i)
    y[i] = static_cast<float>(i * step);
}

} // namespace strata::runtime::cpu
