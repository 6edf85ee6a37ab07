//===- DataMovement.cpp - copy, permute, slice, concat --------------------===//
//
// These move elements without arithmetic, in the output buffer's type. An
// input of another type of the same kind (f16 into f32, a weight into f32)
// is converted first; integers and floats do not mix (that is `cast`).
//
//===----------------------------------------------------------------------===//
#include "runtime/Elements.h"
#include "runtime/cpu/CpuKernel.h"

#include <fmt/format.h>

#include <cstring>

namespace strata::runtime::cpu {

using format::PlanDType;

namespace {

/// Input \p i in the output's element type.
const uint8_t *inputAsOutput(KernelCtx &ctx, size_t i) {
  PlanDType to = ctx.out(0).dtype;
  const TensorArg &a = ctx.in(i);
  bool isFloat = a.isWeight || isFloatType(a.dtype);
  if (isFloat != isFloatType(to))
    fail(fmt::format("{} is {} and {} is {}; convert with cast",
                     ctx.describeIn(i),
                     a.isWeight ? "a weight" : format::planDTypeName(a.dtype),
                     ctx.describeOut(0), format::planDTypeName(to)));
  return ctx.raw(i, to);
}

} // namespace

/// A reshape as a kernel materialises its operand (a weight brought into
/// the arena); reshapes of buffers are views and never launch.
void runReshape(KernelCtx &ctx) {
  int64_t n = ctx.in(0).numElements();
  if (ctx.out(0).numElements() != n)
    fail(fmt::format("{} and {} differ in element count", ctx.describeIn(0),
                     ctx.describeOut(0)));
  PlanDType type = ctx.out(0).dtype;
  const uint8_t *src = inputAsOutput(ctx, 0);
  if (n > 0)
    std::memcpy(ctx.outRaw(0, type), src, n * format::planDTypeSize(type));
}

void runPermute(KernelCtx &ctx) {
  const std::vector<int64_t> &xs = ctx.inShape(0);
  std::vector<int64_t> perm = ctx.intsAttr("perm");
  size_t rank = xs.size();
  std::vector<bool> seen(rank, false);
  bool valid = perm.size() == rank;
  for (int64_t p : perm) {
    valid &= p >= 0 && p < static_cast<int64_t>(rank) && !seen[p];
    if (valid)
      seen[p] = true;
  }
  if (!valid)
    fail(fmt::format("attribute 'perm' = {} is not a permutation of the {} "
                     "dims of {}",
                     shapeStr(perm), rank, ctx.describeIn(0)));
  std::vector<int64_t> want(rank);
  for (size_t d = 0; d < rank; ++d)
    want[d] = xs[perm[d]];
  ctx.expectOutShape(0, want);
  PlanDType type = ctx.out(0).dtype;
  size_t esz = format::planDTypeSize(type);
  const uint8_t *src = inputAsOutput(ctx, 0);
  uint8_t *dst = static_cast<uint8_t *>(ctx.outRaw(0, type));
  int64_t n = ctx.out(0).numElements();
  if (n == 0)
    return;
  // Input element strides, and the stride of each output dim in the input.
  std::vector<int64_t> inStride(rank, 1), stride(rank);
  for (size_t d = rank; d-- > 1;)
    inStride[d - 1] = inStride[d] * xs[d];
  for (size_t d = 0; d < rank; ++d)
    stride[d] = inStride[perm[d]];
  std::vector<int64_t> idx(rank, 0);
  int64_t from = 0;
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(dst + i * esz, src + from * esz, esz);
    for (size_t d = rank; d-- > 0;) {
      ++idx[d];
      from += stride[d];
      if (idx[d] < want[d])
        break;
      from -= stride[d] * want[d];
      idx[d] = 0;
    }
  }
}

