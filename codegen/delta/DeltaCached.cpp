//===- DeltaCached.cpp - the delta rule's single step ---------------------===//
//
// The delta family's cached op (CachedKernel.h): the gated delta rule's
// decode step over the f32 state. Checked against the CPU backend
// (strata-run --check).
//
//   gated_delta_cached  one block per (value head, 32 value columns): a
//                       lane per column, 8 warps over the key dim, each
//                       holding its slice of the column in registers; the
//                       dot products summed over the slices in order;
//                       rows in order
//   gated_delta_qkv_cached  the same over one packed q/k/v row, q and k
//                       l2-normalised in the block (each slice's squares,
//                       then the slices' sums in order)
//
//===----------------------------------------------------------------------===//
#include "codegen/CachedKernel.h"
#include "codegen/Limits.h"
#include "ir/Target.h"

#include <cmath>
#include <string>

namespace strata::codegen::detail {

using format::BodyOp;
using format::BodyRef;

namespace {

/// gated_delta_cached, or with \p packed gated_delta_qkv_cached (q, k and v
/// columns of one row of in1, q and k l2-normalised here).
void emitDeltaStep(Emitter &e, const BodyOp &op, bool packed) {
  std::vector<int64_t> ss = stateDims(e, 0);
  const uint32_t nIn = packed ? 4 : 6;
  for (uint32_t i = 1; i < nIn; ++i)
    expectLoadable(e.tensor(op.inputs[i]), "a delta-rule input");
  int64_t hk, dk, h = ss[1], dv = ss[3], cols = 0;
  if (packed) {
    hk = e.intAttr(op, "hk");
    dk = ss[2];
    cols = constDim(e.tensor(op.inputs[1]), 1);
    if (hk <= 0 || h % hk != 0 || cols != 2 * hk * dk + h * dv)
      throw Unsupported("a packed q/k/v row that is not 2 Hk Dk + H Dv");
  } else {
    Tensor q = e.tensor(op.inputs[1]), v = e.tensor(op.inputs[3]);
    hk = constDim(q, 1);
    dk = constDim(q, 2);
    h = constDim(v, 1);
    dv = constDim(v, 2);
  }
  // The operands' names: q, k, v, g, beta, seq, pos.
  const std::string gIn = packed ? "in2" : "in4", bIn = packed ? "in3" : "in5",
                    seqIn = packed ? "in4" : "in6",
                    posIn = packed ? "in5" : "in7";
  if (dk > 256)
    throw Unsupported("a key dim above 256");
  bool tiled = e.strAttr(op, "heads") == "tiled";
  float scale = e.hasAttr(op, "scale")
                    ? static_cast<float>(e.floatAttr(op, "scale"))
                    : 1.0f / std::sqrt(static_cast<float>(dk));
  // A block per (value head, 32 value columns): lane = column, warp =
  // one of kSlices slices of the key dim, so each thread keeps dk /
  // kSlices state values of its column in registers and the state rows
  // are read by coalesced 128-byte loads. The two dot products over the
  // key dim (S^T k, then S^T q) sum each slice's part, then the slices in
  // order through LDS. (One thread per column held all dk values, spilled
  // them and left 96 blocks for the whole GPU: 20 us a layer on the H200.)
  constexpr int kSlices = 8;
  if (dk % kSlices != 0)
    throw Unsupported("a key dim that is not a multiple of 8");
  const int64_t per = dk / kSlices;
  beginCachedKernel(e, 32 * kSlices);
  e.line("  const long hi = bid_x(), j = (long)bid_y() * 32 + lane_id();");
  e.line("  const int sl = tid_x() >> 5;");
  e.line("  const bool live = j < {}L;", dv);
  e.line("  const long kh = {};",
         tiled ? fmt::format("hi % {}L", hk) : fmt::format("hi / {}L", h / hk));
  e.line("  STRATA_SHARED float part[{}][32];", kSlices);
  e.line("  float sv[{}];", per);
  e.line("  long cur = -1;");
  // Row i0 + i of column j of slot s's state (i0 = the slice's first).
  e.line("  auto at = [&](long s, int i) {{ return in0 + ((s * {}L + hi) * {}L "
         "+ sl * {}L + i) * {}L + j; }};",
         h, dk, per, dv);
  // The sum over the slices of each lane's part, in slice order; every
  // thread gets its column's.
  e.line("  auto slices = [&](float x) {{");
  e.line("    part[sl][lane_id()] = x;");
  e.line("    sync_block();");
  e.line("    float sum = 0.0f;");
  e.line("    for (int u = 0; u < {}; ++u) sum += part[u][lane_id()];",
         kSlices);
  e.line("    sync_block();");
  e.line("    return sum;");
  e.line("  }};");
  // Packed: the rows' q and k norms first, a tile of rows at a time, a warp
  // a row (the heads' sums of squares off the rows' sequential chain: two
  // block reductions a row inside it cost a 1,024-token prompt 4 % on an
  // H100, bench/results/decode-ab-fold-wide-20261205T232700Z-h100.txt).
  constexpr int kNormRows = 256;
  if (packed) {
    const std::string eps =
        floatLit(static_cast<float>(e.floatAttr(op, "eps")));
    e.line("  STRATA_SHARED float rq[{}], rk[{}];", kNormRows, kNormRows);
    e.line("  for (long t0 = 0; t0 < T; t0 += {}) {{", kNormRows);
    e.line("  const long tn = T - t0 < {}L ? T - t0 : {}L;", kNormRows,
           kNormRows);
    e.line("  sync_block();");
    e.line("  for (long r = sl; r < tn; r += {}) {{", kSlices);
    e.line("    const long row = (t0 + r) * {}L + kh * {}L;", cols, dk);
    e.line("    float qs = 0.0f, ks = 0.0f;");
    e.line("    for (int i = lane_id(); i < {}; i += 32) {{", dk);
    e.line("      const float x = ld(in1, row + i), y = ld(in1, row + {}L + "
           "i);",
           hk * dk);
    e.line("      qs += x * x;");
    e.line("      ks += y * y;");
    e.line("    }}");
    e.line("    qs = warp_sum(qs);");
    e.line("    ks = warp_sum(ks);");
    e.line("    if (lane_id() == 0) {{");
    e.line("      rq[r] = 1.0f / strata_sqrt(qs + {});", eps);
    e.line("      rk[r] = 1.0f / strata_sqrt(ks + {});", eps);
    e.line("    }}");
    e.line("  }}");
    e.line("  sync_block();");
    e.line("  for (long t = t0; t < t0 + tn; ++t) {{");
  } else {
    e.line("  for (long t = 0; t < T; ++t) {{");
  }
  e.line("    const long s = {}[t], p = {}[t];", seqIn, posIn);
  e.line("    if (s < 0 || s >= {}L || p < 0) continue;", ss[0]);
  e.line("    if (s != cur) {{");
  e.line("      if (cur >= 0 && live) {{");
  e.line("#pragma unroll");
  e.line("        for (int i = 0; i < {}; ++i) *at(cur, i) = sv[i];", per);
  e.line("      }}");
  e.line("#pragma unroll");
  e.line("      for (int i = 0; i < {}; ++i) sv[i] = live ? *at(s, i) : 0.0f;",
         per);
  e.line("      cur = s;");
  e.line("    }}");
  e.line("    if (p == 0) {{");
  e.line("#pragma unroll");
  e.line("      for (int i = 0; i < {}; ++i) sv[i] = 0.0f;", per);
  e.line("    }}");
  e.line("    const float decay = strata_exp(ld({}, t * {}L + hi)), b = "
         "ld({}, t * {}L + hi);",
         gIn, h, bIn, h);
  // Element i of the slice's q and k (packed: normalised, l2_norm of form
  // "add", by the sum of the head's squares over the slices).
  std::string qAt, kAt;
  if (packed) {
    e.line("    const long qk = t * {}L + kh * {}L + sl * {}L;", cols, dk, per);
    e.line("    const float qr = rq[t - t0], kr = rk[t - t0];");
    qAt = "(ld(in1, qk + i) * qr)";
    kAt = fmt::format("(ld(in1, qk + {}L + i) * kr)", hk * dk);
  } else {
    e.line("    const long qk = (t * {}L + kh) * {}L + sl * {}L;", hk, dk, per);
    qAt = "ld(in1, qk + i)";
    kAt = "ld(in2, qk + i)";
  }
  e.line("    float kv = 0.0f;");
  e.line("#pragma unroll");
  e.line("    for (int i = 0; i < {}; ++i) {{ sv[i] *= decay; kv += sv[i] * "
         "{}; }}",
         per, kAt);
  e.line("    kv = slices(kv);");
  if (packed)
    e.line("    const float delta = live ? (ld(in1, t * {}L + {}L + hi * {}L "
           "+ j) - kv) * b : 0.0f;",
           cols, 2 * hk * dk, dv);
  else
    e.line("    const float delta = live ? (ld(in3, (t * {}L + hi) * {}L + j) "
           "- kv) * b : 0.0f;",
           h, dv);
  e.line("    float o = 0.0f;");
  e.line("#pragma unroll");
  e.line("    for (int i = 0; i < {}; ++i) {{ sv[i] += {} * delta; o += sv[i] "
         "* {}; }}",
         per, kAt, qAt);
  e.line("    o = slices(o);");
  e.line("    if (live && sl == 0) st(out0, (t * {}L + hi) * {}L + j, {} * o);",
         h, dv, floatLit(scale));
  e.line("  }}");
  if (packed)
    e.line("  }}"); // the tile of rows
  e.line("  if (cur >= 0 && live) {{");
  e.line("#pragma unroll");
  e.line("    for (int i = 0; i < {}; ++i) *at(cur, i) = sv[i];", per);
  e.line("  }}");
  e.line("}}");
  e.out.grid = {{0, h, 1}, {0, (dv + 31) / 32, 1}, {0, 1, 1}};
  e.out.block = {32 * kSlices, 1, 1};
}

} // namespace

void emitGatedDeltaCached(Emitter &e, const BodyOp &op) {
  emitDeltaStep(e, op, false);
}

void emitGatedDeltaQkvCached(Emitter &e, const BodyOp &op) {
  emitDeltaStep(e, op, true);
}

} // namespace strata::codegen::detail
