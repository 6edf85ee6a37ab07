//===- QsaCached.cpp - QSA's cached kernels -------------------------------===//
//
// The qsa family's cached ops (CachedKernel.h): the compressed keys of the
// decode step's full blocks and the block selection over them. Checked
// against the CPU backend (strata-run --check).
//
//   block_mean_cached   one block per row: the mean of the block of keys the
//                       row completes (its first position beside it)
//   qsa_select_cached   the pre-launch, block (row, 32 blocks), scores a
//                       warp per block into the workspace; the kernel,
//                       block (row, 32 candidates), ranks them by counting
//                       (no sequential rounds over `top`)
//
//===----------------------------------------------------------------------===//
#include "codegen/CachedKernel.h"
#include "codegen/Limits.h"
#include "ir/Target.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace strata::codegen::detail {

using format::BodyOp;
using format::BodyRef;

void emitBlockMeanCached(Emitter &e, const BodyOp &op) {
  std::vector<int64_t> cs = stateDims(e, 0);
  int64_t block = e.intAttr(op, "block"), row = cs[2] * cs[3];
  beginCachedKernel(e, kCachedThreads);
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
  e.line("  for (long c = tid_x(); c < {}L; c += {}) {{", row, kCachedThreads);
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
  e.out.grid = {kCachedRows, {0, 1, 1}, {0, 1, 1}};
  e.out.block = {kCachedThreads, 1, 1};
}

namespace {

/// Block scores a qsa_select_cached pre-launch block computes (8 a warp)
/// and candidates a kernel block ranks (4 threads each).
constexpr int64_t kScoresPerBlock = 32, kRanksPerBlock = 32;
/// Scores the ranking stages in shared memory at once.
constexpr int64_t kRankTile = 2048;

} // namespace

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
  e.line("STRATA_KERNEL({}) void @SYMBOL@_prep({}) {{", kCachedThreads, params);
  e.prologue();
  rowHead();
  e.line("  const long b0 = (long)bid_y() * {}L;", kScoresPerBlock);
  e.line("  if (b0 >= nc) return;");
  e.line("  STRATA_SHARED __attribute__((aligned(16))) float qs[{}];", hi * di);
  e.line("  for (long i = tid; i < {}L; i += {}) qs[i] = ld(in0, r * {}L + i);",
         hi * di, kCachedThreads, hi * di);
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
  e.line("STRATA_KERNEL({}) void @SYMBOL@({}) {{", kCachedThreads, params);
  e.prologue();
  rowHead();
  e.line("  (void)w;");
  e.line("  const long chosen = nc < {}L ? nc : {}L;", top, top);
  e.line("  int32_t *row = out0 + r * {}L;", top + 1);
  e.line("  if (bid_y() == 0)");
  e.line("    for (long k = chosen + tid; k <= {}L; k += {})", top,
         kCachedThreads);
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
         kCachedThreads);
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
      kCachedRows,
      {0, std::max<int64_t>(1, (nb + kRanksPerBlock - 1) / kRanksPerBlock), 1},
      {0, 1, 1}};
  e.out.block = {kCachedThreads, 1, 1};
  format::PlanPreLaunch pre;
  pre.grid = {
      kCachedRows,
      {0, std::max<int64_t>(1, (nb + kScoresPerBlock - 1) / kScoresPerBlock),
       1},
      {0, 1, 1}};
  pre.block = {kCachedThreads, 1, 1};
  e.out.pre = std::move(pre);
  e.out.workspace = {nb * 4, 0, 1};
}

} // namespace strata::codegen::detail
