//===- Sequence.cpp - rope, attention, conv1d_causal, gated_delta_rule ----===//
#include "runtime/ScalarMathCpu.h"
#include "runtime/cpu/CpuKernel.h"
#include "runtime/format/Quants.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

namespace strata::runtime::cpu {

namespace {

/// Fails unless dim \p d of input \p i is \p want.
void expectDim(const KernelCtx &ctx, size_t i, size_t d, int64_t want,
               const char *what) {
  if (ctx.inShape(i)[d] != want)
    fail(fmt::format("{}: {} is {}, expected {}", ctx.describeIn(i), what,
                     ctx.inShape(i)[d], want));
}

/// One row of attention over \p n keys (key m at keyAt(m), its value at
/// valueAt(m)) into \p o (\p dv floats), \p p scratch for n scores. The
/// reference order `attention` and `attention_cached` share, so a decode
/// step reproduces its prefill row: the scaled scores in key order, their
/// max, exp and sum in order, then the weighted values added in key order.
/// With no key the row is 0.
template <typename KeyAt, typename ValueAt>
void attendRow(const float *q, int64_t n, const KeyAt &keyAt,
               const ValueAt &valueAt, int64_t d, int64_t dv, float scale,
               float *p, float *o) {
  float max = -INFINITY;
  for (int64_t m = 0; m < n; ++m) {
    p[m] = scale * dotF32(q, keyAt(m), d);
    max = std::max(max, p[m]);
  }
  float sum = 0;
  for (int64_t m = 0; m < n; ++m) {
    p[m] = std::exp(p[m] - max);
    sum += p[m];
  }
  for (int64_t c = 0; c < dv; ++c)
    o[c] = 0;
  for (int64_t m = 0; m < n; ++m) {
    float pm = p[m] / sum;
    const float *vr = valueAt(m);
    for (int64_t c = 0; c < dv; ++c)
      o[c] += pm * vr[c];
  }
}

/// The key head value head \p hi of \p h reads among \p hk: hi / (h / hk)
/// ("grouped": llama.cpp's qwen3next repeats each q/k head in place) or
/// hi % hk ("tiled": the qwen4exp GGUF's tiled V-head order).
int64_t deltaKeyHead(int64_t hi, int64_t h, int64_t hk, bool tiled) {
  return tiled ? hi % hk : hi / (h / hk);
}

/// One step of the gated delta rule for one value head: the state \p s
/// [dk, dv] decays by exp(g), takes the delta (v - S^T k) * beta along k,
/// and the output is scale * S^T q. gated_delta_rule and
/// gated_delta_cached share it, so a decode step reproduces its prefill
/// row bit for bit. \p delta is scratch of dv floats.
void deltaStep(float *s, const float *qt, const float *kt, const float *vt,
               float g, float b, int64_t dk, int64_t dv, float scale,
               float *delta, float *o) {
  float decay = std::exp(g);
  for (int64_t e = 0; e < dk * dv; ++e)
    s[e] *= decay;
  for (int64_t j = 0; j < dv; ++j) {
    float acc = 0;
    for (int64_t i = 0; i < dk; ++i)
      acc += s[i * dv + j] * kt[i];
    delta[j] = (vt[j] - acc) * b;
  }
  for (int64_t i = 0; i < dk; ++i)
    for (int64_t j = 0; j < dv; ++j)
      s[i * dv + j] += kt[i] * delta[j];
  for (int64_t j = 0; j < dv; ++j) {
    float acc = 0;
    for (int64_t i = 0; i < dk; ++i)
      acc += s[i * dv + j] * qt[i];
    o[j] = scale * acc;
  }
}

} // namespace

void runRope(KernelCtx &ctx) {
  ctx.expectInRank(0, 3, "an input [T, H, D]");
  ctx.expectInRank(1, 1, "positions [T]");
  const std::vector<int64_t> &xs = ctx.inShape(0);
  int64_t t = xs[0], h = xs[1], d = xs[2];
  expectDim(ctx, 1, 0, t, "the position count");
  ctx.expectOutShape(0, xs);
  std::string mode = ctx.strAttr("mode");
  if (mode != "neox" && mode != "normal")
    fail(fmt::format("attribute 'mode' must be \"neox\" or \"normal\", got "
                     "\"{}\"",
                     mode));
  bool neox = mode == "neox";
  int64_t n = ctx.intAttr("dims");
  if (n <= 0 || n % 2 != 0 || n > d)
    fail(fmt::format("attribute 'dims' = {} must be even and in 2..{}", n, d));
  float base = ctx.floatAttr("base");
  // `sections` (multi-section rope) with one position stream rotates like
  // plain rope; nothing to do with it here.
  const float *x = ctx.f32(0);
  const int32_t *pos = ctx.i32(1);
  float *y = ctx.outF32(0);
  // As llama.cpp: theta_i = pos * base^(-2i/n), by repeated products in f32.
  float thetaScale = std::pow(base, -2.0f / static_cast<float>(n));
  for (int64_t ti = 0; ti < t; ++ti)
    for (int64_t hi = 0; hi < h; ++hi) {
      const float *xr = x + (ti * h + hi) * d;
      float *yr = y + (ti * h + hi) * d;
      float theta = static_cast<float>(pos[ti]);
      for (int64_t i = 0; i < n / 2; ++i) {
        float c = std::cos(theta), s = std::sin(theta);
        int64_t ia = neox ? i : 2 * i, ib = neox ? i + n / 2 : 2 * i + 1;
        float a = xr[ia], b = xr[ib];
        yr[ia] = a * c - b * s;
        yr[ib] = a * s + b * c;
        theta *= thetaScale;
      }
      for (int64_t i = n; i < d; ++i)
        yr[i] = xr[i];
    }
}

void runAttention(KernelCtx &ctx) {
  for (size_t i = 0; i < 3; ++i)
    ctx.expectInRank(i, 3, "q, k or v [T, heads, dim]");
  bool gated = ctx.boolAttr("gated");
  int64_t block = ctx.intAttr("block");
  if (block < 0)
    fail(fmt::format("attribute 'block' = {} must be >= 0", block));
  size_t want = 3 + (gated ? 1 : 0) + (block > 0 ? 1 : 0);
  if (ctx.numInputs() != want)
    fail(fmt::format("expects {} inputs (q, k, v{}{}), got {}", want,
                     gated ? ", gate" : "", block > 0 ? ", index" : "",
                     ctx.numInputs()));
  float scale = ctx.floatAttr("scale");
  bool causal = ctx.boolAttr("causal");
  const std::vector<int64_t> &qs = ctx.inShape(0);
  int64_t t = qs[0], h = qs[1], d = qs[2];
  int64_t tk = ctx.inShape(1)[0], hkv = ctx.inShape(1)[1];
  int64_t dv = ctx.inShape(2)[2];
  expectDim(ctx, 1, 2, d, "the head dim");
  expectDim(ctx, 2, 0, tk, "the key count");
  expectDim(ctx, 2, 1, hkv, "the kv head count");
  if (causal)
    expectDim(ctx, 1, 0, t, "the key count (causal)");
  if (hkv == 0 || h % hkv != 0)
    fail(fmt::format("query heads {} are not a multiple of kv heads {}", h,
                     hkv));
  ctx.expectOutShape(0, {t, h, dv});
  size_t next = 3;
  const float *gate = nullptr;
  if (gated) {
    if (ctx.inShape(next) != std::vector<int64_t>{t, h, dv})
      fail(fmt::format("{} must be the gate [{}, {}, {}]", ctx.describeIn(next),
                       t, h, dv));
    gate = ctx.f32(next++);
  }
  const int32_t *index = nullptr;
  int64_t nb = 0;
  if (block > 0) {
    ctx.expectInRank(next, 2, "a block index [T, B]");
    expectDim(ctx, next, 0, t, "the token count");
    nb = ctx.inShape(next)[1];
    index = ctx.i32(next);
  }
  const float *q = ctx.f32(0), *k = ctx.f32(1), *v = ctx.f32(2);
  float *out = ctx.outF32(0);
  int64_t group = h / hkv;
  onWorkers(
      ctx.threads(), t * h, t * tk * h * (d + dv), [&](int worker, int nw) {
        std::vector<float> p(tk);
        std::vector<int64_t> keys;
        // Rows (t, head) alternate between workers: causal rows grow with t.
        for (int64_t row = worker; row < t * h; row += nw) {
          int64_t ti = row / h, hi = row % h, kvh = hi / group;
          keys.clear();
          for (int64_t j = 0; j < (causal ? ti + 1 : tk); ++j) {
            bool ok = index == nullptr;
            for (int64_t b = 0; b < nb && !ok; ++b)
              ok = index[ti * nb + b] >= 0 && index[ti * nb + b] == j / block;
            if (ok)
              keys.push_back(j);
          }
          const float *qr = q + (ti * h + hi) * d;
          float *o = out + (ti * h + hi) * dv;
          // A row that may see no key (empty block selection) stays 0.
          attendRow(
              qr, static_cast<int64_t>(keys.size()),
              [&](int64_t m) { return k + (keys[m] * hkv + kvh) * d; },
              [&](int64_t m) { return v + (keys[m] * hkv + kvh) * dv; }, d, dv,
              scale, p.data(), o);
          if (gate)
            for (int64_t c = 0; c < dv; ++c)
              o[c] *= sigmoidF32(gate[(ti * h + hi) * dv + c]);
        }
      });
}

void runConv1dCausal(KernelCtx &ctx) {
  ctx.expectInRank(0, 2, "an input [T, C]");
  ctx.expectInRank(1, 2, "a weight [C, K]");
  int64_t t = ctx.inShape(0)[0], c = ctx.inShape(0)[1];
  int64_t kw = ctx.inShape(1)[1];
  expectDim(ctx, 1, 0, c, "the channel count");
  ctx.expectOutShape(0, {t, c});
  int64_t dilation = ctx.intAttr("dilation");
  if (dilation <= 0)
    fail(
        fmt::format("attribute 'dilation' must be positive, got {}", dilation));
  const float *x = ctx.f32(0), *w = ctx.f32(1);
  float *y = ctx.outF32(0);
  for (int64_t ti = 0; ti < t; ++ti)
    for (int64_t ci = 0; ci < c; ++ci) {
      float sum = 0;
      for (int64_t j = 0; j < kw; ++j) {
        int64_t src = ti - (kw - 1 - j) * dilation;
        if (src >= 0)
          sum += w[ci * kw + j] * x[src * c + ci];
      }
      y[ti * c + ci] = sum;
    }
}

namespace {

/// The delta rule's 'heads' attribute: whether the value heads follow the
/// key heads tiled (hi % hk) rather than grouped (hi / (H / Hk)).
bool tiledHeads(KernelCtx &ctx) {
  std::string heads = ctx.strAttr("heads");
  if (heads != "grouped" && heads != "tiled")
    fail(fmt::format("attribute 'heads' must be \"grouped\" or \"tiled\", "
                     "got \"{}\"",
                     heads));
  return heads == "tiled";
}

/// The delta rule's inputs q, k, v, g, beta from input \p base on, checked,
/// with its attributes (gated_delta_rule and gated_delta_cached).
struct DeltaInputs {
  int64_t t, hk, dk, h, dv;
  float scale;
  bool tiled;
};

DeltaInputs deltaInputs(KernelCtx &ctx, size_t base) {
  static const char *kNames[] = {"q [T, Hk, Dk]", "k [T, Hk, Dk]",
                                 "v [T, H, Dv]", "g [T, H]", "beta [T, H]"};
  static const size_t kRanks[] = {3, 3, 3, 2, 2};
  for (size_t i = 0; i < 5; ++i)
    ctx.expectInRank(base + i, kRanks[i], kNames[i]);
  DeltaInputs d;
  d.t = ctx.inShape(base)[0], d.hk = ctx.inShape(base)[1];
  d.dk = ctx.inShape(base)[2];
  d.h = ctx.inShape(base + 2)[1], d.dv = ctx.inShape(base + 2)[2];
  if (ctx.inShape(base + 1) != ctx.inShape(base))
    fail(fmt::format("{} and {} must have the same shape", ctx.describeIn(base),
                     ctx.describeIn(base + 1)));
  expectDim(ctx, base + 2, 0, d.t, "the token count");
  for (size_t i = base + 3; i < base + 5; ++i)
    if (ctx.inShape(i) != std::vector<int64_t>{d.t, d.h})
      fail(fmt::format("{} must be [{}, {}]", ctx.describeIn(i), d.t, d.h));
  if (d.hk == 0 || d.h % d.hk != 0)
    fail(fmt::format("value heads {} are not a multiple of key heads {}", d.h,
                     d.hk));
  ctx.expectOutShape(0, {d.t, d.h, d.dv});
  d.scale = ctx.floatAttr("scale", 1.0f / std::sqrt(static_cast<float>(
                                              std::max<int64_t>(d.dk, 1))));
  d.tiled = tiledHeads(ctx);
  return d;
}

} // namespace

void runGatedDeltaRule(KernelCtx &ctx) {
  const DeltaInputs d = deltaInputs(ctx, 0);
  const int64_t t = d.t, hk = d.hk, dk = d.dk, h = d.h, dv = d.dv;
  const float scale = d.scale;
  const bool tiled = d.tiled;
  const float *q = ctx.f32(0), *k = ctx.f32(1), *v = ctx.f32(2);
  const float *g = ctx.f32(3), *beta = ctx.f32(4);
  float *out = ctx.outF32(0);
  onWorkers(ctx.threads(), h, t * h * dk * dv * 4, [&](int worker, int nw) {
    std::vector<float> s(dk * dv), scratch(dv);
    for (int64_t hi = worker; hi < h; hi += nw) {
      int64_t kh = deltaKeyHead(hi, h, hk, tiled);
      std::fill(s.begin(), s.end(), 0.0f);
      for (int64_t ti = 0; ti < t; ++ti)
        deltaStep(s.data(), q + (ti * hk + kh) * dk, k + (ti * hk + kh) * dk,
                  v + (ti * h + hi) * dv, g[ti * h + hi], beta[ti * h + hi], dk,
                  dv, scale, scratch.data(), out + (ti * h + hi) * dv);
    }
  });
}

//===----------------------------------------------------------------------===//
// Generation state
//===----------------------------------------------------------------------===//

void runState(KernelCtx &) {
  fail("'state' is not a kernel: a plan lists its states under \"state\"");
}

namespace {

/// The state operand \p i: f32 storage of rank \p rank (the executor's,
/// written in place).
float *stateOperand(KernelCtx &ctx, size_t i, size_t rank, const char *what) {
  const TensorArg &a = ctx.in(i);
  if (a.isWeight || a.dtype != format::PlanDType::F32)
    fail(fmt::format("{} must be an f32 state", ctx.describeIn(i)));
  ctx.expectInRank(i, rank, what);
  return static_cast<float *>(a.data);
}

/// A cache state (kv_store, attention_cached, block_mean_cached) as rows of
/// its last dim, stored as f32, bf16 or i8 (rows of int8 values and an f32
/// scale each: format::stateBytes, KvQuant.h). Kernels read a row at a
/// time, dequantised into scratch (f32: in place), never a copy of the
/// whole cache.
class CacheRows {
public:
  CacheRows(KernelCtx &ctx, size_t i, size_t rank, const char *what) {
    const TensorArg &a = ctx.in(i);
    dtype_ = a.dtype;
    if (a.isWeight ||
        (dtype_ != format::PlanDType::F32 &&
         dtype_ != format::PlanDType::BF16 && dtype_ != format::PlanDType::I8))
      fail(fmt::format("{} must be an f32, bf16 or i8 state",
                       ctx.describeIn(i)));
    ctx.expectInRank(i, rank, what);
    len_ = ctx.inShape(i).back();
    if (dtype_ == format::PlanDType::I8 && len_ % 4 != 0)
      fail(fmt::format("{}: an i8 state's rows are a multiple of 4 long",
                       ctx.describeIn(i)));
    base_ = static_cast<uint8_t *>(a.data);
  }

