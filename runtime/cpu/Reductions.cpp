//===- Reductions.cpp - softmax, argmax, reduce_sum/mean, norms -----------===//
#include "runtime/cpu/CpuKernel.h"

#include <fmt/format.h>

#include <cmath>

namespace strata::runtime::cpu {

namespace {

/// The last dim of input 0 (1 for a scalar) and the number of rows.
std::pair<int64_t, int64_t> rowsOf(const KernelCtx &ctx) {
  const std::vector<int64_t> &s = ctx.inShape(0);
  int64_t d = s.empty() ? 1 : s.back();
  int64_t rows = d == 0 ? 0 : ctx.in(0).numElements() / d;
  return {rows, d};
}

void reduce(KernelCtx &ctx, bool mean) {
  const std::vector<int64_t> &s = ctx.inShape(0);
  if (s.empty())
    fail(fmt::format("{} has no axis to reduce", ctx.describeIn(0)));
  int64_t ax = ctx.axis(ctx.intAttr("axis"), s.size());
  std::vector<int64_t> want = s;
  want.erase(want.begin() + ax);
  ctx.expectOutShape(0, want);
  int64_t outer = 1, inner = 1, n = s[ax];
  for (int64_t d = 0; d < ax; ++d)
    outer *= s[d];
  for (size_t d = ax + 1; d < s.size(); ++d)
    inner *= s[d];
  const float *x = ctx.f32(0);
  float *y = ctx.outF32(0);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double sum = 0;
      for (int64_t j = 0; j < n; ++j)
        sum += x[(o * n + j) * inner + i];
      y[o * inner + i] = static_cast<float>(mean ? sum / n : sum);
    }
}

/// x * 1/sqrt(mean(x^2) + eps) over \p n values: squares in f32, summed in
/// double, the scale in f32 (as ggml's rms_norm).
void rmsNormRow(const float *x, float *y, int64_t n, float eps) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i)
    sum += static_cast<double>(x[i] * x[i]);
  float mean = static_cast<float>(sum / n);
  float scale = 1.0f / std::sqrt(mean + eps);
  for (int64_t i = 0; i < n; ++i)
    y[i] = x[i] * scale;
}

} // namespace

void runSoftmax(KernelCtx &ctx) {
  ctx.expectOutShape(0, ctx.inShape(0));
  auto [rows, d] = rowsOf(ctx);
  const float *x = ctx.f32(0);
  float *y = ctx.outF32(0);
  for (int64_t r = 0; r < rows; ++r)
    softmaxRow(x + r * d, y + r * d, d);
}

void runArgmax(KernelCtx &ctx) {
  const std::vector<int64_t> &s = ctx.inShape(0);
  if (s.empty())
    fail(fmt::format("{} must have rank >= 1", ctx.describeIn(0)));
  ctx.expectOutShape(0, std::vector<int64_t>(s.begin(), s.end() - 1));
  auto [rows, d] = rowsOf(ctx);
  const float *x = ctx.f32(0);
  int32_t *y = ctx.outI32(0);
  for (int64_t r = 0; r < rows; ++r) {
    const float *v = x + r * d;
    // The first index of the largest value; a NaN or +inf (never below
    // +inf) or a row of -inf only leaves no token to take: -1.
    int64_t best = -1;
    float max = -INFINITY;
    bool bad = false;
    for (int64_t i = 0; i < d; ++i) {
      bad |= !(v[i] < INFINITY);
      if (v[i] > max) {
        max = v[i];
        best = i;
      }
    }
    y[r] = bad ? -1 : static_cast<int32_t>(best);
  }
}

void runReduceSum(KernelCtx &ctx) { reduce(ctx, /*mean=*/false); }
void runReduceMean(KernelCtx &ctx) { reduce(ctx, /*mean=*/true); }

void runRmsNorm(KernelCtx &ctx) {
  float eps = ctx.floatAttr("eps");
  ctx.expectOutShape(0, ctx.inShape(0));
  if (ctx.inShape(0).empty())
    fail(fmt::format("{} must have rank >= 1", ctx.describeIn(0)));
  auto [rows, d] = rowsOf(ctx);
  int64_t groups = ctx.intAttr("groups");
  if (groups <= 0 || d % groups != 0)
    fail(fmt::format("groups = {} does not split the last dim {}", groups, d));
  const float *w = nullptr;
  if (ctx.numInputs() > 1) {
    if (ctx.inShape(1) != std::vector<int64_t>{d})
      fail(fmt::format("{} must be the weight [{}]", ctx.describeIn(1), d));
    w = ctx.f32(1);
  }
  const float *x = ctx.f32(0);
  float *y = ctx.outF32(0);
  int64_t g = d / groups;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < groups; ++k)
      rmsNormRow(x + r * d + k * g, y + r * d + k * g, g, eps);
    if (w)
      for (int64_t i = 0; i < d; ++i)
        y[r * d + i] *= w[i];
  }
}

void runL2Norm(KernelCtx &ctx) {
  float eps = ctx.floatAttr("eps");
  std::string form = ctx.strAttr("form");
  if (form != "max" && form != "add")
    fail(fmt::format("attribute 'form' must be \"max\" or \"add\", got "
                     "\"{}\"",
                     form));
  bool add = form == "add";
  ctx.expectOutShape(0, ctx.inShape(0));
  auto [rows, d] = rowsOf(ctx);
  const float *x = ctx.f32(0);
  float *y = ctx.outF32(0);
  for (int64_t r = 0; r < rows; ++r)
    l2NormRow(x + r * d, y + r * d, d, eps, add);
}

void l2NormRow(const float *x, float *y, int64_t d, float eps, bool add) {
  double sum = 0;
  for (int64_t i = 0; i < d; ++i)
    sum += static_cast<double>(x[i] * x[i]);
  float scale = add ? 1.0f / std::sqrt(static_cast<float>(sum) + eps)
                    : 1.0f / std::max(std::sqrt(static_cast<float>(sum)), eps);
  for (int64_t i = 0; i < d; ++i)
    y[i] = x[i] * scale;
}

} // namespace strata::runtime::cpu
