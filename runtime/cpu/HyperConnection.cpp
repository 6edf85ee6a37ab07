//===- HyperConnection.cpp - hc_expand/norm/read/write, sinkhorn ----------===//
#include "runtime/cpu/CpuKernel.h"

#include <fmt/format.h>

#include <cmath>

namespace strata::runtime::cpu {

void runHcExpand(KernelCtx &ctx) {
  ctx.expectInRank(0, 2, "an input [T, D]");
  int64_t t = ctx.inShape(0)[0], d = ctx.inShape(0)[1];
  int64_t n = ctx.intAttr("n");
  if (n <= 0)
    fail(fmt::format("attribute 'n' = {} must be positive", n));
  ctx.expectOutShape(0, {t, n, d});
  const float *x = ctx.f32(0);
  float *y = ctx.outF32(0);
  for (int64_t ti = 0; ti < t; ++ti)
    for (int64_t s = 0; s < n; ++s)
      for (int64_t c = 0; c < d; ++c)
        y[(ti * n + s) * d + c] = x[ti * d + c];
}

void runHcNorm(KernelCtx &ctx) {
  ctx.expectInRank(0, 3, "streams [T, n, D]");
  int64_t t = ctx.inShape(0)[0], n = ctx.inShape(0)[1];
  int64_t d = ctx.inShape(0)[2];
  float eps = ctx.floatAttr("eps");
  const float *w = nullptr;
  if (ctx.numInputs() > 1) {
    if (ctx.inShape(1) != std::vector<int64_t>{n * d})
      fail(fmt::format("{} must be the weight [{}] (n*D)", ctx.describeIn(1),
                       n * d));
    w = ctx.f32(1);
  }
  ctx.expectOutShape(0, {t, n, d});
  const float *r = ctx.f32(0);
  float *y = ctx.outF32(0);
  for (int64_t row = 0; row < t * n; ++row) {
    const float *xr = r + row * d;
    float *yr = y + row * d;
    // Same numerics as rms_norm: f32 squares summed in double, f32 scale.
    double sum = 0;
    for (int64_t c = 0; c < d; ++c)
      sum += static_cast<double>(xr[c] * xr[c]);
    float mean = static_cast<float>(sum / d);
    float scale = 1.0f / std::sqrt(mean + eps);
    int64_t s = row % n;
    for (int64_t c = 0; c < d; ++c) {
      yr[c] = xr[c] * scale;
      if (w)
        yr[c] *= w[s * d + c];
    }
  }
}

void runHcRead(KernelCtx &ctx) {
  ctx.expectInRank(0, 3, "normalised streams [T, n, D]");
  if (ctx.inShape(1) != ctx.inShape(0))
    fail(fmt::format("{} must have the shape of {}", ctx.describeIn(1),
                     ctx.describeIn(0)));
  int64_t t = ctx.inShape(0)[0], n = ctx.inShape(0)[1];
  int64_t d = ctx.inShape(0)[2];
  ctx.expectOutShape(0, {t, d});
  const float *xn = ctx.f32(0), *g = ctx.f32(1);
  float *y = ctx.outF32(0);
  for (int64_t ti = 0; ti < t; ++ti)
    for (int64_t c = 0; c < d; ++c) {
      float acc = 0;
      for (int64_t s = 0; s < n; ++s)
        acc += g[(ti * n + s) * d + c] * xn[(ti * n + s) * d + c];
      y[ti * d + c] = acc / static_cast<float>(n);
    }
}

void runHcWrite(KernelCtx &ctx) {
  ctx.expectInRank(0, 3, "streams [T, n, D]");
  int64_t t = ctx.inShape(0)[0], n = ctx.inShape(0)[1];
  int64_t d = ctx.inShape(0)[2];
  if (ctx.inShape(1) != std::vector<int64_t>{t, d})
    fail(fmt::format("{} must be the sublayer output [{}, {}]",
                     ctx.describeIn(1), t, d));
  if (ctx.inShape(2) != std::vector<int64_t>{t, n})
    fail(fmt::format("{} must be the injection gates [{}, {}]",
                     ctx.describeIn(2), t, n));
  ctx.expectOutShape(0, {t, n, d});
  const float *r = ctx.f32(0), *f = ctx.f32(1), *lam = ctx.f32(2);
  float *y = ctx.outF32(0);
  for (int64_t ti = 0; ti < t; ++ti)
    for (int64_t s = 0; s < n; ++s)
      for (int64_t c = 0; c < d; ++c) {
        int64_t i = (ti * n + s) * d + c;
        y[i] = r[i] + lam[ti * n + s] * f[ti * d + c];
      }
}

void runSinkhorn(KernelCtx &ctx) {
  const std::vector<int64_t> &xs = ctx.inShape(0);
  if (xs.size() < 2 || xs[xs.size() - 1] != xs[xs.size() - 2])
    fail(fmt::format("{} must be [..., n, n]", ctx.describeIn(0)));
  int64_t iters = ctx.intAttr("iters");
  if (iters < 0)
    fail(fmt::format("attribute 'iters' = {} must be >= 0", iters));
  ctx.expectOutShape(0, xs);
  int64_t n = xs.back();
  int64_t mats = n == 0 ? 0 : ctx.in(0).numElements() / (n * n);
  const float *x = ctx.f32(0);
  float *y = ctx.outF32(0);
  for (int64_t m = 0; m < mats; ++m) {
    const float *xm = x + m * n * n;
    float *ym = y + m * n * n;
    float max = -INFINITY;
    for (int64_t i = 0; i < n * n; ++i)
      max = std::max(max, xm[i]);
    for (int64_t i = 0; i < n * n; ++i)
      ym[i] = std::exp(xm[i] - max);
    for (int64_t it = 0; it < iters; ++it) {
      for (int64_t i = 0; i < n; ++i) {
        float sum = 0;
        for (int64_t j = 0; j < n; ++j)
          sum += ym[i * n + j];
        for (int64_t j = 0; j < n; ++j)
          ym[i * n + j] /= sum;
      }
      for (int64_t j = 0; j < n; ++j) {
        float sum = 0;
        for (int64_t i = 0; i < n; ++i)
          sum += ym[i * n + j];
        for (int64_t i = 0; i < n; ++i)
          ym[i * n + j] /= sum;
      }
    }
  }
}

} // namespace strata::runtime::cpu