void runSlice(KernelCtx &ctx) {
  const std::vector<int64_t> &xs = ctx.inShape(0);
  int64_t ax = ctx.axis(ctx.intAttr("axis"), xs.size());
  int64_t start = ctx.intAttr("start"), end = ctx.intAttr("end");
  if (start < 0 || end < start || end > xs[ax])
    fail(fmt::format("slice {}..{} does not fit dim {} of {}", start, end, ax,
                     ctx.describeIn(0)));
  std::vector<int64_t> want = xs;
  want[ax] = end - start;
  ctx.expectOutShape(0, want);
  if (ctx.out(0).numElements() == 0)
    return;
  PlanDType type = ctx.out(0).dtype;
  size_t esz = format::planDTypeSize(type);
  const uint8_t *src = inputAsOutput(ctx, 0);
  uint8_t *dst = static_cast<uint8_t *>(ctx.outRaw(0, type));
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < ax; ++d)
    outer *= xs[d];
  for (size_t d = ax + 1; d < xs.size(); ++d)
    inner *= xs[d];
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(dst + o * (end - start) * inner * esz,
                src + (o * xs[ax] + start) * inner * esz,
                (end - start) * inner * esz);
}

void runLastRows(KernelCtx &ctx) {
  const std::vector<int64_t> &xs = ctx.inShape(0);
  int64_t n = ctx.intAttr("n");
  if (xs.empty() || n > xs[0])
    fail(fmt::format("the last {} rows of {}: there are fewer", n,
                     ctx.describeIn(0)));
  std::vector<int64_t> want = xs;
  want[0] = n;
  ctx.expectOutShape(0, want);
  PlanDType type = ctx.out(0).dtype;
  size_t row = format::planDTypeSize(type);
  for (size_t d = 1; d < xs.size(); ++d)
    row *= static_cast<size_t>(xs[d]);
  // No rows (or empty rows): nothing to copy, and the buffers may be null
  // (memcpy's arguments must not be, even for zero bytes).
  if (n * row == 0)
    return;
  const uint8_t *src = inputAsOutput(ctx, 0);
  std::memcpy(ctx.outRaw(0, type), src + (xs[0] - n) * row, n * row);
}

void runConcat(KernelCtx &ctx) {
  const std::vector<int64_t> &ys = ctx.outShape(0);
  int64_t ax = ctx.axis(ctx.intAttr("axis"), ys.size());
  int64_t total = 0;
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    const std::vector<int64_t> &s = ctx.inShape(i);
    bool same = s.size() == ys.size();
    for (size_t d = 0; same && d < s.size(); ++d)
      same = d == static_cast<size_t>(ax) || s[d] == ys[d];
    if (!same)
      fail(fmt::format("{} does not match {} outside axis {}",
                       ctx.describeIn(i), ctx.describeOut(0), ax));
    total += s[ax];
  }
  if (total != ys[ax])
    fail(fmt::format("the inputs add up to {} along axis {}, {} has {}", total,
                     ax, ctx.describeOut(0), ys[ax]));
  if (ctx.out(0).numElements() == 0)
    return;
  PlanDType type = ctx.out(0).dtype;
  size_t esz = format::planDTypeSize(type);
  std::vector<const uint8_t *> srcs;
  for (size_t i = 0; i < ctx.numInputs(); ++i)
    srcs.push_back(inputAsOutput(ctx, i));
  uint8_t *dst = static_cast<uint8_t *>(ctx.outRaw(0, type));
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < ax; ++d)
    outer *= ys[d];
  for (size_t d = ax + 1; d < ys.size(); ++d)
    inner *= ys[d];
  for (int64_t o = 0; o < outer; ++o) {
    int64_t at = 0;
    for (size_t i = 0; i < srcs.size(); ++i) {
      int64_t len = ctx.inShape(i)[ax];
      if (len * inner > 0) // an empty input may have no storage at all
        std::memcpy(dst + (o * ys[ax] + at) * inner * esz,
                    srcs[i] + o * len * inner * esz, len * inner * esz);
      at += len;
    }
  }
}

} // namespace strata::runtime::cpu
