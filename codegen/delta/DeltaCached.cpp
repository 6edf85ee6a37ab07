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
  e.line("  for (long t = 0; t < T; ++t) {{");
  e.line("    const long s = in6[t], p = in7[t];");
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
  e.line("    const float decay = strata_exp(ld(in4, t * {}L + hi)), b = "
         "ld(in5, t * {}L + hi);",
         h, h);
  e.line("    const long qk = (t * {}L + kh) * {}L + sl * {}L;", hk, dk, per);
  e.line("    float kv = 0.0f;");
  e.line("#pragma unroll");
  e.line("    for (int i = 0; i < {}; ++i) {{ sv[i] *= decay; kv += sv[i] * "
         "ld(in2, qk + i); }}",
         per);
  e.line("    kv = slices(kv);");
  e.line("    const float delta = live ? (ld(in3, (t * {}L + hi) * {}L + j) - "
         "kv) * b : 0.0f;",
         h, dv);
  e.line("    float o = 0.0f;");
  e.line("#pragma unroll");
  e.line(
      "    for (int i = 0; i < {}; ++i) {{ sv[i] += ld(in2, qk + i) * delta; "
      "o += sv[i] * ld(in1, qk + i); }}",
      per);
  e.line("    o = slices(o);");
  e.line("    if (live && sl == 0) st(out0, (t * {}L + hi) * {}L + j, {} * o);",
         h, dv, floatLit(scale));
  e.line("  }}");
  e.line("  if (cur >= 0 && live) {{");
  e.line("#pragma unroll");
  e.line("    for (int i = 0; i < {}; ++i) *at(cur, i) = sv[i];", per);
  e.line("  }}");
  e.line("}}");
  e.out.grid = {{0, h, 1}, {0, (dv + 31) / 32, 1}, {0, 1, 1}};
  e.out.block = {32 * kSlices, 1, 1};
}

} // namespace strata::codegen::detail
