//===- StateEmitter.cpp - device kernels of the generation state ops ------===//
//
// The state family: kernels that read or write a plan state (a KV cache, a
// conv window, a delta-rule state, a token history; docs/IR.md) over rows
// that carry their slot and position. Checked against the CPU backend
// (strata-run --check). The decode step's two heavy readers are split
// over the GPU (issue 33); the rest are simple (one block per row, or rows
// in order).
//
//   kv_store            one block per row, the row copied to its place
//   attention_cached    split-K (flash-decoding): the pre-launch, block
//                       (row, kv head, chunk), scores a chunk of the row's
//                       keys for every query head of the GQA group (each
//                       K/V row read once) into partials (max, sum,
//                       unnormalised p.V) in the workspace; the kernel,
//                       block (row, head, 32 columns), merges the chunks
//                       and gates (dense, gated, block-sparse)
//   block_mean_cached   one block per row
//   qsa_select_cached   the pre-launch, block (row, 32 blocks), scores a
//                       warp per block into the workspace; the kernel,
//                       block (row, 32 candidates), ranks them by counting
//                       (no sequential rounds over `top`)
//   conv1d_cached       one thread per channel, rows in order (the ring)
//   gated_delta_cached  one block per (value head, 32 value columns): a
//                       lane per column, 8 warps over the key dim, each
//                       holding its slice of the column in registers; the
//                       dot products summed over the slices in order;
//                       rows in order
//   ngram_hash_cached   one thread, rows in order (the ring)
//
// Rows of one slot must come in increasing positions (Session does so);
// a row outside the state's slots or positions is skipped here (the
// executor refuses it before any kernel runs).
//
//===----------------------------------------------------------------------===//
#include "codegen/EmitterImpl.h"
#include "codegen/Limits.h"
#include "ir/Target.h"

#include <algorithm>
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

/// The storage of a cache state operand \p i: f32, bf16 or i8 (rows of the
/// last dim, each its int8 values then an f32 scale: format::stateBytes).
struct CacheStore {
  format::PlanDType dtype = format::PlanDType::F32;
  std::string ctype = "float"; ///< the pointer's element type
  int64_t len = 1;             ///< values a row (the last dim)
  bool i8() const { return dtype == format::PlanDType::I8; }
  /// Elements (f32, bf16) or bytes (i8) from one row to the next.
  int64_t stride() const { return i8() ? len + 4 : len; }
};

/// The cache state operand \p i; an i8 one makes the source embed
/// runtime/KvQuant.h, the quantisation the CPU backend shares.
CacheStore cacheStore(Emitter &e, uint32_t i) {
  std::vector<int64_t> d = stateDims(e, i);
  CacheStore c;
  c.dtype = e.plan.states.at(e.kernel.inputs.at(i).index).dtype;
  c.ctype = e.tensor({BodyRef::Kind::In, i, {}}).ctype;
  c.len = d.back();
  if (c.i8()) {
    if (c.len % 4 != 0)
      throw Unsupported("an i8 cache whose rows are not a multiple of 4");
    e.out.kvQuant = true;
  }
  return c;
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
  const CacheStore cs = cacheStore(e, 0);
  begin(e, kThreads);
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
           row, kThreads, row);
  } else if (!cs.i8()) {
    e.line("  {} *dst = in0 + (s * {}L + p / {}L) * {}L;", cs.ctype, s[1], per,
           row);
    e.line("  for (long i = tid_x(); i < {}L; i += {}) st(dst, i, ld(in1, r * "
           "{}L + i));",
           row, kThreads, row);
  } else {
    // A warp per head row: its absmax (exact in any order), the scale,
    // then the values (KvQuant.h, as the CPU stores them).
    e.line("  const int lane = lane_id(), w = tid_x() >> 5;");
    e.line("  int8_t *dst = in0 + (s * {}L + p / {}L) * {}L;", s[1], per,
           s[2] * cs.stride());
    e.line("  for (long hh = w; hh < {}L; hh += {}) {{", s[2], kThreads / 32);
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
  e.out.grid = {kRows, {0, 1, 1}, {0, 1, 1}};
  e.out.block = {kThreads, 1, 1};
}