  /// Row \p r as f32: a pointer into the state (f32) or \p scratch (len()
  /// floats) holding it converted.
  const float *get(int64_t r, float *scratch) const {
    switch (dtype_) {
    case format::PlanDType::F32:
      return reinterpret_cast<const float *>(base_) + r * len_;
    case format::PlanDType::BF16: {
      const uint16_t *b = reinterpret_cast<const uint16_t *>(base_) + r * len_;
      for (int64_t i = 0; i < len_; ++i)
        scratch[i] = format::bf16ToFp32(b[i]);
      return scratch;
    }
    default: {
      const uint8_t *row = base_ + r * (len_ + 4);
      float scale;
      std::memcpy(&scale, row + len_, 4);
      for (int64_t i = 0; i < len_; ++i)
        scratch[i] = scalar::kv_dequant(static_cast<int8_t>(row[i]), scale);
      return scratch;
    }
    }
  }

  /// Stores \p x (len() floats) as row \p r: bf16 rounded to nearest even,
  /// i8 quantised with the row's absmax scale (KvQuant.h, as the GPU does).
  void put(int64_t r, const float *x) const {
    switch (dtype_) {
    case format::PlanDType::F32:
      std::copy(x, x + len_, reinterpret_cast<float *>(base_) + r * len_);
      return;
    case format::PlanDType::BF16: {
      uint16_t *b = reinterpret_cast<uint16_t *>(base_) + r * len_;
      for (int64_t i = 0; i < len_; ++i)
        b[i] = format::fp32ToBf16(x[i]);
      return;
    }
    default: {
      uint8_t *row = base_ + r * (len_ + 4);
      float amax = 0.0f;
      for (int64_t i = 0; i < len_; ++i) {
        float a = std::fabs(x[i]);
        amax = a > amax ? a : amax;
      }
      float scale = scalar::kv_scale(amax);
      for (int64_t i = 0; i < len_; ++i)
        row[i] = static_cast<uint8_t>(scalar::kv_quant(x[i], scale));
      std::memcpy(row + len_, &scale, 4);
      return;
    }
    }
  }

