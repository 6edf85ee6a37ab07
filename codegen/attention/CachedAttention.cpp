//===- CachedAttention.cpp - the KV cache's kernels -----------------------===//
//
// The attention family's cached ops (CachedKernel.h): the decode step's
// writes to the KV cache and its reads of it. Checked against the CPU backend
// (strata-run --check).
//
//   kv_store            one block per row, the row copied to its place (f32,
//                       bf16, or int8 with a scale a head row: KvQuant.h)
//   attention_cached    split-K (flash-decoding): the pre-launch, block
//                       (row, kv head, chunk), scores a chunk of the row's
//                       keys for every query head of the GQA group (each
//                       K/V row read once) into partials (max, sum,
//                       unnormalised p.V) in the workspace; the kernel,
//                       block (row, head, 32 columns), merges the chunks
//                       and gates (dense, gated, block-sparse)
//
//===----------------------------------------------------------------------===//
#include "codegen/CachedKernel.h"
#include "codegen/Limits.h"
#include "codegen/Options.h"
#include "codegen/attention/AttentionForm.h"
#include "ir/Target.h"
#include "runtime/format/OpTable.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace strata::codegen::detail {

using format::BodyOp;
using format::BodyRef;

void emitKvStore(Emitter &e, const BodyOp &op) {
  std::vector<int64_t> s = stateDims(e, 0);
  Tensor x = e.tensor(op.inputs[1]);
  expectLoadable(x, "the rows");
  int64_t per = std::max<int64_t>(1, e.intAttr(op, "block"));
  int64_t row = s[2] * s[3];
  const CacheStore cs = cacheStore(e, 0);
  beginCachedKernel(e, kCachedThreads);
  e.line("  const long r = bid_x();");
  e.line("  if (r >= T) return;");
  e.line("  const long s = in2[r], p = in3[r];");
  e.line("  if (s < 0 || s >= {}L || p < 0 || p % {}L != {}L || p / {}L >= "
         "{}L) return;",
         s[0], per, per - 1, per, s[1]);
  if (cs.dtype == format::PlanDType::F32) {
    e.line("  float *dst = in0 + (s * {}L + p / {}L) * {}L;", s[1], per, row);
    e.line("  for (long i = tid_x(); i < {}L; i += {}) dst[i] = ld(in1, r * "
           "{}L + i);",
           row, kCachedThreads, row);
  } else if (!cs.i8()) {
    e.line("  {} *dst = in0 + (s * {}L + p / {}L) * {}L;", cs.ctype, s[1], per,
           row);
    e.line("  for (long i = tid_x(); i < {}L; i += {}) st(dst, i, ld(in1, r * "
           "{}L + i));",
           row, kCachedThreads, row);
  } else {
    // A warp per head row: its absmax (exact in any order), the scale,
    // then the values (KvQuant.h, as the CPU stores them).
    e.line("  const int lane = lane_id(), w = tid_x() >> 5;");
    e.line("  int8_t *dst = in0 + (s * {}L + p / {}L) * {}L;", s[1], per,
           s[2] * cs.stride());
    e.line("  for (long hh = w; hh < {}L; hh += {}) {{", s[2],
           kCachedThreads / 32);
    e.line("    const long src = r * {}L + hh * {}L;", row, s[3]);
    e.line("    float m = 0.0f;");
    e.line("    for (long i = lane; i < {}L; i += 32) {{", s[3]);
    e.line("      const float a = __builtin_fabsf(ld(in1, src + i));");
    e.line("      m = a > m ? a : m;");
    e.line("    }}");
    e.line("    const float sc = kv_scale(warp_max(m));");
    e.line("    int8_t *q = dst + hh * {}L;", cs.stride());
    e.line("    for (long i = lane; i < {}L; i += 32) q[i] = kv_quant(ld(in1, "
           "src + i), sc);",
           s[3]);
    e.line("    if (lane == 0) *(float *)(q + {}L) = sc;", s[3]);
    e.line("  }}");
  }
  e.line("}}");
  e.out.grid = {kCachedRows, {0, 1, 1}, {0, 1, 1}};
  e.out.block = {kCachedThreads, 1, 1};
}

