//===- GemmDecode.cpp - the GEMM chains' decode forms ---------------------===//
//
// The decode forms (GEMV) of the GEMM chains: runs of a few rows of T as
// warp dot products, each weight piece decoded once for every row, in the
// shape gemvShape selects (codegen/gemm/GemvForm.h); the f32 chains'
// row-block form; the stream-mean form (K3). The grouped experts' decode
// form (codegen/grouped/GroupedEmitter.cpp) uses the same pieces.
//
//===----------------------------------------------------------------------===//
#include "codegen/gemm/GemmEmitter.h"

#include "codegen/Limits.h"
#include "ir/Target.h"

#include "runtime/format/GgmlType.h"

#include <algorithm>
#include <bit>
#include <cassert>

namespace strata::codegen::detail::gemm {

GemmProblem GemmEmitter::gemmProblem(const std::vector<Chain> &chains,
                                     const std::vector<Gemm> &gemms,
                                     const std::vector<Tensor> &ys,
                                     bool probeTma) {
  GemmProblem p;
  p.target = e.target;
  p.state = !e.plan.states.empty();
  p.maxTokens = e.plan.maxTokens;
  for (size_t ci = 0; ci < gemms.size(); ++ci) {
    const Gemm &g = gemms[ci];
    GemmChainShape c;
    c.n = g.n;
    c.k = g.k;
    c.mPer = g.mPer;
    c.weights = static_cast<int>(g.w.size());
    c.quant = g.w[0].quant();
    c.blockSize = g.w[0].blockSize;
    c.f32Weights = g.w[0].ctype == "float";
    c.streamMean = chains[ci].streamMean != nullptr;
    c.skinny = g.skinny;
    c.bm = g.bm;
    c.bn = g.bn;
    // The dequantise-once form: as pickTma's quantised case, without the
    // tensor maps' conditions (the plain tile reads A and the workspace).
    const format::PlanDim &yd = ys[ci].shape[0];
    c.dequant = g.mma && !g.skinny && g.split == 1 && g.w.size() == 1 &&
                g.w[0].quant() && g.a.ctype == "bf16" && g.k % 8 == 0 &&
                !c.streamMean && yd.coef != 0 &&
                yd.at(kTmaMinTokens) * g.mPer >= kTmaMinTokens;
    if (probeTma) {
      Gemm probe = g;
      c.tma = pickTma(probe, chains[ci], ys[ci], tmaUse());
    }
    p.chains.push_back(c);
  }
  return p;
}

int64_t GemmEmitter::gemvCost(const Gemm &g) {
  int64_t cost = 0;
  for (const Tensor &w : g.w)
    cost += w.ggml == format::GgmlType::IQ3_S ? 2 : 1;
  return cost;
}

GemvForm GemmEmitter::gemvShape(const Gemm &g, int64_t columns, int64_t rows,
                                bool rowBlocks) const {
  GemvProblem p;
  p.rowBlocks = rowBlocks;
  p.columns = columns;
  p.k = g.k;
  p.rows = rows;
  p.cost = gemvCost(g);
  p.maxCols = option(e.plan, Opt::GemmDecodeCols);
  p.pieces = option(e.plan, Opt::GemmDecodePieces);
  return selectGemv(p);
}

void GemmEmitter::gemvRows(const Gemm &g, int64_t rows, bool hoist) {
  e.line("#pragma unroll");
  e.line("    for (int r = 0; r < {}; ++r) {{", rows);
  if (hoist) {
    // Rows past M repeat row M - 1 (their sums are never stored) instead of
    // leaving the loop: with no exit in the unrolled loop every row's loads
    // of A issue before the first FMA waits (ncu, 16-row step of the
    // 12-layer Qwen4-Exp: hc_down_inject stalled 29 cycles an instruction
    // on them, one load of A in flight a warp).
    e.line("      const long m = m0 + r < M ? m0 + r : M - 1;");
  } else {
    e.line("      if (m0 + r >= M) break;");
    e.line("      const long m = m0 + r;");
  }
  e.line("      {}", aRowOf(g));
  e.line("      float av[8];");
  e.line("      ld8(arow, k, av);");
}

void GemmEmitter::gemvClose() {
  e.line("}}");
  iq3sLds_ = true;
}

int64_t GemmEmitter::gemvChunk(const Gemm &g, GemvForm shape) {
  int64_t bytes = 0;
  for (const Tensor &w : g.w)
    bytes += pieceBytes(w) * shape.cols;
  return std::max<int64_t>(1, 4096 / bytes);
}

int64_t GemmEmitter::gemvStage(const Gemm &g, GemvForm shape) const {
  if (option(e.plan, Opt::GemmDecodeStage) == 0)
    return 0;
  for (const Tensor &w : g.w)
    if (!w.quant() || 256 % w.blockSize != 0)
      return 0;
  const int64_t pieces = (g.k + 255) / 256;
  const int64_t perSlice = (pieces + shape.slices - 1) / shape.slices;
  const int64_t q = std::min(gemvChunk(g, shape), perSlice);
  int64_t bytes = 0;
  for (const Tensor &w : g.w)
    bytes += stageSlot(q, w) * shape.cols;
  return bytes;
}

namespace {

/// Block types with an integer form (strata_di8_<type>).
bool hasIntForm(format::GgmlType t) {
  using format::GgmlType;
  return t == GgmlType::Q8_0 || t == GgmlType::Q4_K || t == GgmlType::Q5_K ||
         t == GgmlType::Q6_K || t == GgmlType::IQ4_NL ||
         t == GgmlType::IQ4_XS || t == GgmlType::IQ3_S;
}

/// Block types whose integer form has a min (d * q - dm).
bool hasMin(format::GgmlType t) {
  return t == format::GgmlType::Q4_K || t == format::GgmlType::Q5_K;
}

} // namespace

bool GemmEmitter::gemvInt8(const Gemm &g, int64_t rows) const {
  // auto: where the plan already stores activations in bf16 (int8 with a
  // scale per 8 values errs by up to max|a| / 254 a value, bf16 by up to
  // |a| / 512: the same order); the f32 policy keeps float activations.
  const int64_t mode = option(e.plan, Opt::GemmDecodeInt8);
  const bool on =
      mode == 1 || (mode == 0 && e.plan.options.count("bf16_activations"));
  if (!on || g.k % 8 != 0 || rows * g.k * 2 > int8ABytes())
    return false;
  return std::all_of(g.w.begin(), g.w.end(), [](const Tensor &w) {
    return w.quant() && hasIntForm(w.ggml);
  });
}

int64_t GemmEmitter::int8ABytes() {
  // red[2][kGemvWarps][32] floats and iq3s_lds[512] words (gemvOpen).
  return staticSharedBudget() - 2 * kGemvWarps * 32 * 4 - 512 * 4;
}

int64_t GemmEmitter::gemvInt8Words(const Gemm &g, int64_t rows) const {
  return gemvInt8(g, rows) ? rows * (g.k / 8) * 4 : 0;
}

bool GemmEmitter::gemvWide(const Gemm &g, int64_t rows) const {
  // 1: Q4_K chains; 2: Q6_K chains too. Every matrix of the chain of the
  // same type: the pieces of A a lane reads follow its type's layout.
  const int64_t mode = option(e.plan, Opt::GemmDecodeWide);
  const format::GgmlType t = g.w[0].ggml;
  const bool typed =
      t == format::GgmlType::Q4_K || (mode >= 2 && t == format::GgmlType::Q6_K);
  return mode != 0 && typed && gemvInt8(g, rows) && g.k % 256 == 0 &&
         std::all_of(g.w.begin(), g.w.end(),
                     [&](const Tensor &w) { return w.ggml == t; });
}

bool GemmEmitter::prefetchEarly() const {
  return e.target == "sm_90" && option(e.plan, Opt::GemmDecodePrefetch) != 0 &&
         option(e.plan, Opt::GemmDecodePrefetchEarly) != 0;
}

void GemmEmitter::gemvEntry(bool iq3s, const std::string &sym,
                            bool gridBarrier) {
  // At least two blocks an SM: registers capped at 128 (the unrolled pieces
  // of gate and up took 182, one block an SM).
  e.line("STRATA_KERNEL_MIN({}, {}) void {}({}) {{", kGemvWarps * 32,
         minBlocks_ > 0 ? minBlocks_ : option(e.plan, Opt::GemmDecodeBlocks),
         sym, e.params());
  e.prologue();
  // IQ3_S's grid in LDS: a warp's 32 random lookups in the global table
  // touch up to 16 L1 lines each (the grouped gate/up ran at 250 GB/s so).
  iq3sLds_ = iq3s;
  if (iq3s) {
    e.line("  STRATA_SHARED uint32_t iq3s_lds[512];");
    e.line("  for (int i = tid_x(); i < 512; i += {}) iq3s_lds[i] = "
           "strata_iq3s_grid[i];",
           kGemvWarps * 32);
    if (gridBarrier)
      e.line("  sync_block();");
  }
  e.line("  const int wave = tid_x() >> 5, lane = lane_id();");
}

void GemmEmitter::gemvOpen(bool iq3s, const std::string &sym,
                           int64_t stageBytes, int64_t aq8Words, bool wide,
                           bool gridBarrier) {
  gemvEntry(iq3s, sym, gridBarrier);
  e.line("  STRATA_SHARED float red[2][{}][32];", kGemvWarps);
  if (stageBytes > 0)
    e.line("  STRATA_SHARED __attribute__((aligned(16))) uint8_t "
           "wstage[{}][{}];",
           kGemvWarps, stageBytes);
  // A's int8 rows as three arrays a piece of 8 apart (the two words, the
  // scale, the scaled sum): a lane's 8-byte and 4-byte reads at
  // consecutive pieces hit distinct banks (one 16-byte record a piece
  // read as scalars conflicted four ways).
  if (aq8Words > 0) {
    // Two-word vectors: a 64-bit scalar load whose halves are used apart
    // is split into two 32-bit loads (conflicting two ways).
    e.line("  typedef uint32_t aq8_t __attribute__((ext_vector_type(2)));");
    if (wide) {
      // The wide pieces read two pieces' words (16 bytes) and scales (8)
      // at once, at even pieces.
      e.line("  typedef uint32_t aq16_t __attribute__((ext_vector_type(4)));");
      e.line("  typedef float aqf2_t __attribute__((ext_vector_type(2)));");
      e.line("  STRATA_SHARED __attribute__((aligned(16))) aq8_t aq8[{}];",
             aq8Words / 4);
      e.line("  STRATA_SHARED __attribute__((aligned(16))) float aqs[{}], "
             "aqt[{}];",
             aq8Words / 4, aq8Words / 4);
    } else {
      e.line("  STRATA_SHARED aq8_t aq8[{}];", aq8Words / 4);
      e.line("  STRATA_SHARED float aqs[{}], aqt[{}];", aq8Words / 4,
             aq8Words / 4);
    }
  }
}

void GemmEmitter::gemvColumnRows(const Gemm &g, int cols, const std::string &at,
                                 const std::string &prefix,
                                 const char *indent) {
  // The first column of a group (C expression \p at), the rows of its
  // columns (a column past N, the last group's, reads column 0 and stores
  // nothing) as prefix{b}_{c}.
  for (size_t b = 0; b < g.w.size(); ++b) {
    const Tensor &w = g.w[b];
    const int64_t rowBytes = w.quant() ? g.k / w.blockSize * w.blockBytes : g.k;
    for (int c = 0; c < cols; ++c)
      e.line("{}const {} *{}{}_{} = {} + ({} + ({} + {} < {}L ? {} + {} : "
             "0L)) * {}L;",
             indent, w.quant() ? "uint8_t" : w.ctype, prefix, b, c, w.ptr,
             rowBase_, at, c, g.n, at, c, rowBytes);
  }
}

void GemmEmitter::gemvPrefetchRows(const Gemm &g, int slices, int cols,
                                   const std::string &prefix,
                                   const char *indent) {
  for (size_t b = 0; b < g.w.size(); ++b) {
    const Tensor &w = g.w[b];
    const int64_t rowBytes = w.quant() ? g.k / w.blockSize * w.blockBytes
                                       : g.k * (w.ctype == "float" ? 4 : 2);
    for (int c = 0; c < cols; ++c)
      e.line("{}for (long o = (slice * 32L + lane) * 128L; o < {}L; o += "
             "{}L) asm volatile(\"prefetch.global.L2 [%0];\" :: "
             "\"l\"((const uint8_t *){}{}_{} + o));",
             indent, rowBytes, int64_t(slices) * 32 * 128, prefix, b, c);
  }
}

void GemmEmitter::gemvBody(const Gemm &g, int64_t rows, GemvForm shape,
                           const std::string &first, const std::string &end) {
  const size_t nb = g.w.size();
  const int slices = shape.slices, cols = shape.cols;
  // Warps in groups of `slices` per `cols` columns; slice j takes the
  // 256-element pieces j, j + slices, ... of K.
  e.line("  const int slice = wave % {}, group = wave / {};", slices, slices);
  // A decode run's rows (from 0): their loads of A all issued at once.
  const bool hoist = first == "0L";
  // gemm-decode-prefetch (sm_90): the warps of a column group ask L2 for
  // its rows' lines (128 bytes a thread) before A's quantisation and its
  // barriers, so that the first pieces' loads find them on chip.
  const bool prefetch =
      e.target == "sm_90" && option(e.plan, Opt::GemmDecodePrefetch) != 0;
  const int64_t groupCols = kGemvWarps / slices;
  const bool loop = colLoop_.groups > 0;
  if (!loop) {
    e.line("  const long n0 = ((long)(bid_x() - base) * {} + group) * {};",
           groupCols, cols);
    e.line("  const bool live = n0 < {}L;", g.n);
    gemvColumnRows(g, cols, "n0", "wrow", "  ");
    if (prefetch) {
      e.line("  if (live) {{");
      gemvPrefetchRows(g, slices, cols, "wrow", "    ");
      e.line("  }}");
    }
    if (earlyWait_)
      e.line("  grid_dependency_wait();");
  } else if (prefetch) {
    // The block's first column group before A's quantisation, as above.
    e.line("  {{");
    e.line("  const long p0 = ((long)(bid_x() - base) * {} + group) * {};",
           groupCols, cols);
    gemvColumnRows(g, cols, "p0", "prow", "  ");
    e.line("  if (p0 < {}L) {{", g.n);
    gemvPrefetchRows(g, slices, cols, "prow", "    ");
    e.line("  }}");
    e.line("  }}");
    if (earlyWait_)
      e.line("  grid_dependency_wait();");
  }
  e.line("  const long M = {};", end);
  // Rows in passes of `rows` (one pass for a decode run); the block agrees
  // on every bound, so its barriers are uniform.
  e.line("  for (long m0 = {}; m0 < M; m0 += {}) {{", first, rows);
  const bool i8 = gemvInt8(g, rows);
  noteGemvInput(g, i8);
  if (i8)
    gemvQuantA(g, rows);
  if (loop) {
    // gemm-decode-grid: the block's warps take column groups bid, bid +
    // blocks, ... (a bound uniform in the block: the slices' barriers
    // stay uniform), A quantised once for all of them.
    e.line("  for (long cg = (long)(bid_x() - base); cg < {}L; cg += {}L) {{",
           colLoop_.groups, colLoop_.stride);
    e.line("  const long n0 = (cg * {} + group) * {};", groupCols, cols);
    e.line("  const bool live = n0 < {}L;", g.n);
    gemvColumnRows(g, cols, "n0", "wrow", "  ");
    if (prefetch) {
      // The warp's next group asked of L2 while this one's pieces load.
      e.line("  {{");
      e.line("  const long p0 = n0 + {}L;", colLoop_.stride * groupCols * cols);
      gemvColumnRows(g, cols, "p0", "prow", "  ");
      e.line("  if (p0 < {}L) {{", g.n);
      gemvPrefetchRows(g, slices, cols, "prow", "    ");
      e.line("  }}");
      e.line("  }}");
    }
  }
  for (size_t b = 0; b < nb; ++b)
    e.line("  float acc{}[{}][{}] = {{}};", b, cols, rows);
  e.line("  if (live) {{");
  // One piece: every column's weights decoded, then each row of A loaded
  // once for all of them.
  auto piece = [&](const std::string &k, const std::string &from) {
    e.line("    const long k = {};", k);
    for (size_t b = 0; b < nb; ++b)
      e.line("    float w{}[{}][8];", b, cols);
    for (int c = 0; c < cols; ++c)
      for (size_t b = 0; b < nb; ++b)
        decodeW(g.w[b], fmt::format("{}{}_{}", from, b, c), "k",
                fmt::format("w{}[{}]", b, c));
    gemvRows(g, rows, hoist);
    e.line("#pragma unroll");
    e.line("      for (int c = 0; c < {}; ++c)", cols);
    e.line("#pragma unroll");
    e.line("      for (int u = 0; u < 8; ++u) {{");
    for (size_t b = 0; b < nb; ++b)
      e.line("        acc{}[c][r] += av[u] * w{}[c][u];", b, b);
    e.line("      }}");
    e.line("    }}");
  };
  // The integer form: each column's piece as int8 bytes and scales, each
  // row's from A's shared copy (two words of int8, its scale and scaled
  // sum), two dp4a and a multiply-add a (column, row).
  auto piece8 = [&](const std::string &k, const std::string &from) {
    bool anyMin = false;
    e.line("    const long k = {};", k);
    for (size_t b = 0; b < nb; ++b) {
      e.line("    uint32_t wq{}[{}][2]; float wd{}[{}], wm{}[{}];", b, cols, b,
             cols, b, cols);
      anyMin = anyMin || hasMin(g.w[b].ggml);
    }
    for (int c = 0; c < cols; ++c)
      for (size_t b = 0; b < nb; ++b) {
        const Tensor &w = g.w[b];
        const bool lds = w.ggml == format::GgmlType::IQ3_S && iq3sLds_;
        e.line("        strata_di8_{}{}({}{}_{} + k / {} * {}, (int)(k % {}), "
               "wq{}[{}], &wd{}[{}], &wm{}[{}]{});",
               format::ggmlTypeInfo(w.ggml).irName, lds ? "_grid" : "", from, b,
               c, w.blockSize, w.blockBytes, w.blockSize, b, c, b, c, b, c,
               lds ? ", iq3s_lds" : "");
      }
    e.line("#pragma unroll");
    e.line("    for (int r = 0; r < {}; ++r) {{", rows);
    e.line("      if (m0 + r >= M) break;");
    e.line("      const long ap = r * {}L + k / 8;", g.k / 8);
    e.line("      const aq8_t a8 = aq8[ap];");
    e.line("      const uint32_t ax = a8.x, ay = a8.y;");
    e.line("      const float as = aqs[ap];");
    if (anyMin)
      e.line("      const float at = aqt[ap];");
    e.line("#pragma unroll");
    e.line("      for (int c = 0; c < {}; ++c) {{", cols);
    for (size_t b = 0; b < nb; ++b) {
      e.line("        acc{}[c][r] += (wd{}[c] * as) * (float)strata_dp4a(wq{}"
             "[c][1], ay, strata_dp4a(wq{}[c][0], ax, 0));",
             b, b, b, b);
      if (hasMin(g.w[b].ggml))
        e.line("        acc{}[c][r] -= wm{}[c] * at;", b, b);
    }
    e.line("      }}");
    e.line("    }}");
  };
  // The wide pieces (gemm-decode-wide): a lane's 32 values of one
  // super-block, two halves of 16 from the same quant bytes (Q4_K: sub-blocks
  // 2 g and 2 g + 1, 32 values apart, strata_di8w_q4_k; Q6_K: 64 apart,
  // strata_di8w_q6_k), each row's four pieces of A (8 values, a scale and
  // a scaled sum each) read two at a time; the products and their scales
  // are the eight-value form's.
  auto pieceWide = [&](const std::string &k, const std::string &from) {
    const bool q6 = g.w[0].ggml == format::GgmlType::Q6_K;
    // A's pieces of the high half: 32 (Q4_K) or 64 (Q6_K) values on.
    const int hiPieces = q6 ? 8 : 4;
    e.line("    const long k = {};", k);
    for (size_t b = 0; b < nb; ++b)
      e.line("    uint32_t wl{}[{}][4], wh{}[{}][4]; float wd{}[{}][2], "
             "wm{}[{}][2];",
             b, cols, b, cols, b, cols, b, cols);
    for (int c = 0; c < cols; ++c)
      for (size_t b = 0; b < nb; ++b)
        e.line("    strata_di8w_{}({}{}_{} + k / 256 * {}, (int)(k % 256), "
               "wl{}[{}], wh{}[{}], wd{}[{}], wm{}[{}]);",
               q6 ? "q6_k" : "q4_k", from, b, c, g.w[b].blockBytes, b, c, b, c,
               b, c, b, c);
    e.line("#pragma unroll");
    e.line("    for (int r = 0; r < {}; ++r) {{", rows);
    e.line("      if (m0 + r >= M) break;");
    e.line("      const long ap = r * {}L + k / 8;", g.k / 8);
    e.line("      const aq16_t alo = *(const aq16_t *)&aq8[ap], ahi = "
           "*(const aq16_t *)&aq8[ap + {}];",
           hiPieces);
    e.line("      const aqf2_t slo = *(const aqf2_t *)&aqs[ap], shi = "
           "*(const aqf2_t *)&aqs[ap + {}];",
           hiPieces);
    if (!q6)
      e.line("      const aqf2_t tlo = *(const aqf2_t *)&aqt[ap], thi = "
             "*(const aqf2_t *)&aqt[ap + 4];");
    e.line("#pragma unroll");
    e.line("      for (int c = 0; c < {}; ++c) {{", cols);
    // Piece p of the four: half p / 2 (lo, hi), words 2 (p % 2) on.
    struct WidePiece {
      const char *words; ///< the quant words' array (wl: lo, wh: hi)
      int word;          ///< its first word of the piece
      const char *a0, *a1, *scale, *min; ///< A's words, scale, scaled sum
    };
    static const WidePiece kPieces[4] = {
        {"wl", 0, "alo.x", "alo.y", "slo.x", "tlo.x"},
        {"wl", 2, "alo.z", "alo.w", "slo.y", "tlo.y"},
        {"wh", 0, "ahi.x", "ahi.y", "shi.x", "thi.x"},
        {"wh", 2, "ahi.z", "ahi.w", "shi.y", "thi.y"}};
    for (size_t b = 0; b < nb; ++b)
      for (int p = 0; p < 4; ++p) {
        const WidePiece &q = kPieces[p];
        const int sub = p / 2;
        e.line("        acc{}[c][r] += (wd{}[c][{}] * {}) * "
               "(float)strata_dp4a({}{}[c][{}], {}, strata_dp4a({}{}[c][{}], "
               "{}, 0));",
               b, b, sub, q.scale, q.words, b, q.word + 1, q.a1, q.words, b,
               q.word, q.a0);
        if (!q6)
          e.line("        acc{}[c][r] -= wm{}[c][{}] * {};", b, b, sub, q.min);
      }
    e.line("      }}");
    e.line("    }}");
  };
  const bool wide =
      i8 && (rowBase_ == "0L" || groupedWide_) && gemvWide(g, rows);
  // Staged (gemm-decode-stage=1) or decoded where the bytes lie: measured
  // on the H200 (bench/results/gemv-stage-20261203.txt) the copy's wide
  // loads did not pay: the decode forms are bound by the decode's
  // instructions, not by loads in flight.
  const int64_t stage = gemvStage(g, shape);
  std::function<void(const std::string &, const std::string &)> form;
  if (i8)
    form = piece8;
  else
    form = piece;
  if (wide && stage == 0) {
    gemvDirectWide(g, shape, pieceWide);
  } else if (stage > 0) {
    gemvStaged(g, rows, shape, form);
  } else {
    // The float form of several rows a turn at a time: the turn's loads of
    // A (a row each) are the loads in flight; unrolled turns would hold
    // theirs too, past the registers.
    GemvForm turn = shape;
    if (!i8 && hoist && rows > 1)
      turn.unroll = 1;
    gemvDirect(g, turn, form);
  }
  e.line("  }}");
  gemvReduce(g, rows, shape);
  if (loop)
    e.line("  }}"); // the passes of rows (gemvReduce closed the groups')
}

void GemmEmitter::noteGemvInput(const Gemm &g, bool int8) {
  // Only a kernel input is a buffer --check can round; an operand reached
  // otherwise (a temporary) is left out.
  if (g.a.input < 0)
    return;
  (int8 ? e.out.int8Inputs : e.out.floatGemvInputs)
      .push_back(static_cast<uint32_t>(g.a.input));
}

void GemmEmitter::gemvQuantA(const Gemm &g, int64_t rows) {
  e.int8Decode = true;
  // The pass's rows of A, quantised once by the whole block into aq8 (a
  // barrier first: the previous pass's warps may still read it).
  e.line("  sync_block();");
  e.line("  for (int r = 0; r < {}; ++r) {{", rows);
  e.line("    if (m0 + r >= M) break;");
  e.line("    const long m = m0 + r;");
  e.line("    {}", aRowOf(g));
  e.line("    for (long k = tid_x() * 8L; k < {}L; k += {}L) {{", g.k,
         kGemvWarps * 32 * 8);
  e.line("      float av[8];");
  e.line("      ld8(arow, k, av);");
  e.line("      uint32_t q[2];");
  e.line("      float s;");
  e.line("      int t;");
  e.line("      strata_qa8(av, q, &s, &t);");
  e.line("      const long ap = r * {}L + k / 8;", g.k / 8);
  e.line("      aq8[ap] = (aq8_t){{q[0], q[1]}};");
  e.line("      aqs[ap] = s;");
  e.line("      aqt[ap] = s * (float)t;");
  e.line("    }}");
  e.line("  }}");
  e.line("  sync_block();");
}

void GemmEmitter::gemvStaged(
    const Gemm &g, int64_t rows, GemvForm shape,
    const std::function<void(const std::string &, const std::string &)>
        &piece) {
  (void)rows;
  const size_t nb = g.w.size();
  const int cols = shape.cols;
  // Slice j takes the contiguous pieces [j P, (j + 1) P) of K, in chunks
  // of Q pieces: the warp copies a chunk of each column (16 bytes a lane,
  // all in flight), then decodes it from shared memory.
  const int64_t pieces = (g.k + 255) / 256;
  const int64_t perSlice = (pieces + shape.slices - 1) / shape.slices;
  const int64_t q = std::min(gemvChunk(g, shape), perSlice);
  e.line("  const long kBeg = slice * {}L, kEnd = kBeg + {}L < {}L ? kBeg + "
         "{}L : {}L;",
         perSlice * 256, perSlice * 256, g.k, perSlice * 256, g.k);
  e.line("  for (long kc = kBeg; kc < kEnd; kc += {}L) {{", q * 256);
  e.line("    const long kce = kc + {}L < kEnd ? kc + {}L : kEnd;", q * 256,
         q * 256);
  int64_t at = 0;
  for (size_t b = 0; b < nb; ++b) {
    const Tensor &w = g.w[b];
    for (int c = 0; c < cols; ++c) {
      // Byte b of the row lands at wl + b: the chunk's first byte at its
      // buffer's start plus its address modulo 16.
      e.line("    const uint8_t *src{}_{} = wrow{}_{} + kc / {} * {};", b, c, b,
             c, w.blockSize, w.blockBytes);
      e.line("    uint8_t *dst{}_{} = wstage[wave] + {} + "
             "(int)((uint64_t)src{}_{} & 15);",
             b, c, at, b, c);
      e.line("    wave_copy_bytes(dst{}_{}, src{}_{}, (kce - kc) / {} * {}, "
             "lane);",
             b, c, b, c, w.blockSize, w.blockBytes);
      e.line("    const uint8_t *wl{}_{} = dst{}_{} - kc / {} * {};", b, c, b,
             c, w.blockSize, w.blockBytes);
      at += stageSlot(q, w);
    }
  }
  e.line("    cp_async_commit();");
  e.line("    cp_async_wait_all();");
  e.line("    sync_wave();");
  e.line("#pragma unroll {}", std::min<int64_t>(q, shape.unroll));
  e.line("    for (int it = 0; it < {}; ++it) {{", q);
  e.line("      if (kc + it * 256L + lane * 8L >= kce) break;");
  piece("kc + it * 256L + lane * 8L", "wl");
  e.line("    }}");
  // The chunk's bytes are read before the next chunk's copy overwrites
  // them.
  e.line("    sync_wave();");
  e.line("  }}");
}

void GemmEmitter::gemvDirect(
    const Gemm &g, GemvForm shape,
    const std::function<void(const std::string &, const std::string &)>
        &piece) {
  // The whole pieces in a loop of a fixed count without a bound check, so
  // that the unrolled pieces' loads are all issued before the first one's
  // FMAs wait; a last partial piece checks its bound.
  const int64_t span = 256 * int64_t(shape.slices);
  gemvLoop(g, span, std::min<int64_t>(g.k / span, shape.unroll),
           "(slice * 32L + lane) * 8L", piece);
}

void GemmEmitter::gemvDirectWide(
    const Gemm &g, GemvForm shape,
    const std::function<void(const std::string &, const std::string &)>
        &piece) {
  // As gemvDirect, in steps of 1024 values a warp (four super-blocks, eight
  // lanes each); a last partial step checks the lane's super-block. A
  // lane's first value in its super-block: Q4_K 64 g + 16 h (g < 4, h < 2:
  // its halves 32 apart), Q6_K 128 h + 32 p + 16 l (h, p, l < 2: 64 apart).
  const int64_t span = 1024 * int64_t(shape.slices);
  const bool q6 = g.w[0].ggml == format::GgmlType::Q6_K;
  gemvLoop(g, span, std::clamp<int64_t>(shape.unroll / 2, 1, g.k / span),
           q6 ? "(slice * 1024L + (lane >> 3) * 256L + ((lane >> 2) & 1) * "
                "128L + ((lane >> 1) & 1) * 32L + (lane & 1) * 16L)"
              : "(slice * 1024L + (lane >> 3) * 256L + ((lane & 7) >> 1) * "
                "64L + (lane & 1) * 16L)",
           piece);
}

void GemmEmitter::gemvLoop(
    const Gemm &g, int64_t span, int64_t unroll, const std::string &lanePos,
    const std::function<void(const std::string &, const std::string &)>
        &piece) {
  const int64_t whole = g.k / span;
  if (whole > 0) {
    e.line("#pragma unroll {}", unroll);
    e.line("  for (int it = 0; it < {}; ++it) {{", whole);
    piece(fmt::format("{} + it * {}L", lanePos, span), "wrow");
    e.line("  }}");
  }
  if (g.k % span != 0) {
    e.line("  if ({} + {}L < {}L) {{", lanePos, whole * span, g.k);
    piece(fmt::format("{} + {}L", lanePos, whole * span), "wrow");
    e.line("  }}");
  }
}

void GemmEmitter::gemvReduce(const Gemm &g, int64_t rows, GemvForm shape) {
  const size_t nb = g.w.size();
  const int slices = shape.slices, cols = shape.cols;
  // Sum over the warp; lane c * rows + r then holds (column c, row r):
  // the cols x rows sums in one warp_sum_many (acc's order is that index),
  // padded to a power of two.
  const int64_t n = int64_t(cols) * rows;
  assert(n <= 32 && "a lane a (column, row): selectGemv keeps cols x rows "
                    "within the warp");
  e.line("  float mine[{}];", nb);
  for (size_t b = 0; b < nb; ++b) {
    e.line("  {{");
    warpSumMany(fmt::format("acc{}[i / {}][i % {}]", b, rows, rows), n);
    e.line("  mine[{}] = t[0];", b);
    e.line("  }}");
  }
  const std::string at = fmt::format("lane < {}", rows * cols);
  if (slices > 1) {
    // Each slice hands its sums to the group's slice 0, which adds the
    // slices in order (deterministic).
    e.line("  if ({}) {{", at);
    for (size_t b = 0; b < nb; ++b)
      e.line("    red[{}][wave][lane] = mine[{}];", b, b);
    e.line("  }}");
    e.line("  sync_block();");
  }
  e.line("  if (live && slice == 0 && {} && m0 + lane % {} < M && n0 + lane / "
         "{} < {}L) {{",
         at, rows, rows, g.n);
  e.line("    const long m = m0 + lane % {}, n = n0 + lane / {};", rows, rows);
  if (slices > 1) {
    e.line("    float v = 0.0f{};", nb > 1 ? ", v2 = 0.0f" : "");
    e.line("    for (int j = 0; j < {}; ++j) {{", slices);
    e.line("      v += red[0][wave + j][lane];");
    if (nb > 1)
      e.line("      v2 += red[1][wave + j][lane];");
    e.line("    }}");
  } else {
    e.line("    const float v = mine[0]{};", nb > 1 ? ", v2 = mine[1]" : "");
  }
  for (const std::string &l : g.epilogue)
    e.line("    {}", l);
  e.line("  }}");
  if (slices > 1)
    e.line("  sync_block();");
  e.line("  }}");
}

void GemmEmitter::gemvStreamBody(const Gemm &g, const Chain &c, int64_t rows) {
  noteGemvInput(g, false);
  Tensor xn = e.tensor(c.streamMean->inputs[0]);
  Tensor y = e.tensor(c.streamMean->outputs[0]);
  const int64_t ns = xn.shape[1].constant, d = xn.shape[2].constant;
  const Tensor &w = g.w[0];
  // Several rows a pass: the block's warps (columns) share the pass's rows
  // of A, copied once into shared memory where they fit (the loads of A
  // from L2, one row at a time a warp, stalled hc_up_mix's 16-row form:
  // ncu, 7.3 cycles an instruction on them).
  if (earlyWait_)
    e.line("  grid_dependency_wait();");
  const int64_t aSize = g.a.ctype == "float" ? 4 : 2;
  const bool staged =
      rows > 1 && g.k % 8 == 0 && rows * g.k * aSize <= kGemvStageA;
  e.line("  const long dc = (long)(bid_x() - base) * {} + wave;", kGemvWarps);
  if (staged) {
    // The block stays whole for its barriers: a warp past D reads column
    // D - 1 and stores nothing.
    e.line("  const bool live = dc < {}L;", d);
    e.line("  const long dw = live ? dc : {}L;", d - 1);
    e.line("  STRATA_SHARED __attribute__((aligned(16))) {} as[{}];", g.a.ctype,
           rows * g.k);
    e.line("  typedef uint32_t as16_t __attribute__((ext_vector_type(4)));");
  } else {
    e.line("  if (dc >= {}L) return;", d);
    e.line("  const bool live = true;");
    e.line("  const long dw = dc;");
  }
  e.line("  const long M = {};", g.mRows);
  for (int64_t st = 0; st < ns; ++st)
    e.line("  const {} *wrow{} = {} + ({}L + dw) * {}L;", w.ctype, st, w.ptr,
           st * d, g.k);
  e.line("  for (long m0 = 0; m0 < M; m0 += {}) {{", rows);
  if (staged) {
    // 16 bytes a thread a turn; rows past M repeat row M - 1.
    const int64_t per = 16 / aSize;
    e.line("  sync_block();");
    e.line("  for (long q = tid_x() * {}L; q < {}L; q += {}L) {{", per,
           rows * g.k, kGemvWarps * 32 * per);
    e.line("    const long m = m0 + q / {}L < M ? m0 + q / {}L : M - 1;", g.k,
           g.k);
    e.line("    {}", aRowOf(g));
    e.line("    *(as16_t *)&as[q] = *(const as16_t *)&arow[q % {}L];", g.k);
    e.line("  }}");
    e.line("  sync_block();");
  }
  e.line("  float acc[{}][{}] = {{}};", ns, rows);
  const int64_t pieces = (g.k + 255) / 256;
  e.line("#pragma unroll");
  e.line("  for (int it = 0; it < {}; ++it) {{", pieces);
  e.line("    const long k = lane * 8L + it * 256L;");
  e.line("    if (k >= {}L) break;", g.k);
  e.line("    float wv[{}][8];", ns);
  for (int64_t st = 0; st < ns; ++st)
    decodeW(w, fmt::format("wrow{}", st), "k", fmt::format("wv[{}]", st));
  if (staged) {
    e.line("#pragma unroll");
    e.line("    for (int r = 0; r < {}; ++r) {{", rows);
    // Rows past M skipped, not an exit: gfx1151's unroller leaves a loop
    // with exits rolled (acc then in scratch); nor repeated, as the global
    // form's are: all rows' reads of shared memory at once took 225
    // registers there and spilled on sm_90.
    e.line("      if (m0 + r >= M) continue;");
    e.line("      const {} *arow = as + r * {}L;", g.a.ctype, g.k);
    e.line("      float av[8];");
    e.line("      ld8(arow, k, av);");
  } else {
    gemvRows(g, rows, false);
  }
  e.line("#pragma unroll");
  e.line("      for (int s = 0; s < {}; ++s)", ns);
  e.line("#pragma unroll");
  e.line("        for (int u = 0; u < 8; ++u) acc[s][r] += av[u] * wv[s][u];");
  e.line("    }}");
  e.line("  }}");
  if (std::has_single_bit(uint64_t(ns))) {
    gemvStreamReduce(g, c, rows);
    e.line("  }}");
    return;
  }
  e.line("#pragma unroll");
  e.line("  for (int s = 0; s < {}; ++s)", ns);
  e.line("#pragma unroll");
  e.line("    for (int r = 0; r < {}; ++r) acc[s][r] = warp_sum(acc[s][r]);",
         rows);
  // Lane m - m0: each stream's gate (the chain's epilogue at column s D +
  // dc) times the image, averaged over the streams as streamReduce does.
  e.line("  if (live && lane < {} && m0 + lane < M) {{", rows);
  e.line("    const long m = m0 + lane;");
  e.line("    float a = 0;");
  e.line("#pragma unroll");
  e.line("    for (int s = 0; s < {}; ++s) {{", ns);
  e.line("      float v = acc[s][0];");
  e.line("#pragma unroll");
  e.line("      for (int r = 1; r < {}; ++r) v = lane == r ? acc[s][r] : v;",
         rows);
  e.line("      const long n = s * {}L + dc;", d);
  // The epilogue without its last line (the tiles' store of the gate into
  // Cs).
  for (size_t l = 0; l + 1 < g.epilogue.size(); ++l)
    e.line("      {}", g.epilogue[l]);
  e.line("      a += {} * ld({}, {});", c.gateVar, xn.ptr,
         elementIndex(xn, xn.shape, "row", "i"));
  e.line("    }}");
  e.line("    st({}, m * {}L + dc, a / {}.0f);", y.ptr, d, ns);
  e.line("  }}");
  e.line("  }}");
}

void GemmEmitter::warpSumMany(const std::string &value, int64_t n) {
  const int64_t p2 = std::bit_ceil(uint64_t(n));
  e.line("  float t[{}];", p2);
  e.line("#pragma unroll");
  e.line("  for (int i = 0; i < {}; ++i) t[i] = {};", n, value);
  if (p2 > n)
    e.line("  for (int i = {}; i < {}; ++i) t[i] = 0.0f;", n, p2);
  e.line("  warp_sum_many<{}>(t);", p2);
}

void GemmEmitter::gemvStreamReduce(const Gemm &g, const Chain &c,
                                   int64_t rows) {
  Tensor xn = e.tensor(c.streamMean->inputs[0]);
  Tensor y = e.tensor(c.streamMean->outputs[0]);
  const int64_t ns = xn.shape[1].constant, d = xn.shape[2].constant;
  // The ns x rows sums in one warp_sum_many, index r ns + s, padded to a
  // power of two P: lane l < min(P, 32) holds V = max(P / 32, 1) of them,
  // l V + j, so G = ns / V lanes hold a row (l / G), streams (l % G) V + j.
  // Each lane takes its sums' gates (the chain's epilogue at column s D +
  // dc); lane G r gathers the row's ns gates and averages gate x image over
  // the streams in order, as streamReduce does: each sum and the average
  // bit for bit those of a warp_sum a (stream, row).
  const int64_t n = ns * rows, p2 = std::bit_ceil(uint64_t(n));
  const int64_t lanes = std::min<int64_t>(p2, 32), v = p2 / lanes, gr = ns / v;
  warpSumMany(fmt::format("acc[i % {}][i / {}]", ns, ns), n);
  e.line("  const int lr = lane % {};", lanes);
  e.line("  const long r = lr / {};", gr);
  e.line("  const long m = m0 + r < M ? m0 + r : M - 1;");
  e.line("  float gate[{}];", v);
  e.line("#pragma unroll");
  e.line("  for (int j = 0; j < {}; ++j) {{", v);
  e.line("    const float v = t[j];");
  e.line("    const long n = ((lr % {}) * {} + j) * {}L + dc;", gr, v, d);
  // The epilogue without its last line (the tiles' store of the gate into
  // Cs).
  for (size_t l = 0; l + 1 < g.epilogue.size(); ++l)
    e.line("    {}", g.epilogue[l]);
  e.line("    gate[j] = {};", c.gateVar);
  e.line("  }}");
  e.line("  float gs[{}];", ns);
  e.line("#pragma unroll");
  e.line("  for (int s = 0; s < {}; ++s) gs[s] = shfl_f(gate[s % {}], lane - "
         "lane % {} + s / {});",
         ns, v, gr, v);
  e.line("  if (live && lane < {} && lane % {} == 0 && r < {} && m0 + r < M) "
         "{{",
         lanes, gr, rows);
  e.line("    float a = 0;");
  e.line("#pragma unroll");
  e.line("    for (int s = 0; s < {}; ++s) {{", ns);
  e.line("      const long row = m, i = s * {}L + dc; (void)row;", d);
  e.line("      a += gs[s] * ld({}, {});", xn.ptr,
         elementIndex(xn, xn.shape, "row", "i"));
  e.line("    }}");
  e.line("    st({}, m * {}L + dc, a / {}.0f);", y.ptr, d, ns);
  e.line("  }}");
}

EmittedKernel GemmEmitter::gemvForms(
    int64_t rows,
    const std::function<void(int64_t, const std::string &)> &emit) {
  emit(1, "@SYMBOL@");
  EmittedKernel own = std::move(e.out);
  e.out = EmittedKernel{};
  // Row capacities 8, 16, 32 (a form of capacity c runs c / 2 + 1 .. c
  // rows, the first from two): a step of 4 rows does not carry the
  // accumulators of 16 (the 16-row form at 4 rows cost the 12-layer
  // Qwen4-Exp's step 3-5 % on the H100).
  const int64_t upTo = std::min<int64_t>(rows, e.plan.maxTokens);
  for (int64_t from = 2, cap = 8; from <= upTo; from = cap + 1, cap *= 2) {
    const int64_t c = std::min(cap, upTo);
    const std::string suffix =
        from == 2 ? std::string("_rows") : fmt::format("_rows{}", cap);
    emit(c, "@SYMBOL@" + suffix);
    EmittedKernel many = std::move(e.out);
    many.minTokens = from;
    many.suffix = suffix;
    own.alternates.push_back(std::move(many));
  }
  e.out = EmittedKernel{};
  return own;
}

void GemmEmitter::gemvPrefetchAhead(const std::vector<Gemm> &gemms,
                                    const std::vector<GemvForm> &shapes,
                                    const std::vector<int64_t> &groups) {
  // The blocks resident at launch: the register cap's blocks an SM on
  // every unit (gemvEntry's launch bounds).
  const ir::Target *t = ir::lookupTarget(e.target);
  const int64_t per =
      minBlocks_ > 0 ? minBlocks_ : option(e.plan, Opt::GemmDecodeBlocks);
  const int64_t resident = (t ? t->units : 0) * per;
  int64_t total = 0;
  for (int64_t g : groups)
    total += g;
  // Past a few rounds (the LM head: 36 of 528 blocks) the rows asked for
  // first would leave L2 before their blocks start.
  if (resident <= 0 || total <= resident || total > 4 * resident)
    return;
  // The chains' column groups in a row, u: block b < R takes u = b + R,
  // b + 2R, ... The first R are the ones the resident blocks start with
  // (a block a group, or a looping block's first), which they prefetch
  // themselves (gemvBody).
  e.line("  if (bid_x() < {}) {{", resident);
  e.line("  for (long u = bid_x() + {}L; u < {}L; u += {}L) {{", resident,
         total, resident);
  int64_t base = 0;
  const std::string rowBase = rowBase_;
  rowBase_ = "0L";
  for (size_t ci = 0; ci < gemms.size(); ++ci) {
    const Gemm &g = gemms[ci];
    const int slices = shapes[ci].slices, cols = shapes[ci].cols;
    const int64_t groupCols = kGemvWarps / slices;
    e.line("  if (u >= {}L && u < {}L) {{", base, base + groups[ci]);
    e.line("  const int slice = wave % {}, group = wave / {};", slices, slices);
    e.line("  const long n0 = ((u - {}L) * {} + group) * {};", base, groupCols,
           cols);
    gemvColumnRows(g, cols, "n0", "arow", "  ");
    e.line("  if (n0 < {}L) {{", g.n);
    gemvPrefetchRows(g, slices, cols, "arow", "    ");
    e.line("  }}");
    e.line("  }}");
    base += groups[ci];
  }
  rowBase_ = rowBase;
  e.line("  }}");
  e.line("  }}");
}

void GemmEmitter::emitGemv(const std::vector<Chain> &chains,
                           const std::vector<Gemm> &gemms, int64_t rows,
                           const std::string &sym, int64_t rowBlock,
                           const format::PlanDim &rowDim) {
  std::vector<GemvForm> shapes;
  int64_t stage = 0, aq8 = 0;
  bool wide = false;
  for (size_t ci = 0; ci < gemms.size(); ++ci) {
    const Gemm &g = gemms[ci];
    shapes.push_back(gemvShape(g, g.n, rows * g.mPer, rowBlock > 0));
    if (!chains[ci].streamMean) {
      stage = std::max(stage, gemvStage(g, shapes.back()));
      aq8 = std::max(aq8, gemvInt8Words(g, rows * g.mPer));
      wide = wide || gemvWide(g, rows * g.mPer);
    }
  }
  gemvOpen(false, sym, stage, aq8, wide);
  // gemm-decode-prefetch-early: every chain's branch waits itself, after
  // the prefetch of its weight rows (gemvBody) or first (gemvStreamBody);
  // what comes before reads no kernel's output (bid, the weights'
  // addresses, the IQ3_S table).
  earlyWait_ = prefetchEarly();
  // Each chain's blocks: a block a column group, or with gemm-decode-grid
  // fewer blocks looping over them.
  std::vector<int64_t> chainBlocks, chainGroups;
  for (size_t ci = 0; ci < gemms.size(); ++ci) {
    // A stream-mean chain's warp takes one hidden column over the whole K.
    const int64_t cols = chains[ci].streamMean
                             ? kGemvWarps
                             : kGemvWarps / shapes[ci].slices * shapes[ci].cols;
    // A stream-mean chain's columns are the hidden size's (a warp each).
    const int64_t outCols =
        chains[ci].streamMean
            ? e.tensor(chains[ci].streamMean->inputs[0]).shape[2].constant
            : gemms[ci].n;
    const int64_t groups = (outCols + cols - 1) / cols;
    chainGroups.push_back(groups);
    chainBlocks.push_back(
        chains[ci].streamMean || rowBlock > 0
            ? groups
            : gemvLaunchBlocks(groups, option(e.plan, Opt::GemmDecodeGrid)));
  }
  const bool plain = rowBlock == 0 &&
                     std::none_of(chains.begin(), chains.end(),
                                  [](const Chain &c) { return c.streamMean; });
  if (earlyWait_ && plain && option(e.plan, Opt::GemmDecodePrefetchAhead) != 0)
    gemvPrefetchAhead(gemms, shapes, chainGroups);
  int64_t base = 0;
  for (size_t ci = 0; ci < gemms.size(); ++ci) {
    const Gemm &g = gemms[ci];
    const GemvForm shape = shapes[ci];
    // gemm-decode-grid: a chain of many column groups launches fewer
    // blocks, each looping over groups (gemvBody).
    const int64_t groups = chainGroups[ci], blocks = chainBlocks[ci];
    colLoop_ = blocks < groups ? ColumnLoop{groups, blocks} : ColumnLoop{};
    e.line("  if (bid_x() >= {} && bid_x() < {}) {{", base, base + blocks);
    e.line("  const long base = {};", base);
    rowBase_ = "0L";
    if (chains[ci].streamMean) {
      gemvStreamBody(g, chains[ci], rows);
    } else if (rowBlock > 0) {
      // Block y's rows [y R, y R + R) of M (uniform in the block).
      e.line("  const long mb = (long)bid_y() * {}L, me = mb + {}L < {} ? mb "
             "+ {}L : {};",
             rowBlock * g.mPer, rowBlock * g.mPer, g.mRows, rowBlock * g.mPer,
             g.mRows);
      gemvBody(g, rows * g.mPer, shape, "mb", "me");
    } else {
      gemvBody(g, rows * g.mPer, shape, "0L", g.mRows);
    }
    colLoop_ = ColumnLoop{};
    e.line("  return;");
    e.line("  }}");
    base += blocks;
  }
  gemvClose();
  earlyWait_ = false;
  e.out.grid = {{0, base, 1},
                rowBlock > 0 ? tilesOf(rowDim, 1, rowBlock)
                             : format::PlanDim{0, 1, 1},
                {0, 1, 1}};
  e.out.block = {kGemvWarps * 32, 1, 1};
  e.out.sharedBytes = 0;
}

} // namespace strata::codegen::detail::gemm