/// attention_cached's split over key slots (flash-decoding). A row's slots
/// are its keys 0 .. p (dense) or, with a block index, `block` slots per
/// index entry up to its last listed block (entry e, slot i: key
/// index[e] * block + i where index[e] >= 0 and the key <= p).
struct CachedAttentionForm {
  int64_t group = 1;  ///< query heads per kv head (one block serves them)
  int64_t chunks = 1; ///< pre-launch blocks per (row, kv head)
  int64_t cols = 1;   ///< value columns a thread accumulates (dv / 128)
  int64_t pieces = 1; ///< key elements a lane loads at once (4: ld4)
  /// Workspace floats per row: acc [hkv][chunks][group][dv], then (m, l)
  /// [hkv][chunks][group][2].
  int64_t rowFloats = 0;
};

/// Slots a block scores at once (shared memory; a multiple of 32).
constexpr int64_t kTile = 64;
/// Slots a chunk takes at least: below it the q staging and the partials
/// (group * (dv + 2) floats) outweigh the keys read.
constexpr int64_t kMinChunk = 32;
/// The partials at max_tokens rows stay below this: the chunk count is a
/// compile-time constant and the workspace grows with it and T.
constexpr int64_t kAttentionWorkspace = int64_t(64) << 20;

/// The split of attention_cached for e.target: h query heads over hkv kv
/// heads, key dim d, value dim dv, at most maxSlots slots a row. The chunk
/// count is fixed here; at run time a row's n slots go to the chunks in
/// equal runs of at least kMinChunk, so a short row takes fewer blocks and
/// a long one stays spread over the units.
CachedAttentionForm selectCachedAttention(const Emitter &e, int64_t h,
                                          int64_t hkv, int64_t d, int64_t dv,
                                          int64_t maxSlots) {
  CachedAttentionForm f;
  if (hkv <= 0 || h % hkv != 0)
    throw Unsupported(fmt::format(
        "query heads {} are not a multiple of kv heads {}", h, hkv));
  f.group = h / hkv;
  f.cols = (dv + kThreads - 1) / kThreads;
  f.pieces = d % 4 == 0 ? 4 : 1;
  // A lane holds an eighth of a key in registers.
  if (d > 256)
    throw Unsupported("a head dim above 256");
  // The group's queries and a tile of its scores sit in shared memory; its
  // accumulators (group x cols a thread) in registers.
  if (f.group * (d + kTile) * 4 > staticSharedBudget())
    throw Unsupported(fmt::format(
        "a GQA group of {} heads of dim {} does not fit shared memory", f.group,
        d));
  if (f.group * f.cols > 64)
    throw Unsupported(fmt::format(
        "a GQA group of {} heads of value dim {} does not fit registers",
        f.group, dv));
  // Two blocks a unit at T = 1 and a full context (one block's loads leave
  // the memory idle while it computes), no chunk shorter than kMinChunk
  // there, and the partials of max_tokens rows within the budget.
  const ir::Target *t = ir::lookupTarget(e.target);
  const int64_t units = t ? t->units : 1;
  const int64_t rows = std::max<int64_t>(1, e.plan.maxTokens);
  const int64_t record = h * (dv + 2) * 4;
  f.chunks = (2 * units + hkv - 1) / hkv;
  f.chunks = std::min(f.chunks, (maxSlots + kMinChunk - 1) / kMinChunk);
  f.chunks = std::min(f.chunks, kAttentionWorkspace / (rows * record));
  f.chunks = std::max<int64_t>(f.chunks, 1);
  f.rowFloats = (h * f.chunks * (dv + 2) + 3) / 4 * 4;
  return f;
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
  const CachedAttentionForm f =
      selectCachedAttention(e, h, hkv, d, dv, block > 0 ? nb * block : ctx);
  // The caches as stored (--kv): f32, bf16 or i8, read natively.
  const CacheStore kcs = cacheStore(e, 1), vcs = cacheStore(e, 2);
  const int64_t g = f.group, nc = f.chunks, vk = f.pieces;
  // Key pieces (vk elements) a lane of an 8-lane group loads per key.
  const int64_t np = d / vk, nu = (np + 7) / 8;
  float scale = static_cast<float>(e.floatAttr(op, "scale"));
  const std::string idx = fmt::format("in{}", indexIn);
  e.workspace = true;
  const std::string params = e.params();

  // Pre-launch: block (row r, kv head, chunk c) takes the chunk's slots in
  // tiles of kTile: scores of the group's heads (8 lanes a key, 4 keys a
  // warp), the tile's max and exp per head (rescaling what the earlier
  // tiles summed), then p.V with a thread per value column. Each K/V row is
  // read once for the whole group.
  e.line("STRATA_KERNEL({}) void @SYMBOL@_prep({}) {{", kThreads, params);
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
    e.line("  for (long i = tid; ok && i < {}L; i += {})", nb, kThreads);
    e.line("    if ({}[r * {}L + i] >= 0) last = (int)i;", idx, nb);
    e.line("  for (int o = 16; o > 0; o >>= 1) {{");
    e.line("    const int x = shfl_xor_i(last, o);");
    e.line("    last = x > last ? x : last;");
    e.line("  }}");
    e.line("  if (lane == 0) last_w[w] = last;");
    e.line("  sync_block();");
    e.line("  for (int i = 0; i < 4; ++i) last = last_w[i] > last ? last_w[i] "
           ": last;");
    e.line("  const long n = (last + 1L) * {}L;", block);
  } else {
    e.line("  const long n = ok ? p + 1 : 0;");
  }
  e.line("  long len = (n + {}L) / {}L;", nc - 1, nc);
  e.line("  if (len < {}L) len = {}L;", kMinChunk, kMinChunk);
  e.line("  const long first = c * len, end = n < first + len ? n : first + "
         "len;");
  // No slot: l < 0 tells the kernel that this chunk wrote nothing else.
  e.line("  if (first >= end) {{");
  e.line("    if (tid < {}) ml_out[2 * tid] = -__builtin_inff(), ml_out[2 * "
         "tid + 1] = -1.0f;",
         g);
  e.line("    return;");
  e.line("  }}");
  e.line("  STRATA_SHARED __attribute__((aligned(16))) float qs[{}];", g * d);
  e.line("  STRATA_SHARED __attribute__((aligned(16))) float ps[{}];",
         g * kTile);
  e.line("  STRATA_SHARED long key_s[{}];", kTile);
  e.line("  STRATA_SHARED float m_s[{}], l_s[{}], a_s[{}];", g, g, g);
  e.line("  for (long i = tid; i < {}L; i += {}) qs[i] = ld(in0, (r * {}L + "
         "kvh * {}L) * {}L + i);",
         g * d, kThreads, h, g, d);
  e.line("  if (tid < {}) m_s[tid] = -__builtin_inff(), l_s[tid] = 0.0f;", g);
  e.line("  const {} *kb = in1 + (s * {}L + kvh) * {}L;", kcs.ctype, ctx * hkv,
         kcs.stride());
  e.line("  const {} *vb = in2 + (s * {}L + kvh) * {}L;", vcs.ctype, ctx * hkv,
         vcs.stride());
  e.line("  float acc[{}][{}];", g, f.cols);
  e.line("#pragma unroll");
  e.line("  for (int j = 0; j < {}; ++j)", g);
  e.line("#pragma unroll");
  e.line("    for (int u = 0; u < {}; ++u) acc[j][u] = 0.0f;", f.cols);
  e.line("  for (long t0 = first; t0 < end; t0 += {}L) {{", kTile);
  e.line("    const long nt = end - t0 < {}L ? end - t0 : {}L;", kTile, kTile);
  e.line("    sync_block();");
  e.line("    for (long i = tid; i < {}L; i += {}) {{", kTile, kThreads);
  e.line("      long key = -1;");
  if (block > 0) {
    e.line("      if (i < nt) {{");
    e.line("        const long sl = t0 + i, blk = {}[r * {}L + sl / {}L];", idx,
           nb, block);
    e.line("        key = blk < 0 ? -1 : blk * {}L + sl % {}L;", block, block);
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
  e.line("      const int k = it * 16 + w * 4 + (lane >> 3), sub = lane & 7;");
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
         kTile, floatLit(scale));
  e.line("      }}");
  e.line("    }}");
  e.line("    sync_block();");
  // Per head: the tile's max joins the running one; earlier sums rescale
  // by a = exp(m_old - m_new) (1 while no key was seen).
  e.line("    for (int j = w; j < {}; j += 4) {{", g);
  e.line("      float sc[{}], mt = -__builtin_inff();", kTile / 32);
  e.line("#pragma unroll");
  e.line("      for (int i = 0; i < {}; ++i) {{", kTile / 32);
  e.line("        const int k = lane + 32 * i;");
  e.line("        sc[i] = k < nt ? ps[j * {}L + k] : -__builtin_inff();",
         kTile);
  e.line("        mt = sc[i] > mt ? sc[i] : mt;");
  e.line("      }}");
  e.line("      mt = warp_max(mt);");
  e.line("      const float mo = m_s[j], mn = mt > mo ? mt : mo;");
  e.line("      const bool none = mn == -__builtin_inff();");
  e.line("      float sum = 0.0f;");
  e.line("#pragma unroll");
  e.line("      for (int i = 0; i < {}; ++i) {{", kTile / 32);
  e.line("        const float pj = none ? 0.0f : strata_exp(sc[i] - mn);");
  e.line("        ps[j * {}L + lane + 32 * i] = pj;", kTile);
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
  e.line("    for (int k = 0; k < nt; k += 4) {{");
  e.line("      float v[{}][4];", f.cols);
  e.line("#pragma unroll");
  e.line("      for (int i = 0; i < 4; ++i) {{");
  e.line("        const long key = key_s[k + i];");
  e.line("#pragma unroll");
  e.line("        for (int u = 0; u < {}; ++u) {{", f.cols);
  e.line("          const long col = tid + {}L * u;", kThreads);
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
    e.line("          v[u][i] = key >= 0 && col < {}L ? vb[key * {}L + col] : "
           "0.0f;",
           dv, hkv * dv);
  }
  e.line("        }}");
  e.line("      }}");
  e.line("#pragma unroll");
  e.line("      for (int j = 0; j < {}; ++j) {{", g);
  e.line("        float pv[4];");
  e.line("        ld4(ps + j * {}L, k, pv);", kTile);
  e.line("#pragma unroll");
  e.line("        for (int u = 0; u < {}; ++u)", f.cols);
  e.line("          acc[j][u] += pv[0] * v[u][0] + pv[1] * v[u][1] + pv[2] * "
         "v[u][2] + pv[3] * v[u][3];");
  e.line("      }}");
  e.line("    }}");
  e.line("  }}");
  e.line("#pragma unroll");
  e.line("  for (int j = 0; j < {}; ++j)", g);
  e.line("#pragma unroll");
  e.line("    for (int u = 0; u < {}; ++u) {{", f.cols);
  e.line("      const long col = tid + {}L * u;", kThreads);
  e.line("      if (col < {}L) acc_out[j * {}L + col] = acc[j][u];", dv, dv);
  e.line("    }}");
  e.line("  if (tid < {}) ml_out[2 * tid] = m_s[tid], ml_out[2 * tid + 1] = "
         "l_s[tid];",
         g);
  e.line("}}");

  // The kernel: block (row, query head, 32 columns) merges the chunks
  // rescaled to their common max; warp w takes every fourth chunk, the four
  // sums added in order (deterministic). The chunks that wrote partials are
  // a prefix (l >= 0); those with l = 0 saw no key.
  e.line("STRATA_KERNEL({}) void @SYMBOL@({}) {{", kThreads, params);
  e.prologue();
  e.line("  const long r = bid_x(), hi = bid_y();");
  e.line("  const int tid = tid_x(), lane = lane_id(), w = tid >> 5;");
  e.line("  const long col = bid_z() * 32L + lane;");
  e.line("  const long kvh = hi / {}L, j = hi % {}L;", g, g);
  e.line("  const float *part = (const float *)ws + r * {}L;", f.rowFloats);
  e.line("  const float *acc_in = part + kvh * {}L + j * {}L + col;",
         nc * g * dv, dv);
  e.line("  const float *ml_in = part + {}L + kvh * {}L + j * 2;", h * nc * dv,
         nc * g * 2);
  e.line("  STRATA_SHARED float cm[{}], cl[{}], cw[{}], part_w[4][32];", nc, nc,
         nc);
  e.line("  for (long c = tid; c < {}L; c += {}) {{", nc, kThreads);
  e.line("    cm[c] = ml_in[c * {}L];", g * 2);
  e.line("    cl[c] = ml_in[c * {}L + 1];", g * 2);
  e.line("  }}");
  e.line("  sync_block();");
  e.line("  float mx = -__builtin_inff();");
  e.line("  long na = 0;");
  e.line("  for (long c = 0; c < {}L; ++c) {{", nc);
  e.line("    if (cl[c] > 0.0f && cm[c] > mx) mx = cm[c];");
  e.line("    if (cl[c] >= 0.0f) na = c + 1;");
  e.line("  }}");
  e.line("  for (long c = tid; c < na; c += {})", kThreads);
  e.line("    cw[c] = cl[c] > 0.0f ? strata_exp(cm[c] - mx) : 0.0f;");
  e.line("  sync_block();");
  e.line("  float o = 0.0f;");
  e.line("#pragma unroll 4");
  e.line("  for (long c = w; col < {}L && c < na; c += 4) o += cw[c] * "
         "acc_in[c * {}L];",
         dv, g * dv);
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
  e.out.grid = {kRows, {0, h, 1}, {0, (dv + 31) / 32, 1}};
  e.out.block = {kThreads, 1, 1};
  format::PlanPreLaunch pre;
  pre.grid = {kRows, {0, hkv, 1}, {0, nc, 1}};
  pre.block = {kThreads, 1, 1};
  e.out.pre = std::move(pre);
  e.out.workspace = {f.rowFloats * 4, 0, 1};
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
  const CacheStore cst = cacheStore(e, 0);
  e.line("  const {} *base = in0 + (s * {}L + first) * {}L;", cst.ctype, cs[1],
         cs[2] * cst.stride());
  e.line("  for (long c = tid_x(); c < {}L; c += {}) {{", row, kThreads);
  e.line("    float sum = 0.0f;");
  if (cst.i8()) {
    // Value c is value c % D of head c / D's row (its scale after it).
    e.line("    const long hh = c / {}L, ci = c % {}L;", cs[3], cs[3]);
    e.line("    for (long i = 0; full && i < {}L; ++i) {{", block);
    e.line("      const int8_t *q = base + i * {}L + hh * {}L;",
           cs[2] * cst.stride(), cst.stride());
    e.line("      sum += kv_dequant(q[ci], kv_row_scale(q, {}L));", cs[3]);
    e.line("    }}");
  } else if (cst.dtype != format::PlanDType::F32) {
    e.line("    for (long i = 0; full && i < {}L; ++i) sum += ld(base, i * {}L "
           "+ c);",
           block, row);
  } else {
    e.line("    for (long i = 0; full && i < {}L; ++i) sum += base[i * {}L + "
           "c];",
           block, row);
  }
  e.line("    st(out0, r * {}L + c, full ? sum / {} : 0.0f);", row,
         floatLit(static_cast<float>(block)));
  e.line("  }}");
  e.line("}}");
  e.out.grid = {kRows, {0, 1, 1}, {0, 1, 1}};
  e.out.block = {kThreads, 1, 1};
}

