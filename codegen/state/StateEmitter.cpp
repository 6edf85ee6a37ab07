//===- StateEmitter.cpp - device kernels of the generation state ops ------===//
//
// The state family: kernels that read or write a plan state (a KV cache, a
// conv window, a delta-rule state, a token history; docs/IR.md) over rows
// that carry their slot and position. Correct and checked against the CPU
// backend (strata-run --check), not yet fast: decode-speed kernels
// (split-K attention, GEMV) are the decode issue's.
//
//   kv_store            one block per row, the row copied to its place
//   attention_cached    one block per (row, head): four waves take every
//                       fourth key with an online softmax each, merged at
//                       the end (dense, gated, block-sparse)
//   block_mean_cached   one block per row
//   qsa_select_cached   one block per row: scores into the workspace, then
//                       `top` block-wide argmax rounds (ties: lower block)
//   conv1d_cached       one thread per channel, rows in order (the ring)
//   gated_delta_cached  one thread per (value head, value column): that
//                       column of the state in registers, rows in order
//   ngram_hash_cached   one thread, rows in order (the ring)
//
// Rows of one slot must come in increasing positions (Session does so);
// a row outside the state's slots or positions is skipped here (the
// executor refuses it before any kernel runs).
//
//===----------------------------------------------------------------------===//
#include "codegen/EmitterImpl.h"

#include <cmath>
#include <string>

