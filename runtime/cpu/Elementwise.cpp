//===- Elementwise.cpp - unary, scale, cast and broadcasting binary ops ---===//
#include "runtime/Elements.h"
#include "runtime/ScalarMathCpu.h"
#include "runtime/cpu/CpuKernel.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

namespace strata::runtime::cpu {

using format::PlanDType;

namespace {

/// y[i] = f(x[i]) over same-sized input and output (shapes may differ).
template <typename F> void unary(KernelCtx &ctx, F f) {
  int64_t n = ctx.in(0).numElements();
  if (ctx.out(0).numElements() != n)
    fail(fmt::format("{} and {} differ in element count", ctx.describeIn(0),
                     ctx.describeOut(0)));
  const float *x = ctx.f32(0);
  float *y = ctx.outF32(0);
  for (int64_t i = 0; i < n; ++i)
    y[i] = f(x[i]);
}

/// numpy broadcasting of a and b to the output's shape.
template <typename F> void binary(KernelCtx &ctx, F f) {
  const std::vector<int64_t> &out = ctx.outShape(0);
  size_t rank = out.size();
  // Each input's dims aligned to the output's trailing dims, and its
  // element strides with 0 where a dim of 1 broadcasts.
  std::vector<int64_t> stride[2];
  for (size_t i = 0; i < 2; ++i) {
    const std::vector<int64_t> &s = ctx.inShape(i);
    if (s.size() > rank)
      fail(fmt::format("{} has a higher rank than {}", ctx.describeIn(i),
                       ctx.describeOut(0)));
    stride[i].assign(rank, 0);
    int64_t step = 1;
    for (size_t k = 0; k < s.size(); ++k) {
      size_t d = s.size() - 1 - k, od = rank - 1 - k;
      if (s[d] != out[od] && s[d] != 1)
        fail(fmt::format("{} does not broadcast to {}", ctx.describeIn(i),
                         ctx.describeOut(0)));
      stride[i][od] = s[d] == 1 ? 0 : step;
      step *= s[d];
    }
  }
  // Every output dim must come from an input (numpy never grows a dim).
  for (size_t d = 0; d < rank; ++d) {
    auto dimOf = [&](size_t i) {
      const std::vector<int64_t> &s = ctx.inShape(i);
      size_t lead = rank - s.size();
      return d < lead ? int64_t(1) : s[d - lead];
    };
    if (out[d] != std::max(dimOf(0), dimOf(1)))
      fail(fmt::format("{} is not the broadcast of {} and {}",
                       ctx.describeOut(0), ctx.describeIn(0),
                       ctx.describeIn(1)));
  }
  const float *a = ctx.f32(0);
  const float *b = ctx.f32(1);
  float *y = ctx.outF32(0);
  int64_t n = ctx.out(0).numElements();
  if (n == 0)
    return;
  // Walk the output in order with an odometer over its index.
  std::vector<int64_t> idx(rank, 0);
  int64_t ia = 0, ib = 0;
  for (int64_t i = 0; i < n; ++i) {
    y[i] = f(a[ia], b[ib]);
    for (size_t d = rank; d-- > 0;) {
      ++idx[d];
      ia += stride[0][d];
      ib += stride[1][d];
      if (idx[d] < out[d])
        break;
      ia -= stride[0][d] * out[d];
      ib -= stride[1][d] * out[d];
      idx[d] = 0;
    }
  }
}

} // namespace

void runNeg(KernelCtx &ctx) { unary(ctx, scalar::sm_neg); }
void runExp(KernelCtx &ctx) { unary(ctx, scalar::sm_exp); }
void runLog(KernelCtx &ctx) { unary(ctx, scalar::sm_log); }
void runSqrt(KernelCtx &ctx) { unary(ctx, scalar::sm_sqrt); }
void runRsqrt(KernelCtx &ctx) { unary(ctx, scalar::sm_rsqrt); }
void runAbs(KernelCtx &ctx) { unary(ctx, scalar::sm_abs); }
void runSquare(KernelCtx &ctx) { unary(ctx, scalar::sm_square); }
void runRelu(KernelCtx &ctx) { unary(ctx, scalar::sm_relu); }
void runSilu(KernelCtx &ctx) { unary(ctx, scalar::sm_silu); }
void runSigmoid(KernelCtx &ctx) { unary(ctx, scalar::sm_sigmoid); }
void runSoftplus(KernelCtx &ctx) { unary(ctx, scalar::sm_softplus); }
void runGelu(KernelCtx &ctx) { unary(ctx, scalar::sm_gelu); }
void runTanh(KernelCtx &ctx) { unary(ctx, scalar::sm_tanh); }

void runSign(KernelCtx &ctx) { unary(ctx, scalar::sm_sign); }

void runClamp(KernelCtx &ctx) {
  float lo = ctx.floatAttr("min", -std::numeric_limits<float>::infinity());
  float hi = ctx.floatAttr("max", std::numeric_limits<float>::infinity());
  if (lo > hi)
    fail(fmt::format("attribute 'min' ({}) is above 'max' ({})", lo, hi));
  // NaN passes through (both comparisons are false for it).
  unary(ctx, [lo, hi](float x) { return scalar::sm_clamp(x, lo, hi); });
}

void runScale(KernelCtx &ctx) {
  float s = ctx.floatAttr("s");
  float b = ctx.floatAttr("b");
  unary(ctx, [s, b](float x) { return scalar::sm_scale(x, s, b); });
}

void runCast(KernelCtx &ctx) {
  std::string to = ctx.strAttr("to");
  auto type = format::planDTypeFromName(to);
  if (!type)
    fail(fmt::format("attribute 'to' names no activation type: '{}'", to));
  const TensorArg &y = ctx.out(0);
  if (y.dtype != *type)
    fail(fmt::format("{} is {}, but 'to' is {}", ctx.describeOut(0),
                     format::planDTypeName(y.dtype), to));
  int64_t n = ctx.in(0).numElements();
  if (y.numElements() != n)
    fail(fmt::format("{} and {} differ in element count", ctx.describeIn(0),
                     ctx.describeOut(0)));
  PlanDType from = ctx.in(0).isWeight ? PlanDType::F32 : ctx.in(0).dtype;
  const uint8_t *src = ctx.raw(0, from);
  convertElements(from, src, *type, ctx.outRaw(0, *type), n);
}

void runAdd(KernelCtx &ctx) { binary(ctx, scalar::sm_add); }
void runSub(KernelCtx &ctx) { binary(ctx, scalar::sm_sub); }
void runMul(KernelCtx &ctx) { binary(ctx, scalar::sm_mul); }
void runDiv(KernelCtx &ctx) { binary(ctx, scalar::sm_div); }
void runMaximum(KernelCtx &ctx) { binary(ctx, scalar::sm_maximum); }
void runMinimum(KernelCtx &ctx) { binary(ctx, scalar::sm_minimum); }

} // namespace strata::runtime::cpu