  int64_t len() const { return len_; }

private:
  uint8_t *base_ = nullptr;
  format::PlanDType dtype_ = format::PlanDType::F32;
  int64_t len_ = 1;
};

/// The rows' slots and positions (inputs \p seqIn and \p seqIn + 1), each
/// i32 [T] and inside the state's \p slots x \p context.
void rowPlaces(KernelCtx &ctx, size_t seqIn, int64_t t, int64_t slots,
               int64_t context, const int32_t *&seq, const int32_t *&pos) {
  for (size_t i : {seqIn, seqIn + 1}) {
    ctx.expectInRank(i, 1, i == seqIn ? "slots [T]" : "positions [T]");
    expectDim(ctx, i, 0, t, "the row count");
  }
  seq = ctx.i32(seqIn);
  pos = ctx.i32(seqIn + 1);
  for (int64_t r = 0; r < t; ++r)
    if (seq[r] < 0 || seq[r] >= slots || pos[r] < 0 || pos[r] >= context)
      fail(fmt::format("row {} is at position {} of slot {}, outside the "
                       "state's {} slots x {} positions",
                       r, pos[r], seq[r], slots, context));
}

} // namespace

void runKvStore(KernelCtx &ctx) {
  const CacheRows state(ctx, 0, 4, "a state [S, C, Hkv, D]");
  ctx.expectInRank(1, 3, "rows [T, Hkv, D]");
  int64_t block = ctx.intAttr("block");
  if (block < 0)
    fail(fmt::format("attribute 'block' = {} must be >= 0", block));
  const std::vector<int64_t> &ss = ctx.inShape(0), &xs = ctx.inShape(1);
  int64_t t = xs[0], row = xs[1] * xs[2];
  expectDim(ctx, 1, 1, ss[2], "the head count");
  expectDim(ctx, 1, 2, ss[3], "the head dim");
  // With blocks, state row i holds the block of positions i*B .. i*B+B-1;
  // rows past the last whole block (a context that is no multiple of B)
  // complete none.
  int64_t per = block > 0 ? block : 1;
  const int32_t *seq = nullptr, *pos = nullptr;
  rowPlaces(ctx, 2, t, ss[0], ss[1] * per + per - 1, seq, pos);
  const float *x = ctx.f32(1);
  // Rows in order: the last of two rows at one place wins. Each head's
  // row is stored on its own (an i8 row gets its own scale).
  for (int64_t r = 0; r < t; ++r) {
    if (pos[r] % per != per - 1)
      continue; // its block is not complete yet
    int64_t at = (int64_t(seq[r]) * ss[1] + pos[r] / per) * ss[2];
    for (int64_t hh = 0; hh < ss[2]; ++hh)
      state.put(at + hh, x + r * row + hh * ss[3]);
  }
}

void runAttentionCached(KernelCtx &ctx) {
  bool gated = ctx.boolAttr("gated");
  int64_t block = ctx.intAttr("block");
  if (block < 0)
    fail(fmt::format("attribute 'block' = {} must be >= 0", block));
  size_t want = 5 + (gated ? 1 : 0) + (block > 0 ? 1 : 0);
  if (ctx.numInputs() != want)
    fail(fmt::format("expects {} inputs (q, k cache, v cache, slots, "
                     "positions{}{}), got {}",
                     want, gated ? ", gate" : "",
                     block > 0 ? ", block index" : "", ctx.numInputs()));
  ctx.expectInRank(0, 3, "queries [T, H, D]");
  const CacheRows kc(ctx, 1, 4, "a key cache [S, C, Hkv, D]");
  const CacheRows vc(ctx, 2, 4, "a value cache [S, C, Hkv, Dv]");
  const std::vector<int64_t> &qs = ctx.inShape(0), &ks = ctx.inShape(1);
  int64_t t = qs[0], h = qs[1], d = qs[2];
  int64_t slots = ks[0], context = ks[1], hkv = ks[2];
  int64_t dv = ctx.inShape(2)[3];
  expectDim(ctx, 1, 3, d, "the head dim");
  expectDim(ctx, 2, 0, slots, "the slot count");
  expectDim(ctx, 2, 1, context, "the context");
  expectDim(ctx, 2, 2, hkv, "the kv head count");
  if (hkv == 0 || h % hkv != 0)
    fail(fmt::format("query heads {} are not a multiple of kv heads {}", h,
                     hkv));
  ctx.expectOutShape(0, {t, h, dv});
  const int32_t *seq = nullptr, *pos = nullptr;
  rowPlaces(ctx, 3, t, slots, context, seq, pos);
  const float *gate = nullptr;
  if (gated) {
    if (ctx.inShape(5) != std::vector<int64_t>{t, h, dv})
      fail(fmt::format("{} must be the gate [{}, {}, {}]", ctx.describeIn(5), t,
                       h, dv));
    gate = ctx.f32(5);
  }
  // QSA: the blocks row r may see (attention's block-sparse index).
  const int32_t *index = nullptr;
  int64_t nb = 0;
  if (block > 0) {
    size_t in = gated ? 6 : 5;
    ctx.expectInRank(in, 2, "a block index [T, N]");
    expectDim(ctx, in, 0, t, "the row count");
    nb = ctx.inShape(in)[1];
    index = ctx.i32(in);
  }
  float scale = ctx.floatAttr("scale");
  const float *q = ctx.f32(0);
  float *out = ctx.outF32(0);
  int64_t group = h / hkv;
  int64_t work = 0;
  for (int64_t r = 0; r < t; ++r)
    work += (int64_t(pos[r]) + 1) * h * (d + dv);
  onWorkers(ctx.threads(), t * h, work, [&](int worker, int nw) {
    std::vector<float> p(static_cast<size_t>(context));
    // A bf16 or i8 cache row, converted where attendRow reads it.
    std::vector<float> kRow(static_cast<size_t>(d)),
        vRow(static_cast<size_t>(dv));
    std::vector<int64_t> keys;
    for (int64_t row = worker; row < t * h; row += nw) {
      int64_t ti = row / h, hi = row % h, kvh = hi / group;
      // Keys 0 .. pos[ti] of slot seq[ti], in position order (with an
      // index, those of its blocks: the keys `attention` lists).
      keys.clear();
      for (int64_t j = 0; j <= pos[ti]; ++j) {
        bool ok = index == nullptr;
        for (int64_t b = 0; b < nb && !ok; ++b)
          ok = index[ti * nb + b] >= 0 && index[ti * nb + b] == j / block;
        if (ok)
          keys.push_back(j);
      }
      int64_t base = int64_t(seq[ti]) * context;
      float *o = out + (ti * h + hi) * dv;
      // A row that may see no key (empty block selection) stays 0.
      attendRow(
          q + (ti * h + hi) * d, static_cast<int64_t>(keys.size()),
          [&](int64_t m) {
            return kc.get((base + keys[m]) * hkv + kvh, kRow.data());
          },
          [&](int64_t m) {
            return vc.get((base + keys[m]) * hkv + kvh, vRow.data());
          },
          d, dv, scale, p.data(), o);
      if (gate)
        for (int64_t c = 0; c < dv; ++c)
          o[c] *= sigmoidF32(gate[(ti * h + hi) * dv + c]);
    }
  });
}

void runBlockMeanCached(KernelCtx &ctx) {
  const CacheRows cache(ctx, 0, 4, "a cache [S, C, Hkv, D]");
  int64_t block = ctx.intAttr("block");
  if (block <= 0)
    fail(fmt::format("attribute 'block' must be positive, got {}", block));
  const std::vector<int64_t> &cs = ctx.inShape(0);
  int64_t slots = cs[0], context = cs[1], row = cs[2] * cs[3];
  int64_t t = ctx.inShape(1).empty() ? 0 : ctx.inShape(1)[0];
  const int32_t *seq = nullptr, *pos = nullptr;
  rowPlaces(ctx, 1, t, slots, context, seq, pos);
  ctx.expectOutShape(0, {t, cs[2], cs[3]});
  ctx.expectOutShape(1, {t});
  float *y = ctx.outF32(0);
  int32_t *start = ctx.outI32(1);
  std::vector<float> sum(static_cast<size_t>(row)),
      scratch(static_cast<size_t>(cs[3]));
  for (int64_t r = 0; r < t; ++r) {
    int64_t first = pos[r] - pos[r] % block;
    start[r] = static_cast<int32_t>(first);
    float *yr = y + r * row;
    if (pos[r] % block != block - 1) {
      std::fill(yr, yr + row, 0.0f); // no block completes here
      continue;
    }
    // block_mean's order: the block's rows summed in position order.
    std::fill(sum.begin(), sum.end(), 0.0f);
    for (int64_t i = 0; i < block; ++i)
      for (int64_t hh = 0; hh < cs[2]; ++hh) {
        const float *x =
            cache.get(((int64_t(seq[r]) * context + first + i) * cs[2] + hh),
                      scratch.data());
        for (int64_t c = 0; c < cs[3]; ++c)
          sum[hh * cs[3] + c] += x[c];
      }
    for (int64_t c = 0; c < row; ++c)
      yr[c] = sum[c] / static_cast<float>(block);
  }
}

void runQsaSelectCached(KernelCtx &ctx) {
  ctx.expectInRank(0, 3, "queries [T, Hi, Di]");
  const float *keys = stateOperand(ctx, 1, 4, "block keys [S, NB, 1, Di]");
  int64_t block = ctx.intAttr("block"), top = ctx.intAttr("top");
  if (block <= 0 || top <= 0 || top > (int64_t(1) << 24))
    fail(fmt::format("attributes 'block' and 'top' must be positive (top at "
                     "most 2^24), got {} and {}",
                     block, top));
  const std::vector<int64_t> &qs = ctx.inShape(0), &ks = ctx.inShape(1);
  int64_t t = qs[0], hi = qs[1], di = qs[2];
  int64_t slots = ks[0], nb = ks[1];
  if (ks[2] != 1 || ks[3] != di)
    fail(fmt::format("{} must be block keys [S, NB, 1, {}]", ctx.describeIn(1),
                     di));
  const int32_t *seq = nullptr, *pos = nullptr;
  // Positions whose complete blocks the keys hold (a context that is no
  // multiple of the block leaves a tail that completes none).
  rowPlaces(ctx, 2, t, slots, (nb + 1) * block - 1, seq, pos);
  ctx.expectOutShape(0, {t, top + 1});
  const float *q = ctx.f32(0);
  int32_t *y = ctx.outI32(0);
  std::vector<float> score;
  std::vector<int32_t> order;
  for (int64_t r = 0; r < t; ++r)
    selectBlocksRow(q + r * hi * di, hi, di, keys + int64_t(seq[r]) * nb * di,
                    (int64_t(pos[r]) + 1) / block, top, score, order,
                    y + r * (top + 1));
}

void runConv1dCached(KernelCtx &ctx) {
  float *win = stateOperand(ctx, 0, 3, "a window [S, W, C]");
  ctx.expectInRank(1, 2, "an input [T, C]");
  ctx.expectInRank(2, 2, "a weight [C, K]");
  const std::vector<int64_t> &ws = ctx.inShape(0);
  int64_t t = ctx.inShape(1)[0], c = ctx.inShape(1)[1];
  int64_t kw = ctx.inShape(2)[1];
  int64_t dilation = ctx.intAttr("dilation");
  if (dilation <= 0)
    fail(
        fmt::format("attribute 'dilation' must be positive, got {}", dilation));
  const std::string act = ctx.strAttr("act", "none");
  if (act != "none" && act != "silu")
    fail(fmt::format("attribute 'act' must be \"none\" or \"silu\", got "
                     "\"{}\"",
                     act));
  const bool silu = act == "silu";
  expectDim(ctx, 2, 0, c, "the channel count");
  expectDim(ctx, 0, 2, c, "the channel count");
  int64_t w = (kw - 1) * dilation;
  if (w <= 0)
    fail(fmt::format("a conv of {} tap(s) keeps no window", kw));
  expectDim(ctx, 0, 1, w, "the window length (K - 1) * dilation");
  ctx.expectOutShape(0, {t, c});
  const int32_t *seq = nullptr, *pos = nullptr;
  rowPlaces(ctx, 3, t, ws[0], INT32_MAX, seq, pos);
  const float *x = ctx.f32(1), *wt = ctx.f32(2);
  float *y = ctx.outF32(0);
  // Rows in order: row r reads the inputs of its slot at earlier positions
  // from the ring (written by earlier rows or runs), then stores its own
  // over the position W back, which it was the last to need.
  for (int64_t r = 0; r < t; ++r) {
    float *ring = win + int64_t(seq[r]) * w * c;
    int64_t p = pos[r];
    const float *xr = x + r * c;
    // conv1d_causal's order: taps j = 0 .. K-1, those before position 0
    // skipped.
    for (int64_t ci = 0; ci < c; ++ci) {
      float sum = 0;
      for (int64_t j = 0; j < kw; ++j) {
        int64_t back = (kw - 1 - j) * dilation, src = p - back;
        if (src < 0)
          continue;
        float xv = back == 0 ? xr[ci] : ring[(src % w) * c + ci];
        sum += wt[ci * kw + j] * xv;
      }
      y[r * c + ci] = silu ? scalar::sm_silu(sum) : sum;
    }
    std::copy(xr, xr + c, ring + (p % w) * c);
  }
}

namespace {

/// gated_delta_cached's rows over the states \p st: row ti's q and k of key
/// head kh at q + ti * qkStride + kh * Dk (k likewise), its v of value head
/// hi at v + ti * vStride + hi * Dv. Heads are independent; within a head,
/// rows in order (a slot's rows at increasing positions continue one
/// recurrence).
void deltaRows(KernelCtx &ctx, float *st, const int32_t *seq,
               const int32_t *pos, const DeltaInputs &d, const float *q,
               const float *k, int64_t qkStride, const float *v,
               int64_t vStride, const float *g, const float *beta, float *out) {
  const int64_t t = d.t, hk = d.hk, dk = d.dk, h = d.h, dv = d.dv;
  onWorkers(ctx.threads(), h, t * h * dk * dv * 4, [&](int worker, int nw) {
    std::vector<float> scratch(dv);
    for (int64_t hi = worker; hi < h; hi += nw) {
      int64_t kh = deltaKeyHead(hi, h, hk, d.tiled);
      for (int64_t ti = 0; ti < t; ++ti) {
        float *s = st + (int64_t(seq[ti]) * h + hi) * dk * dv;
        if (pos[ti] == 0)
          std::fill(s, s + dk * dv, 0.0f); // a sequence starts afresh
        deltaStep(s, q + ti * qkStride + kh * dk, k + ti * qkStride + kh * dk,
                  v + ti * vStride + hi * dv, g[ti * h + hi], beta[ti * h + hi],
                  dk, dv, d.scale, scratch.data(), out + (ti * h + hi) * dv);
      }
    }
  });
}

} // namespace

void runGatedDeltaCached(KernelCtx &ctx) {
  float *st = stateOperand(ctx, 0, 4, "a recurrent state [S, H, Dk, Dv]");
  const DeltaInputs d = deltaInputs(ctx, 1);
  expectDim(ctx, 0, 1, d.h, "the value head count");
  expectDim(ctx, 0, 2, d.dk, "the key head dim");
  expectDim(ctx, 0, 3, d.dv, "the value head dim");
  const int32_t *seq = nullptr, *pos = nullptr;
  rowPlaces(ctx, 6, d.t, ctx.inShape(0)[0], INT32_MAX, seq, pos);
  const float *q = ctx.f32(1), *k = ctx.f32(2), *v = ctx.f32(3);
  const float *g = ctx.f32(4), *beta = ctx.f32(5);
  float *out = ctx.outF32(0);
  deltaRows(ctx, st, seq, pos, d, q, k, d.hk * d.dk, v, d.h * d.dv, g, beta,
            out);
}

void runGatedDeltaQkvCached(KernelCtx &ctx) {
  float *st = stateOperand(ctx, 0, 4, "a recurrent state [S, H, Dk, Dv]");
  ctx.expectInRank(1, 2, "qkv [T, 2 Hk Dk + H Dv]");
  ctx.expectInRank(2, 2, "g [T, H]");
  ctx.expectInRank(3, 2, "beta [T, H]");
  const std::vector<int64_t> &ss = ctx.inShape(0);
  const int64_t t = ctx.inShape(1)[0], cols = ctx.inShape(1)[1];
  const int64_t h = ss[1], dk = ss[2], dv = ss[3];
  const int64_t hk = ctx.intAttr("hk");
  if (hk <= 0 || h % hk != 0)
    fail(fmt::format("value heads {} are not a multiple of key heads {} "
                     "(attribute 'hk')",
                     h, hk));
  if (cols != 2 * hk * dk + h * dv)
    fail(fmt::format("{} must have 2 Hk Dk + H Dv = {} columns",
                     ctx.describeIn(1), 2 * hk * dk + h * dv));
  for (size_t i : {size_t(2), size_t(3)})
    if (ctx.inShape(i) != std::vector<int64_t>{t, h})
      fail(fmt::format("{} must be [{}, {}]", ctx.describeIn(i), t, h));
  ctx.expectOutShape(0, {t, h, dv});
  const float scale = ctx.floatAttr(
      "scale", 1.0f / std::sqrt(static_cast<float>(std::max<int64_t>(dk, 1))));
  const float eps = ctx.floatAttr("eps");
  const bool tiled = tiledHeads(ctx);
  const int32_t *seq = nullptr, *pos = nullptr;
  rowPlaces(ctx, 4, t, ss[0], INT32_MAX, seq, pos);
  const float *qkv = ctx.f32(1), *g = ctx.f32(2), *beta = ctx.f32(3);
  float *out = ctx.outF32(0);
  // q and k of every row and key head normalised first (l2_norm's row
  // function), then the recurrence as gated_delta_cached runs it.
  std::vector<float> qn(t * hk * dk), kn(t * hk * dk);
  for (int64_t ti = 0; ti < t; ++ti)
    for (int64_t j = 0; j < hk; ++j) {
      const float *row = qkv + ti * cols;
      l2NormRow(row + j * dk, qn.data() + (ti * hk + j) * dk, dk, eps, true);
      l2NormRow(row + (hk + j) * dk, kn.data() + (ti * hk + j) * dk, dk, eps,
                true);
    }
  const DeltaInputs d{t, hk, dk, h, dv, scale, tiled};
  deltaRows(ctx, st, seq, pos, d, qn.data(), kn.data(), hk * dk,
            qkv + 2 * hk * dk, cols, g, beta, out);
}

} // namespace strata::runtime::cpu