namespace strata::codegen::detail {

using format::BodyOp;
using format::BodyRef;
using format::Recipe;

namespace {

constexpr int kThreads = 128;

/// The dims of a state operand \p i (all constants).
std::vector<int64_t> stateDims(const Emitter &e, uint32_t i) {
  const format::PlanOperand &o = e.kernel.inputs.at(i);
  if (!o.isState)
    throw Unsupported(fmt::format("input {} of a state kernel is no state", i));
  std::vector<int64_t> d;
  for (uint64_t v : e.plan.states.at(o.index).shape)
    d.push_back(static_cast<int64_t>(v));
  return d;
}

/// A run-time row of T ({coef 1}).
const format::PlanDim kRows{1, 0, 1};

int64_t constDim(const Tensor &t, size_t d) {
  if (d >= t.shape.size() || !isConst(t.shape[d]))
    throw Unsupported(fmt::format("dim {} of {} is not a constant", d, t.ptr));
  return t.shape[d].constant;
}

/// Checks \p t is an activation element type ld() reads.
void expectLoadable(const Tensor &t, const char *what) {
  if (t.quant() || t.isTemp)
    throw Unsupported(
        fmt::format("{} is {} ({}), not a plain array", what, t.ctype, t.ptr));
}

void begin(Emitter &e, int threads) {
  e.line("STRATA_KERNEL({}) void @SYMBOL@({}) {{", threads, e.params());
  e.prologue();
}

void emitKvStore(Emitter &e, const BodyOp &op) {
  std::vector<int64_t> s = stateDims(e, 0);
  Tensor x = e.tensor(op.inputs[1]);
  expectLoadable(x, "the rows");
  int64_t per = std::max<int64_t>(1, e.intAttr(op, "block"));
  int64_t row = s[2] * s[3];
  begin(e, kThreads);
  e.line("  const long r = bid_x();");
  e.line("  if (r >= T) return;");
  e.line("  const long s = in2[r], p = in3[r];");
  e.line("  if (s < 0 || s >= {}L || p < 0 || p % {}L != {}L || p / {}L >= "
         "{}L) return;",
         s[0], per, per - 1, per, s[1]);
  e.line("  float *dst = in0 + (s * {}L + p / {}L) * {}L;", s[1], per, row);
  e.line("  for (long i = tid_x(); i < {}L; i += {}) dst[i] = ld(in1, r * "
         "{}L + i);",
         row, kThreads, row);
  e.line("}}");
  e.out.grid = {kRows, {0, 1, 1}, {0, 1, 1}};
  e.out.block = {kThreads, 1, 1};
}

void emitAttentionCached(Emitter &e, const BodyOp &op) {
  std::vector<int64_t> ks = stateDims(e, 1), vs = stateDims(e, 2);
  Tensor q = e.tensor(op.inputs[0]), y = e.tensor(op.outputs[0]);
  expectLoadable(q, "the queries");
  int64_t h = constDim(q, 1), d = constDim(q, 2);
  int64_t ctx = ks[1], hkv = ks[2], dv = vs[3];
  bool gated = e.boolAttr(op, "gated");
  int64_t block = e.intAttr(op, "block");
  uint32_t gateIn = 5, indexIn = gated ? 6 : 5;
  int64_t nb = 0;
  if (block > 0)
    nb = constDim(e.tensor(op.inputs[indexIn]), 1);
  if (gated)
    expectLoadable(e.tensor(op.inputs[gateIn]), "the gate");
  // Per lane: every 32nd element of q and of the output row.
  const int64_t qpl = (d + 31) / 32, opl = (dv + 31) / 32;
  if (qpl > 8 || opl > 8)
    throw Unsupported("a head dim above 256");
  float scale = static_cast<float>(e.floatAttr(op, "scale"));
  begin(e, kThreads);
  e.line("  const long r = bid_x(), hi = bid_y();");
  e.line("  if (r >= T) return;");
  e.line("  const int lane = lane_id(), w = tid_x() >> 5;");
  e.line("  const long s = in3[r], p = in4[r];");
  e.line("  const bool ok = s >= 0 && s < {}L && p >= 0 && p < {}L;", ks[0],
         ctx);
  e.line("  const long kvh = hi / {}L;", h / hkv);
  e.line("  float qv[{}], acc[{}];", qpl, opl);
  e.line("  for (int u = 0; u < {}; ++u) {{", qpl);
  e.line("    long c = lane + 32L * u;");
  e.line("    qv[u] = c < {}L ? ld(in0, (r * {}L + hi) * {}L + c) : 0.0f;", d,
         h, d);
  e.line("  }}");
  e.line("  for (int u = 0; u < {}; ++u) acc[u] = 0.0f;", opl);
  e.line("  float m = -__builtin_inff(), l = 0.0f;");
  e.line("  const float *kb = in1 + s * {}L, *vb = in2 + s * {}L;",
         ctx * hkv * d, ctx * hkv * dv);
  // One key: the dot over the wave, then the online softmax update.
  e.line("  auto key = [&](long j) {{");
  e.line("    const float *kr = kb + (j * {}L + kvh) * {}L;", hkv, d);
  e.line("    float dot = 0.0f;");
  e.line("    for (int u = 0; u < {}; ++u) {{", qpl);
  e.line("      long c = lane + 32L * u;");
  e.line("      if (c < {}L) dot += qv[u] * kr[c];", d);
  e.line("    }}");
  e.line("    for (int o = 16; o > 0; o >>= 1) dot += shfl_xor_f(dot, o);");
  e.line("    float sc = dot * {};", floatLit(scale));
  e.line("    float mn = sc > m ? sc : m;");
  e.line("    float a = strata_exp(m - mn), pj = strata_exp(sc - mn);");
  e.line("    l = l * a + pj;");
  e.line("    const float *vr = vb + (j * {}L + kvh) * {}L;", hkv, dv);
  e.line("    for (int u = 0; u < {}; ++u) {{", opl);
  e.line("      long c = lane + 32L * u;");
  e.line("      acc[u] = acc[u] * a + (c < {}L ? pj * vr[c] : 0.0f);", dv);
  e.line("    }}");
  e.line("    m = mn;");
  e.line("  }};");
  if (block > 0) {
    // The keys of the row's selected blocks (attention's block-sparse set).
    const char *idx = gated ? "in6" : "in5";
    e.line("  for (long b = 0; ok && b < {}L; ++b) {{", nb);
    e.line("    long blk = {}[r * {}L + b];", idx, nb);
    e.line("    if (blk < 0) continue;");
    e.line("    for (long j = blk * {}L + w; j <= p && j < (blk + 1) * {}L; j "
           "+= 4) key(j);",
           block, block);
    e.line("  }}");
  } else {
    e.line("  for (long j = w; ok && j <= p; j += 4) key(j);");
  }
  // Merge the four waves: each rescaled to the common max.
  e.line("  STRATA_SHARED float wm[4], wl[4], wacc[4][{}];", opl * 32);
  e.line("  if (lane == 0) wm[w] = m, wl[w] = l;");
  e.line("  for (int u = 0; u < {}; ++u) wacc[w][lane + 32 * u] = acc[u];",
         opl);
  e.line("  sync_block();");
  e.line("  float mx = wm[0];");
  e.line("  for (int i = 1; i < 4; ++i) mx = wm[i] > mx ? wm[i] : mx;");
  e.line("  float f[4], den = 0.0f;");
  e.line("  for (int i = 0; i < 4; ++i) {{");
  e.line("    f[i] = wl[i] > 0.0f ? strata_exp(wm[i] - mx) : 0.0f;");
  e.line("    den += wl[i] * f[i];");
  e.line("  }}");
  e.line("  for (long c = tid_x(); c < {}L; c += {}) {{", dv, kThreads);
  e.line("    float o = 0.0f;");
  e.line("    for (int i = 0; i < 4; ++i) o += wacc[i][c] * f[i];");
  e.line("    o = den > 0.0f ? o / den : 0.0f;");
  if (gated)
    e.line("    o *= 1.0f / (1.0f + strata_exp(-ld(in5, (r * {}L + hi) * {}L "
           "+ c)));",
           h, dv);
  e.line("    st(out0, (r * {}L + hi) * {}L + c, o);", h, dv);
  e.line("  }}");
  e.line("}}");
  (void)y;
  e.out.grid = {kRows, {0, h, 1}, {0, 1, 1}};
  e.out.block = {kThreads, 1, 1};
}

void emitBlockMeanCached(Emitter &e, const BodyOp &op) {
  std::vector<int64_t> cs = stateDims(e, 0);
  int64_t block = e.intAttr(op, "block"), row = cs[2] * cs[3];
  begin(e, kThreads);
  e.line("  const long r = bid_x();");
  e.line("  if (r >= T) return;");
  e.line("  const long s = in1[r], p = in2[r], first = p - p % {}L;", block);
  e.line("  if (tid_x() == 0) out1[r] = (int32_t)first;");
  e.line("  const bool full = s >= 0 && s < {}L && p >= 0 && p < {}L && p % "
         "{}L == {}L;",
         cs[0], cs[1], block, block - 1);
  e.line("  const float *base = in0 + (s * {}L + first) * {}L;", cs[1], row);
  e.line("  for (long c = tid_x(); c < {}L; c += {}) {{", row, kThreads);
  e.line("    float sum = 0.0f;");
  e.line("    for (long i = 0; full && i < {}L; ++i) sum += base[i * {}L + c];",
         block, row);
  e.line("    st(out0, r * {}L + c, full ? sum / {} : 0.0f);", row,
         floatLit(static_cast<float>(block)));
  e.line("  }}");
  e.line("}}");
  e.out.grid = {kRows, {0, 1, 1}, {0, 1, 1}};
  e.out.block = {kThreads, 1, 1};
}

void emitQsaSelectCached(Emitter &e, const BodyOp &op) {
  std::vector<int64_t> ks = stateDims(e, 1);
  Tensor q = e.tensor(op.inputs[0]);
  expectLoadable(q, "the queries");
  int64_t hi = constDim(q, 1), di = constDim(q, 2), nb = ks[1];
  int64_t block = e.intAttr(op, "block"), top = e.intAttr(op, "top");
  float inv = 1.0f / std::sqrt(static_cast<float>(di));
  e.workspace = true;
  begin(e, kThreads);
  e.line("  const long r = bid_x();");
  e.line("  if (r >= T) return;");
  e.line("  const int lane = lane_id(), w = tid_x() >> 5;");
  e.line("  const long s = in2[r], p = in3[r];");
  e.line("  const bool ok = s >= 0 && s < {}L && p >= 0;", ks[0]);
  e.line("  long nc = ok ? (p + 1) / {}L : 0;", block);
  e.line("  if (nc > {}L) nc = {}L;", nb, nb);
  e.line("  float *score = (float *)ws + r * {}L;", nb);
  e.line("  const float *kb = in1 + s * {}L;", nb * di);
  // selectBlocksRow's score: sum over heads of relu(q.k), / sqrt(di); NaN
  // ranks last (-inf). Taken blocks become NaN below.
  e.line("  for (long b = tid_x(); b < nc; b += {}) {{", kThreads);
  e.line("    float sc = 0.0f;");
  e.line("    for (long h = 0; h < {}L; ++h) {{", hi);
  e.line("      float d = 0.0f;");
  e.line("      for (long c = 0; c < {}L; ++c) d += ld(in0, (r * {}L + h) * "
         "{}L + c) * kb[b * {}L + c];",
         di, hi, di, di);
  e.line("      sc += d < 0.0f ? 0.0f : d;");
  e.line("    }}");
  e.line("    sc *= {};", floatLit(inv));
  e.line("    score[b] = sc != sc ? -__builtin_inff() : sc;");
  e.line("  }}");
  e.line("  sync_block();");
  e.line("  STRATA_SHARED float bv[4];");
  e.line("  STRATA_SHARED long bi[4];");
  e.line("  const long chosen = nc < {}L ? nc : {}L;", top, top);
  e.line("  for (long k = 0; k < chosen; ++k) {{");
  e.line("    float v = -__builtin_inff();");
  e.line("    long i = -1;");
  e.line("    for (long b = tid_x(); b < nc; b += {}) {{", kThreads);
  e.line("      float x = score[b];");
  e.line("      if (x != x) continue;");
  e.line("      if (i < 0 || x > v || (x == v && b < i)) v = x, i = b;");
  e.line("    }}");
  e.line("    for (int o = 16; o > 0; o >>= 1) {{");
  e.line("      float ov = shfl_xor_f(v, o);");
  e.line("      long oi = (long)shfl_xor_i((int)i, o);");
  e.line("      if (oi >= 0 && (i < 0 || ov > v || (ov == v && oi < i))) v = "
         "ov, i = oi;");
  e.line("    }}");
  e.line("    if (lane == 0) bv[w] = v, bi[w] = i;");
  e.line("    sync_block();");
  e.line("    if (tid_x() == 0) {{");
  e.line("      for (int u = 1; u < 4; ++u)");
  e.line("        if (bi[u] >= 0 && (i < 0 || bv[u] > v || (bv[u] == v && "
         "bi[u] < i))) v = bv[u], i = bi[u];");
  e.line("      out0[r * {}L + k] = (int32_t)i;", top + 1);
  e.line("      score[i] = __builtin_nanf(\"\");");
  e.line("    }}");
  e.line("    sync_block();");
  e.line("  }}");
  e.line("  for (long k = chosen + tid_x(); k <= {}L; k += {})", top, kThreads);
  e.line("    out0[r * {}L + k] = k == chosen ? (int32_t)nc : -1;", top + 1);
  e.line("}}");
  e.out.grid = {kRows, {0, 1, 1}, {0, 1, 1}};
  e.out.block = {kThreads, 1, 1};
  e.out.workspace = {nb * 4, 0, 1};
}

void emitConv1dCached(Emitter &e, const BodyOp &op) {
  std::vector<int64_t> ws = stateDims(e, 0);
  Tensor x = e.tensor(op.inputs[1]), wt = e.tensor(op.inputs[2]);
  expectLoadable(x, "the input");
  expectLoadable(wt, "the conv weight");
  int64_t c = constDim(x, 1), kw = constDim(wt, 1);
  int64_t dil = e.intAttr(op, "dilation"), win = ws[1];
  if (win != (kw - 1) * dil)
    throw Unsupported("a window that is not (K - 1) * dilation long");
  begin(e, kThreads);
  e.line("  const long c = (long)bid_x() * {} + tid_x();", kThreads);
  e.line("  if (c >= {}L) return;", c);
  // Rows in order: a row reads its slot's earlier inputs from the ring
  // (this thread wrote them), then stores its own.
  e.line("  for (long r = 0; r < T; ++r) {{");
  e.line("    const long s = in3[r], p = in4[r];");
  e.line("    if (s < 0 || s >= {}L || p < 0) continue;", ws[0]);
  e.line("    float *ring = in0 + s * {}L;", win * c);
  e.line("    const float xv = ld(in1, r * {}L + c);", c);
  e.line("    float sum = 0.0f;");
  e.line("    for (long j = 0; j < {}L; ++j) {{", kw);
  e.line("      const long back = ({}L - j) * {}L, src = p - back;", kw - 1,
         dil);
  e.line("      if (src < 0) continue;");
  e.line("      const float v = back == 0 ? xv : ring[(src % {}L) * {}L + c];",
         win, c);
  e.line("      sum += ld(in2, c * {}L + j) * v;", kw);
  e.line("    }}");
  e.line("    st(out0, r * {}L + c, sum);", c);
  e.line("    ring[(p % {}L) * {}L + c] = xv;", win, c);
  e.line("  }}");
  e.line("}}");
  e.out.grid = {{0, (c + kThreads - 1) / kThreads, 1}, {0, 1, 1}, {0, 1, 1}};
  e.out.block = {kThreads, 1, 1};
}

void emitGatedDeltaCached(Emitter &e, const BodyOp &op) {
  std::vector<int64_t> ss = stateDims(e, 0);
  Tensor q = e.tensor(op.inputs[1]), v = e.tensor(op.inputs[3]);
  for (uint32_t i = 1; i < 6; ++i)
    expectLoadable(e.tensor(op.inputs[i]), "a delta-rule input");
  int64_t hk = constDim(q, 1), dk = constDim(q, 2);
  int64_t h = constDim(v, 1), dv = constDim(v, 2);
  if (dk > 256)
    throw Unsupported("a key dim above 256");
  bool tiled = e.strAttr(op, "heads") == "tiled";
  float scale = e.hasAttr(op, "scale")
                    ? static_cast<float>(e.floatAttr(op, "scale"))
                    : 1.0f / std::sqrt(static_cast<float>(dk));
  const int threads = static_cast<int>(std::min<int64_t>(dv, 64));
  begin(e, threads);
  e.line("  const long hi = bid_x(), j = (long)bid_y() * {} + tid_x();",
         threads);
  e.line("  if (j >= {}L) return;", dv);
  e.line("  const long kh = {};",
         tiled ? fmt::format("hi % {}L", hk) : fmt::format("hi / {}L", h / hk));
  // Column j of the slot's state in registers while rows stay in one slot.
  e.line("  float sv[{}];", dk);
  e.line("  long cur = -1;");
  e.line("  auto col = [&](long s) {{ return in0 + (s * {}L + hi) * {}L + j; "
         "}};",
         h, dk * dv);
  e.line("  for (long t = 0; t < T; ++t) {{");
  e.line("    const long s = in6[t], p = in7[t];");
  e.line("    if (s < 0 || s >= {}L || p < 0) continue;", ss[0]);
  e.line("    if (s != cur) {{");
  e.line("      if (cur >= 0) for (int i = 0; i < {}; ++i) col(cur)[i * {}L] = "
         "sv[i];",
         dk, dv);
  e.line("      for (int i = 0; i < {}; ++i) sv[i] = col(s)[i * {}L];", dk, dv);
  e.line("      cur = s;");
  e.line("    }}");
  e.line("    if (p == 0) for (int i = 0; i < {}; ++i) sv[i] = 0.0f;", dk);
  e.line("    const float decay = strata_exp(ld(in4, t * {}L + hi)), b = "
         "ld(in5, t * {}L + hi);",
         h, h);
  e.line("    const long qk = (t * {}L + kh) * {}L;", hk, dk);
  e.line("    float kv = 0.0f;");
  e.line("    for (int i = 0; i < {}; ++i) {{ sv[i] *= decay; kv += sv[i] * "
         "ld(in2, qk + i); }}",
         dk);
  e.line(
      "    const float delta = (ld(in3, (t * {}L + hi) * {}L + j) - kv) * b;",
      h, dv);
  e.line("    float o = 0.0f;");
  e.line(
      "    for (int i = 0; i < {}; ++i) {{ sv[i] += ld(in2, qk + i) * delta; "
      "o += sv[i] * ld(in1, qk + i); }}",
      dk);
  e.line("    st(out0, (t * {}L + hi) * {}L + j, {} * o);", h, dv,
         floatLit(scale));
  e.line("  }}");
  e.line("  if (cur >= 0) for (int i = 0; i < {}; ++i) col(cur)[i * {}L] = "
         "sv[i];",
         dk, dv);
  e.line("}}");
  e.out.grid = {{0, h, 1}, {0, (dv + threads - 1) / threads, 1}, {0, 1, 1}};
  e.out.block = {threads, 1, 1};
}

void emitNgramHashCached(Emitter &e, const BodyOp &op) {
  std::vector<int64_t> hs = stateDims(e, 0);
  int64_t n = e.intAttr(op, "n"), heads = e.intAttr(op, "heads");
  int64_t eos = e.intAttr(op, "eos"), ids = (n - 1) * heads;
  auto list = [&](const char *name) {
    const format::PlanAttr &a = e.attr(op, name);
    std::string s;
    for (int64_t v : a.ints)
      s += fmt::format("{}{}L", s.empty() ? "" : ", ", v);
    return s;
  };
  begin(e, 1);
  e.line("  if (tid_x() != 0 || bid_x() != 0) return;");
  e.line("  const long mults[{}] = {{{}}};", n, list("mults"));
  e.line("  const long sizes[{}] = {{{}}};", ids, list("sizes"));
  e.line("  const long offsets[{}] = {{{}}};", ids, list("offsets"));
  e.line("  long back[{}];", n);
  e.line("  for (long r = 0; r < T; ++r) {{");
  e.line("    const long s = in2[r], p = in3[r];");
  e.line("    if (s < 0 || s >= {}L || p < 0) continue;", hs[0]);
  e.line("    float *ring = in0 + s * {}L;", n - 1);
  // ngram_hash's segments: everything before an EOS (and before the
  // sequence) reads as EOS; the current token sees its own past.
  e.line("    back[0] = in1[r];");
  e.line("    bool ended = false;");
  e.line("    for (long k = 1; k < {}L; ++k) {{", n);
  e.line(
      "      back[k] = ended || p - k < 0 ? {}L : (long)ring[(p - k) % {}L];",
      eos, n - 1);
  e.line("      ended = ended || back[k] == {}L;", eos);
  e.line("    }}");
  e.line("    for (long order = 2; order <= {}L; ++order) {{", n);
  e.line("      long mixed = 0;");
  e.line("      for (long k = 0; k < order; ++k) mixed ^= back[k] * mults[k];");
  e.line("      for (long j = 0; j < {}L; ++j) {{", heads);
  e.line("        const long hh = (order - 2) * {}L + j;", heads);
  e.line("        out0[r * {}L + hh] = (int32_t)(mixed % sizes[hh] + "
         "offsets[hh]);",
         ids);
  e.line("      }}");
  e.line("    }}");
  e.line("    ring[p % {}L] = (float)in1[r];", n - 1);
  e.line("  }}");
  e.line("}}");
  e.out.grid = {{0, 1, 1}, {0, 1, 1}, {0, 1, 1}};
  e.out.block = {1, 1, 1};
}

} // namespace

void emitStateKernel(Emitter &e) {
  if (e.body.size() != 1)
    throw Unsupported("a fused body around a state op");
  const BodyOp &op = e.body[0];
  switch (op.recipe) {
  case Recipe::KvStore:
    return emitKvStore(e, op);
  case Recipe::AttentionCached:
    return emitAttentionCached(e, op);
  case Recipe::BlockMeanCached:
    return emitBlockMeanCached(e, op);
  case Recipe::QsaSelectCached:
    return emitQsaSelectCached(e, op);
  case Recipe::Conv1dCached:
    return emitConv1dCached(e, op);
  case Recipe::GatedDeltaCached:
    return emitGatedDeltaCached(e, op);
  case Recipe::NgramHashCached:
    return emitNgramHashCached(e, op);
  default:
    throw Unsupported(fmt::format("'{}' is no state kernel",
                                  format::recipeInfo(op.recipe).name));
  }
}

} // namespace strata::codegen::detail