void emitAttentionCached(Emitter &e, const BodyOp &op) {
  std::vector<int64_t> ks = stateDims(e, 1), vs = stateDims(e, 2);
  Tensor q = e.tensor(op.inputs[0]);
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
  CachedAttentionShape shape;
  shape.heads = h;
  shape.headDim = d;
  shape.kvHeads = hkv;
  shape.valueDim = dv;
  shape.maxSlots = block > 0 ? nb * block : ctx;
  shape.maxTokens = e.plan.maxTokens;
  shape.threads = kCachedThreads;
  shape.minChunk = int64_t(8) << option(e.plan, Opt::AttnDecodeChunk);
  // Decode steps (up to kCachedDecodeRows rows) split a row over the
  // chunks that fill the GPU, their partials a constant workspace; runs
  // of more rows (prompt chunks) take the split whose partials of
  // max_tokens rows fit (a plan of 1,024-row chunks: 2 chunks, so one
  // decode row ran 4 blocks: 0.2 ms a QSA layer at P = 1,024 on the H100).
  const int64_t decodeRows =
      std::min<int64_t>(e.plan.maxTokens, kCachedDecodeRows);
  CachedAttentionShape decodeShape = shape;
  decodeShape.maxTokens = decodeRows;
  const CachedAttentionForm decodeForm =
      selectCachedAttention(decodeShape, e.target);
  const CachedAttentionForm longForm = selectCachedAttention(shape, e.target);
  // The caches as stored (--kv): f32, bf16 or i8, read natively.
  const CacheStore kcs = cacheStore(e, 1), vcs = cacheStore(e, 2);
  // The group and key pieces do not depend on the split.
  const int64_t g = decodeForm.group, vk = decodeForm.pieces;
  // Key pieces (vk elements) a lane of an 8-lane group loads per key.
  const int64_t np = d / vk, nu = (np + 7) / 8;
  float scale = static_cast<float>(e.floatAttr(op, "scale"));
  const std::string idx = fmt::format("in{}", indexIn);
  e.workspace = true;
  const std::string params = e.params();
  const bool prefetch =
      e.target == "sm_90" && option(e.plan, Opt::AttnDecodePrefetch) != 0;
  // Whether kernel input i is a buffer the caller fills (Plan::inputs: the
  // rows' positions and slots): no kernel writes it, so the pre-launch may
  // read it before its grid dependency wait.
  auto callerFills = [&](uint32_t i) {
    const format::PlanOperand &o = e.kernel.inputs.at(i);
    return o.isBuffer() && std::find(e.plan.inputs.begin(), e.plan.inputs.end(),
                                     o.index) != e.plan.inputs.end();
  };
  const int64_t keys = int64_t(4) << option(e.plan, Opt::AttnDecodeKeys);
  static_assert(kCachedKeyTile % 16 == 0, "attn-decode-keys pads to a tile");
  // A row's split over nc chunks: `len` slots a chunk (at least the
  // chunk minimum) of its `n`; the pre-launch takes chunk c's, the merge
  // bounds a dense row's chunks by it (both print these lines).
  auto splitLen = [&](int64_t nc) {
    e.line("  long len = (n + {}L) / {}L;", nc - 1, nc);
    e.line("  if (len < {}L) len = {}L;", shape.minChunk, shape.minChunk);
  };
  auto emitForm = [&](const CachedAttentionForm &f, const std::string &sym) {
    const int64_t nc = f.chunks;
    // Pre-launch: block (row r, kv head, chunk c) takes the chunk's slots in
    // tiles of kCachedKeyTile: scores of the group's heads (8 lanes a key, 4
    // keys a warp), the tile's max and exp per head (rescaling what the earlier
    // tiles summed), then p.V with a thread per value column. Each K/V row is
    // read once for the whole group.
    e.line("STRATA_KERNEL({}) void {}_prep({}) {{", kCachedThreads, sym,
           params);
    // attn-decode-prefetch: the wait follows the L2 prefetch of the
    // chunk's rows (dense: the chunk depends on the row's slot and position
    // alone, plan inputs the caller fills: read before the wait, they are
    // the values after it); otherwise it comes first (withGridWait).
    const bool early =
        prefetch && block == 0 && callerFills(3) && callerFills(4);
    e.prologue();
    e.line("  const long r = bid_x(), kvh = bid_y(), c = bid_z();");
    e.line("  const int tid = tid_x(), lane = lane_id(), w = tid >> 5;");
    e.line("  const long s = in3[r], p = in4[r];");
    e.line("  const bool ok = s >= 0 && s < {}L && p >= 0 && p < {}L;", ks[0],
           ctx);
    e.line("  float *part = (float *)ws + r * {}L;", f.rowFloats);
    e.line("  float *acc_out = part + (kvh * {}L + c) * {}L;", nc, g * dv);
    e.line("  float *ml_out = part + {}L + (kvh * {}L + c) * {}L;", h * nc * dv,
           nc, g * 2);
    if (block > 0) {
      // The slots end after the row's last listed block (qsa_select_cached
      // lists -1 after its blocks): the chunks share what is there.
      e.line("  STRATA_SHARED int last_w[4];");
      e.line("  int last = -1;");
      e.line("  for (long i = tid; ok && i < {}L; i += {})", nb,
             kCachedThreads);
      e.line("    if ({}[r * {}L + i] >= 0) last = (int)i;", idx, nb);
      e.line("  for (int o = 16; o > 0; o >>= 1) {{");
      e.line("    const int x = shfl_xor_i(last, o);");
      e.line("    last = x > last ? x : last;");
      e.line("  }}");
      e.line("  if (lane == 0) last_w[w] = last;");
      e.line("  sync_block();");
      e.line(
          "  for (int i = 0; i < 4; ++i) last = last_w[i] > last ? last_w[i] "
          ": last;");
      e.line("  const long n = (last + 1L) * {}L;", block);
    } else {
      e.line("  const long n = ok ? p + 1 : 0;");
    }
    splitLen(nc);
    e.line("  const long first = c * len, end = n < first + len ? n : first + "
           "len;");
    // The row's K and V heads of this kv head (slot s).
    e.line("  const {} *kb = in1 + (s * {}L + kvh) * {}L;", kcs.ctype,
           ctx * hkv, kcs.stride());
    e.line("  const {} *vb = in2 + (s * {}L + kvh) * {}L;", vcs.ctype,
           ctx * hkv, vcs.stride());
    if (early) {
      // 128-byte lines of each K and V row of the chunk, a thread a line.
      const int64_t kLines =
          (kcs.stride() * int64_t(format::planDTypeSize(kcs.dtype)) + 127) /
          128;
      const int64_t vLines =
          (vcs.stride() * int64_t(format::planDTypeSize(vcs.dtype)) + 127) /
          128;
      e.line("  for (long i = tid; i < (end - first) * {}L; i += {}) {{",
             kLines + vLines, kCachedThreads);
      e.line("    const long key = first + i / {}L, l = i % {}L;",
             kLines + vLines, kLines + vLines);
      e.line("    const uint8_t *a = l < {}L ? (const uint8_t *)(kb + key * "
             "{}L) + l * 128L : (const uint8_t *)(vb + key * {}L) + (l - {}L) "
             "* 128L;",
             kLines, hkv * kcs.stride(), hkv * vcs.stride(), kLines);
      e.line("    asm volatile(\"prefetch.global.L2 [%0];\" :: \"l\"(a));");
      e.line("  }}");
      e.line("  grid_dependency_wait();");
    }
    // No slot: l < 0 tells the kernel that this chunk wrote nothing else.
    e.line("  if (first >= end) {{");
    e.line("    if (tid < {}) ml_out[2 * tid] = -__builtin_inff(), ml_out[2 * "
           "tid + 1] = -1.0f;",
           g);
    e.line("    return;");
    e.line("  }}");
    e.line("  STRATA_SHARED __attribute__((aligned(16))) float qs[{}];", g * d);
    e.line("  STRATA_SHARED __attribute__((aligned(16))) float ps[{}];",
           g * kCachedKeyTile);
    e.line("  STRATA_SHARED long key_s[{}];", kCachedKeyTile);
    e.line("  STRATA_SHARED float m_s[{}], l_s[{}], a_s[{}];", g, g, g);
    e.line("  for (long i = tid; i < {}L; i += {}) qs[i] = ld(in0, (r * {}L + "
           "kvh * {}L) * {}L + i);",
           g * d, kCachedThreads, h, g, d);
    e.line("  if (tid < {}) m_s[tid] = -__builtin_inff(), l_s[tid] = 0.0f;", g);
    e.line("  float acc[{}][{}];", g, f.cols);
    e.line("#pragma unroll");
    e.line("  for (int j = 0; j < {}; ++j)", g);
    e.line("#pragma unroll");
    e.line("    for (int u = 0; u < {}; ++u) acc[j][u] = 0.0f;", f.cols);
    e.line("  for (long t0 = first; t0 < end; t0 += {}L) {{", kCachedKeyTile);
    e.line("    const long nt = end - t0 < {}L ? end - t0 : {}L;",
           kCachedKeyTile, kCachedKeyTile);
    e.line("    sync_block();");
    e.line("    for (long i = tid; i < {}L; i += {}) {{", kCachedKeyTile,
           kCachedThreads);
    e.line("      long key = -1;");
    if (block > 0) {
      e.line("      if (i < nt) {{");
      e.line("        const long sl = t0 + i, blk = {}[r * {}L + sl / {}L];",
             idx, nb, block);
      e.line("        key = blk < 0 ? -1 : blk * {}L + sl % {}L;", block,
             block);
      e.line("        if (key > p) key = -1;");
      e.line("      }}");
    } else {
      e.line("      if (i < nt) key = t0 + i;");
    }
    e.line("      key_s[i] = key;");
    e.line("    }}");
    e.line("    sync_block();");
    // Scores: lanes 8q .. 8q+7 of warp w take slot 16 it + 4 w + q, each
    // every 8th piece of the key (a group reads 32 contiguous bytes a step).
    e.line("    for (int it = 0; it * 16 < nt; ++it) {{");
    e.line(
        "      const int k = it * 16 + w * 4 + (lane >> 3), sub = lane & 7;");
    e.line("      const long key = key_s[k];");
    e.line("      const {} *kr = kb + (key < 0 ? 0 : key) * {}L;", kcs.ctype,
           hkv * kcs.stride());
    if (kcs.i8())
      e.line("      const float ksc = kv_row_scale(kr, {}L);", d);
    e.line("      float kv[{}][{}];", nu, vk);
    e.line("#pragma unroll");
    e.line("      for (int u = 0; u < {}; ++u) {{", nu);
    e.line("        const long pc = u * 8L + sub;");
    if (kcs.i8()) {
      // Dequantised as loaded (cacheStore: d % 4 == 0, so vk is 4).
      e.line("        if (key >= 0 && pc < {}L) kv_dequant4(kr, pc * 4, ksc, "
             "kv[u]);",
             np);
      e.line("        else kv[u][0] = kv[u][1] = kv[u][2] = kv[u][3] = 0.0f;");
    } else if (vk == 4) {
      e.line("        if (key >= 0 && pc < {}L) ld4(kr, pc * 4, kv[u]);", np);
      e.line("        else kv[u][0] = kv[u][1] = kv[u][2] = kv[u][3] = 0.0f;");
    } else {
      e.line("        kv[u][0] = key >= 0 && pc < {}L ? {} : 0.0f;", np,
             kcs.dtype == format::PlanDType::F32 ? "kr[pc]" : "ld(kr, pc)");
    }
    e.line("      }}");
    // One head at a time (not unrolled): unrolled, the compiler hoists every
    // head's q loads at once and spills.
    e.line("#pragma unroll 1");
    e.line("      for (int j = 0; j < {}; ++j) {{", g);
    e.line("        float x = 0.0f;");
    e.line("#pragma unroll");
    e.line("        for (int u = 0; u < {}; ++u) {{", nu);
    e.line("          const long pc = u * 8L + sub;");
    e.line("          if (pc >= {}L) continue;", np);
    if (vk == 4) {
      e.line("          float qv[4];");
      e.line("          ld4(qs + j * {}L, pc * 4, qv);", d);
      e.line("          x += qv[0] * kv[u][0] + qv[1] * kv[u][1] + qv[2] * "
             "kv[u][2] + qv[3] * kv[u][3];");
    } else {
      e.line("          x += qs[j * {}L + pc] * kv[u][0];", d);
    }
    e.line("        }}");
    e.line("        x += shfl_xor_f(x, 4);");
    e.line("        x += shfl_xor_f(x, 2);");
    e.line("        x += shfl_xor_f(x, 1);");
    e.line("        if ((j & 7) == sub) ps[j * {}L + k] = key >= 0 ? x * {} : "
           "-__builtin_inff();",
           kCachedKeyTile, floatLit(scale));
    e.line("      }}");
    e.line("    }}");
    e.line("    sync_block();");
    // Per head: the tile's max joins the running one; earlier sums rescale
    // by a = exp(m_old - m_new) (1 while no key was seen).
    e.line("    for (int j = w; j < {}; j += 4) {{", g);
    e.line("      float sc[{}], mt = -__builtin_inff();", kCachedKeyTile / 32);
    e.line("#pragma unroll");
    e.line("      for (int i = 0; i < {}; ++i) {{", kCachedKeyTile / 32);
    e.line("        const int k = lane + 32 * i;");
    e.line("        sc[i] = k < nt ? ps[j * {}L + k] : -__builtin_inff();",
           kCachedKeyTile);
    e.line("        mt = sc[i] > mt ? sc[i] : mt;");
    e.line("      }}");
    e.line("      mt = warp_max(mt);");
    e.line("      const float mo = m_s[j], mn = mt > mo ? mt : mo;");
    e.line("      const bool none = mn == -__builtin_inff();");
    e.line("      float sum = 0.0f;");
    e.line("#pragma unroll");
    e.line("      for (int i = 0; i < {}; ++i) {{", kCachedKeyTile / 32);
    e.line("        const float pj = none ? 0.0f : strata_exp(sc[i] - mn);");
    e.line("        ps[j * {}L + lane + 32 * i] = pj;", kCachedKeyTile);
    e.line("        sum += pj;");
    e.line("      }}");
    e.line("      sum = warp_sum(sum);");
    e.line("      if (lane == 0) {{");
    e.line("        const float a = none ? 1.0f : strata_exp(mo - mn);");
    e.line("        a_s[j] = a, l_s[j] = l_s[j] * a + sum, m_s[j] = mn;");
    e.line("      }}");
    e.line("    }}");
    e.line("    sync_block();");
    // p.V: column tid + 128 u of every head of the group, four keys a step.
    e.line("#pragma unroll");
    e.line("    for (int j = 0; j < {}; ++j) {{", g);
    e.line("      const float a = a_s[j];");
    e.line("#pragma unroll");
    e.line("      for (int u = 0; u < {}; ++u) acc[j][u] *= a;", f.cols);
    e.line("    }}");
    // attn-decode-keys: the V rows of `keys` keys loaded before their
    // products (the tile's scores are padded to kCachedKeyTile, a multiple).
    e.line("    for (int k = 0; k < nt; k += {}) {{", keys);
    e.line("      float v[{}][{}];", f.cols, keys);
    e.line("#pragma unroll");
    e.line("      for (int i = 0; i < {}; ++i) {{", keys);
    e.line("        const long key = key_s[k + i];");
    e.line("#pragma unroll");
    e.line("        for (int u = 0; u < {}; ++u) {{", f.cols);
    e.line("          const long col = tid + {}L * u;", kCachedThreads);
    if (vcs.i8()) {
      e.line("          const int8_t *vr = vb + (key < 0 ? 0 : key) * {}L;",
             hkv * vcs.stride());
      e.line("          v[u][i] = key >= 0 && col < {}L ? kv_dequant(vr[col], "
             "kv_row_scale(vr, {}L)) : 0.0f;",
             dv, dv);
    } else if (vcs.dtype != format::PlanDType::F32) {
      e.line("          v[u][i] = key >= 0 && col < {}L ? ld(vb, key * {}L + "
             "col) : 0.0f;",
             dv, hkv * dv);
    } else {
      e.line(
          "          v[u][i] = key >= 0 && col < {}L ? vb[key * {}L + col] : "
          "0.0f;",
          dv, hkv * dv);
    }
    e.line("        }}");
    e.line("      }}");
    e.line("#pragma unroll");
    e.line("      for (int q = 0; q < {}; q += 4)", keys);
    e.line("#pragma unroll");
    e.line("      for (int j = 0; j < {}; ++j) {{", g);
    e.line("        float pv[4];");
    e.line("        ld4(ps + j * {}L, k + q, pv);", kCachedKeyTile);
    e.line("#pragma unroll");
    e.line("        for (int u = 0; u < {}; ++u)", f.cols);
    e.line("          acc[j][u] += pv[0] * v[u][q] + pv[1] * v[u][q + 1] + "
           "pv[2] * v[u][q + 2] + pv[3] * v[u][q + 3];");
    e.line("      }}");
    e.line("    }}");
    e.line("  }}");
    e.line("#pragma unroll");
    e.line("  for (int j = 0; j < {}; ++j)", g);
    e.line("#pragma unroll");
    e.line("    for (int u = 0; u < {}; ++u) {{", f.cols);
    e.line("      const long col = tid + {}L * u;", kCachedThreads);
    e.line("      if (col < {}L) acc_out[j * {}L + col] = acc[j][u];", dv, dv);
    e.line("    }}");
    e.line("  if (tid < {}) ml_out[2 * tid] = m_s[tid], ml_out[2 * tid + 1] = "
           "l_s[tid];",
           g);
    e.line("}}");

    // The kernel: block (row, query head, 32 columns) merges the chunks
    // rescaled to their common max; warp w takes every fourth chunk, the four
    // sums added in order (deterministic). The chunks that wrote partials are
    // a prefix (l >= 0); those with l = 0 saw no key. A dense row's chunks
    // past its keys wrote nothing: the pre-launch's split of the row's
    // position bounds them (`live`). Each thread's partials load before the
    // chunks' maxima are known (one round trip for both, where the products
    // waited on the weights: 66 chunks of 8 slots took 4.6 us a layer);
    // those of chunks that wrote nothing are never added.
    // Registers for the first 64 chunks (16 a thread); more (few kv
    // heads on many units) load in the sum's loop.
    const int64_t nu = std::min<int64_t>((nc + 3) / 4, 16);
    e.line("STRATA_KERNEL({}) void {}({}) {{", kCachedThreads, sym, params);
    e.prologue();
    e.line("  const long r = bid_x(), hi = bid_y();");
    e.line("  const int tid = tid_x(), lane = lane_id(), w = tid >> 5;");
    e.line("  const long col = bid_z() * 32L + lane;");
    e.line("  const long kvh = hi / {}L, j = hi % {}L;", g, g);
    e.line("  const float *part = (const float *)ws + r * {}L;", f.rowFloats);
    e.line("  const float *acc_in = part + kvh * {}L + j * {}L + col;",
           nc * g * dv, dv);
    e.line("  const float *ml_in = part + {}L + kvh * {}L + j * 2;",
           h * nc * dv, nc * g * 2);
    if (block > 0) {
      e.line("  const long live = {}L;", nc);
    } else {
      // The pre-launch's split (its n, len and first < end).
      e.line("  const long s = in3[r], p = in4[r];");
      e.line("  const long n = s >= 0 && s < {}L && p >= 0 && p < {}L ? p + 1 "
             ": 0;",
             ks[0], ctx);
      splitLen(nc);
      e.line("  const long live = (n + len - 1) / len;");
    }
    e.line("  float av[{}];", nu);
    e.line("#pragma unroll");
    e.line("  for (int i = 0; i < {}; ++i) {{", nu);
    e.line("    const long c = w + 4L * i;");
    e.line("    av[i] = col < {}L && c < live ? acc_in[c * {}L] : 0.0f;", dv,
           g * dv);
    e.line("  }}");
    e.line("  STRATA_SHARED float cm[{}], cl[{}], cw[{}], part_w[4][32];", nc,
           nc, nc);
    e.line("  for (long c = tid; c < live; c += {}) {{", kCachedThreads);
    e.line("    cm[c] = ml_in[c * {}L];", g * 2);
    e.line("    cl[c] = ml_in[c * {}L + 1];", g * 2);
    e.line("  }}");
    e.line("  sync_block();");
    e.line("  float mx = -__builtin_inff();");
    e.line("  long na = 0;");
    e.line("  for (long c = 0; c < live; ++c) {{");
    e.line("    if (cl[c] > 0.0f && cm[c] > mx) mx = cm[c];");
    e.line("    if (cl[c] >= 0.0f) na = c + 1;");
    e.line("  }}");
    e.line("  for (long c = tid; c < na; c += {})", kCachedThreads);
    e.line("    cw[c] = cl[c] > 0.0f ? strata_exp(cm[c] - mx) : 0.0f;");
    e.line("  sync_block();");
    e.line("  float o = 0.0f;");
    e.line("#pragma unroll");
    e.line("  for (int i = 0; i < {}; ++i) {{", nu);
    e.line("    const long c = w + 4L * i;");
    e.line("    if (c < na) o += cw[c] * av[i];");
    e.line("  }}");
    if (4 * nu < nc)
      e.line("  for (long c = w + {}L; col < {}L && c < na; c += 4) o += cw[c] "
             "* acc_in[c * {}L];",
             4 * nu, dv, g * dv);
    e.line("  part_w[w][lane] = o;");
    e.line("  sync_block();");
    e.line("  if (w != 0 || col >= {}L) return;", dv);
    e.line("  float den = 0.0f;");
    e.line("  for (long c = 0; c < na; ++c) den += cl[c] * cw[c];");
    e.line("  o = part_w[0][lane] + part_w[1][lane] + part_w[2][lane] + "
           "part_w[3][lane];");
    e.line("  o = den > 0.0f ? o / den : 0.0f;");
    if (gated)
      e.line("  o *= 1.0f / (1.0f + strata_exp(-ld(in5, (r * {}L + hi) * {}L + "
             "col)));",
             h, dv);
    e.line("  st(out0, (r * {}L + hi) * {}L + col, o);", h, dv);
    e.line("}}");
    e.out.grid = {kCachedRows, {0, h, 1}, {0, (dv + 31) / 32, 1}};
    e.out.block = {kCachedThreads, 1, 1};
    format::PlanPreLaunch pre;
    pre.grid = {kCachedRows, {0, hkv, 1}, {0, nc, 1}};
    pre.block = {kCachedThreads, 1, 1};
    e.out.pre = std::move(pre);
  };
  emitForm(decodeForm, "@SYMBOL@");
  EmittedKernel own = std::move(e.out);
  if (longForm.chunks == decodeForm.chunks) {
    own.workspace = {decodeForm.rowFloats * 4, 0, 1};
  } else {
    own.workspace = {0, decodeRows * decodeForm.rowFloats * 4, 1};
    e.out = EmittedKernel{};
    emitForm(longForm, "@SYMBOL@_long");
    EmittedKernel alt = std::move(e.out);
    alt.args = own.args; // the same parameters (params() ran once)
    alt.workspace = {longForm.rowFloats * 4, 0, 1};
    alt.minTokens = decodeRows + 1;
    alt.suffix = "_long";
    own.alternates.push_back(std::move(alt));
  }
  e.out = std::move(own);
}

} // namespace strata::codegen::detail