/// Block scores a qsa_select_cached pre-launch block computes (8 a warp)
/// and candidates a kernel block ranks (4 threads each).
constexpr int64_t kScoresPerBlock = 32, kRanksPerBlock = 32;
/// Scores the ranking stages in shared memory at once.
constexpr int64_t kRankTile = 2048;

void emitQsaSelectCached(Emitter &e, const BodyOp &op) {
  std::vector<int64_t> ks = stateDims(e, 1);
  Tensor q = e.tensor(op.inputs[0]);
  expectLoadable(q, "the queries");
  int64_t hi = constDim(q, 1), di = constDim(q, 2), nb = ks[1];
  int64_t block = e.intAttr(op, "block"), top = e.intAttr(op, "top");
  float inv = 1.0f / std::sqrt(static_cast<float>(di));
  if (hi * di * 4 > staticSharedBudget())
    throw Unsupported("indexer queries that do not fit shared memory");
  // Lanes over the key dim: np pieces of vk elements, nu a lane; a warp's
  // keys load in batches of at most 32 floats a lane.
  const int64_t vk = di % 4 == 0 ? 4 : 1, np = di / vk, nu = (np + 31) / 32;
  const int64_t perWarp = kScoresPerBlock / 4;
  const int64_t kbat = std::clamp<int64_t>(32 / (nu * vk), 1, perWarp);
  const int64_t tile = std::min(std::max<int64_t>(nb, 1), kRankTile);
  e.workspace = true;
  const std::string params = e.params();
  auto rowHead = [&] {
    e.line("  const long r = bid_x();");
    e.line("  const int tid = tid_x(), lane = lane_id(), w = tid >> 5;");
    e.line("  const long s = in2[r], p = in3[r];");
    e.line("  const bool ok = s >= 0 && s < {}L && p >= 0;", ks[0]);
    e.line("  long nc = ok ? (p + 1) / {}L : 0;", block);
    e.line("  if (nc > {}L) nc = {}L;", nb, nb);
    e.line("  float *score = (float *)ws + r * {}L;", nb);
  };

  // Pre-launch: block (row, y) scores blocks 32 y .. 32 y + 31 into the
  // workspace, a warp per block score with lanes over the key dim:
  // selectBlocksRow's score, the sum over heads of relu(q.k), / sqrt(di);
  // NaN ranks last (-inf).
  e.line("STRATA_KERNEL({}) void @SYMBOL@_prep({}) {{", kThreads, params);
  e.prologue();
  rowHead();
  e.line("  const long b0 = (long)bid_y() * {}L;", kScoresPerBlock);
  e.line("  if (b0 >= nc) return;");
  e.line("  STRATA_SHARED __attribute__((aligned(16))) float qs[{}];", hi * di);
  e.line("  for (long i = tid; i < {}L; i += {}) qs[i] = ld(in0, r * {}L + i);",
         hi * di, kThreads, hi * di);
  e.line("  sync_block();");
  e.line("  const float *kb = in1 + s * {}L;", nb * di);
  e.line("  for (int i0 = 0; i0 < {}; i0 += {}) {{", perWarp, kbat);
  e.line("    if (b0 + w * {}L + i0 >= nc) break;", perWarp);
  e.line("    float kv[{}][{}][{}];", kbat, nu, vk);
  e.line("#pragma unroll");
  e.line("    for (int i = 0; i < {}; ++i) {{", kbat);
  e.line("      const long b = b0 + w * {}L + i0 + i;", perWarp);
  e.line("#pragma unroll");
  e.line("      for (int u = 0; u < {}; ++u) {{", nu);
  e.line("        const long pc = u * 32L + lane;");
  if (vk == 4) {
    e.line("        if (b < nc && pc < {}L) ld4(kb + b * {}L, pc * 4, "
           "kv[i][u]);",
           np, di);
    e.line("        else kv[i][u][0] = kv[i][u][1] = kv[i][u][2] = kv[i][u][3] "
           "= 0.0f;");
  } else {
    e.line("        kv[i][u][0] = b < nc && pc < {}L ? kb[b * {}L + pc] : "
           "0.0f;",
           np, di);
  }
  e.line("      }}");
  e.line("    }}");
  e.line("#pragma unroll");
  e.line("    for (int i = 0; i < {}; ++i) {{", kbat);
  e.line("      const long b = b0 + w * {}L + i0 + i;", perWarp);
  e.line("      if (b >= nc) break;");
  e.line("      float sc = 0.0f;");
  e.line("      for (int h = 0; h < {}; ++h) {{", hi);
  e.line("        float dot = 0.0f;");
  e.line("#pragma unroll");
  e.line("        for (int u = 0; u < {}; ++u) {{", nu);
  e.line("          const long pc = u * 32L + lane;");
  e.line("          if (pc >= {}L) continue;", np);
  if (vk == 4) {
    e.line("          float qv[4];");
    e.line("          ld4(qs + h * {}L, pc * 4, qv);", di);
    e.line("          dot += qv[0] * kv[i][u][0] + qv[1] * kv[i][u][1] + qv[2] "
           "* kv[i][u][2] + qv[3] * kv[i][u][3];");
  } else {
    e.line("          dot += qs[h * {}L + pc] * kv[i][u][0];", di);
  }
  e.line("        }}");
  e.line("        dot = warp_sum(dot);");
  e.line("        sc += dot < 0.0f ? 0.0f : dot;");
  e.line("      }}");
  e.line("      sc *= {};", floatLit(inv));
  e.line("      if (lane == 0) score[b] = sc != sc ? -__builtin_inff() : sc;");
  e.line("    }}");
  e.line("  }}");
  e.line("}}");

  // The kernel: block (row, y) ranks candidates 32 y .. 32 y + 31 by
  // counting, 4 threads a candidate: rank b = the blocks with a greater
  // score or an equal one and a lower index (selectBlocksRow's order, a
  // strict total order); ranks below `top` are the chosen blocks in order.
  // Block 0 writes the tail: the block count, then -1.
  e.line("STRATA_KERNEL({}) void @SYMBOL@({}) {{", kThreads, params);
  e.prologue();
  rowHead();
  e.line("  (void)w;");
  e.line("  const long chosen = nc < {}L ? nc : {}L;", top, top);
  e.line("  int32_t *row = out0 + r * {}L;", top + 1);
  e.line("  if (bid_y() == 0)");
  e.line("    for (long k = chosen + tid; k <= {}L; k += {})", top, kThreads);
  e.line("      row[k] = k == chosen ? (int32_t)nc : -1;");
  e.line("  if ((long)bid_y() * {}L >= nc) return;", kRanksPerBlock);
  e.line("  const long b = (long)bid_y() * {}L + (tid >> 2);", kRanksPerBlock);
  e.line("  const int ph = tid & 3;");
  e.line("  const float sb = b < nc ? score[b] : 0.0f;");
  e.line("  STRATA_SHARED float tile[{}];", tile);
  e.line("  int rank = 0;");
  e.line("  for (long t0 = 0; t0 < nc; t0 += {}L) {{", tile);
  e.line("    const long nt = nc - t0 < {}L ? nc - t0 : {}L;", tile, tile);
  e.line("    sync_block();");
  e.line("    for (long i = tid; i < nt; i += {}) tile[i] = score[t0 + i];",
         kThreads);
  e.line("    sync_block();");
  e.line("    for (long i = ph; i < nt; i += 4) {{");
  e.line("      const float x = tile[i];");
  e.line("      rank += x > sb || (x == sb && t0 + i < b);");
  e.line("    }}");
  e.line("  }}");
  e.line("  rank += shfl_xor_i(rank, 1);");
  e.line("  rank += shfl_xor_i(rank, 2);");
  e.line("  if (ph == 0 && b < nc && rank < {}L) row[rank] = (int32_t)b;", top);
  e.line("}}");
  e.out.grid = {
      kRows,
      {0, std::max<int64_t>(1, (nb + kRanksPerBlock - 1) / kRanksPerBlock), 1},
      {0, 1, 1}};
  e.out.block = {kThreads, 1, 1};
  format::PlanPreLaunch pre;
  pre.grid = {
      kRows,
      {0, std::max<int64_t>(1, (nb + kScoresPerBlock - 1) / kScoresPerBlock),
       1},
      {0, 1, 1}};
  pre.block = {kThreads, 1, 1};
  e.out.pre = std::move(pre);
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
  begin(e, 32 * kSlices);
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
