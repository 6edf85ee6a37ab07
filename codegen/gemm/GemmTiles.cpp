//===- GemmTiles.cpp - the GEMM tiles: LDS, tile choice, K loops ----------===//
//
// The cp.async / matrix-unit tiles every GEMM chain and grouped GEMM runs
// without the TMA: the kernel's LDS region and its buffers, raw weight
// stages, the tile a variant picks (wgmma or mma.sync), the weight
// decode into the W tile and the K loops (matrix units, warp dot products
// for a few columns, f32 FMA).
//
//===----------------------------------------------------------------------===//
#include "codegen/gemm/GemmEmitter.h"

#include "codegen/Limits.h"

#include "ir/Target.h"

#include "runtime/format/GgmlType.h"

#include <algorithm>

namespace strata::codegen::detail::gemm {

void GemmEmitter::stageW8(const Gemm &g, const std::vector<std::string> &wRow,
                          int ld, const std::string &conv, bool partialK) {
  e.line("    for (int c = tid_x(); c < {}; c += {}) {{", g.bn * 4, g.nt);
  e.line("      int r = c >> 2, kc = (c & 3) * 8;");
  e.line("      long n = {};", g.colOf("r"));
  for (size_t b = 0; b < g.w.size(); ++b) {
    wPiece(g, g.w[b], wRow[b], partialK);
    e.line("      for (int j = 0; j < 8; ++j) Bs{}[r * {} + kc + j] = "
           "{}(v[j]); }}",
           b, ld, conv);
  }
  e.line("    }}");
}

int64_t GemmEmitter::tileBytes(const Gemm &g, int nbuf) const {
  if (g.skinny)
    return 0;
  int64_t elem = g.mma ? 2 : 4, ld = g.mma ? kBK + 8 : kBK + 1;
  if (!g.mma)
    nbuf = 1;
  int64_t raw = rawStaged(g) ? 2 * static_cast<int64_t>(g.w.size()) * g.bn *
                                   rawRowBytes(g)
                             : 0;
  return nbuf * (g.bm + static_cast<int64_t>(g.w.size()) * g.bn) * ld * elem +
         raw;
}

bool GemmEmitter::rawStaged(const Gemm &g) const {
  const int64_t s = stageK(g);
  if (e.target != "sm_90" || !g.mma || s == 0)
    return false;
  for (const Tensor &w : g.w)
    if (!(w.quant() || w.ctype == "f16" || w.ctype == "bf16") ||
        s % w.blockSize != 0 || w.ggml != g.w[0].ggml)
      return false;
  return true;
}

int64_t GemmEmitter::stageK(const Gemm &g) {
  // 16-bit weights (the hyper-connection projections) take 128-element
  // stages (256 bytes a row per slot, not 512), or 64 (K3: K = 320).
  if (!g.w[0].quant())
    return g.k % 128 == 0 ? 128 : g.k % 64 == 0 ? 64 : 0;
  return g.k % 256 == 0 ? 256 : g.k % 128 == 0 ? 128 : 0;
}

int64_t GemmEmitter::superBytes(const Gemm &g) {
  return stageK(g) / g.w[0].blockSize * g.w[0].blockBytes;
}

bool GemmEmitter::rawAligned(const Gemm &g) {
  return superBytes(g) % 16 == 0 &&
         g.k / g.w[0].blockSize * g.w[0].blockBytes % 16 == 0;
}

int64_t GemmEmitter::rawRowBytes(const Gemm &g) {
  // A window from the segment's start rounded down to 16 bytes: at most 15
  // bytes before it and the rest after it.
  int64_t lr =
      rawAligned(g) ? superBytes(g) : (superBytes(g) + 15 + 15) / 16 * 16;
  // A wave decodes 8 rows at the same offset of each: rows a multiple of
  // 128 bytes apart read the same banks (ncu: 56 % of the IQ3_S gate/up
  // tile's LDS wavefronts were excess). Quantised pieces are a few bytes a
  // row: an odd number of 16-byte units spreads the 8 rows over the banks
  // (IQ3_S gate/up 324 -> 301 ms at T = 16,384). 16-bit rows stay as they
  // are: padding them to 64 bytes mod 128 cost K2/K3 a block per SM
  // (77 -> 90 and 98 -> 125 ms).
  if (!g.w[0].quant())
    return lr;
  return (lr / 16) % 2 == 0 ? lr + 16 : lr;
}

void GemmEmitter::declareRegion() {
  if (!dynamic_) {
    e.line(
        "  STRATA_SHARED __attribute__((aligned(16))) uint8_t strata_lds[{}];",
        region_);
    return;
  }
  e.line("  extern STRATA_SHARED __attribute__((aligned(16))) uint8_t "
         "strata_dyn[];");
  e.line("  uint8_t *const strata_lds = strata_dyn;");
  e.out.sharedBytes = static_cast<uint64_t>(region_);
}

void GemmEmitter::planBuffers(const std::vector<const Gemm *> &gemms,
                              int64_t extra) {
  auto regionOf = [&](int nbuf) {
    int64_t r = 0;
    for (const Gemm *g : gemms)
      r = std::max({r, tileBytes(*g, nbuf),
                    g->csTile ? int64_t(g->bm) * csLd(g->bn) * 4 : 0});
    return r;
  };
  // Two buffers where they fit beside a second block per SM; past the
  // static limit the region is dynamic shared memory (opt-in).
  doubleBuffer_ = regionOf(2) + extra <= staticSharedBudget() ||
                  (std::any_of(gemms.begin(), gemms.end(),
                               [&](const Gemm *g) { return rawStaged(*g); }) &&
                   regionOf(2) + extra <= kMaxLds);
  region_ = regionOf(doubleBuffer_ ? 2 : 1);
  dynamic_ = region_ + extra > staticSharedBudget();
}

bool GemmEmitter::tileOrder(const format::PlanDim &rowTiles, bool colsFirst) {
  const bool colsFast = colsFirst && rowTiles.at(e.plan.maxTokens) <= 65535;
  e.line("  const int rt = {}, ct = {};", colsFast ? "bid_y()" : "bid_x()",
         colsFast ? "bid_x()" : "bid_y()");
  return colsFast;
}

int GemmEmitter::minBlocks(const std::vector<const Gemm *> &gemms, int nt) {
  int acc = 0;
  for (const Gemm *g : gemms) {
    int per;
    if (g->mma) {
      int wm, wn;
      waveGrid(g->bm, nt, wm, wn);
      per = (g->bm / 16 / wm) * (g->bn / 16 / wn) * 8;
    } else {
      per = g->skinny ? kSkinnyRows * g->bn : (g->bm / 16) * (g->bn / 16);
    }
    acc = std::max(acc, per * static_cast<int>(g->w.size()));
  }
  return static_cast<int>(launchBoundRegisters() /
                          (nt * (acc <= 32 ? 85 : 128)));
}

void GemmEmitter::pickTile(Gemm &g, const std::string &variant) {
  const ir::Target *target = ir::lookupTarget(e.target);
  if (!target)
    throw Unsupported("no such target: " + e.target);
  // The variant's path: f32 weights, and the f32 precision policy's
  // valu_f32 / ffma_f32 variants, take the f32 FMA tile.
  g.mma = g.w[0].ctype != "float" &&
          variant.find("valu_f32") == std::string::npos &&
          variant.find("ffma_f32") == std::string::npos;
  // Except f32 weights under bf16 activations (the MoE router, K 2560 x
  // N 512: 123 ms of the H200's prefill on the FMA tile at T = 16,384; the
  // delta rule's gate projections, N 48: 22 ms): the matrix units over
  // three terms of W (split). sm_90's own form takes bf16 terms on its
  // 128-row tile (wgmma); the portable form (gfx1151, sm_90 under
  // portable-forms) scales the terms into the matrix type's range (f16's
  // would lose the small ones) on the 64 x 64 tile. A few columns keep the
  // warp dot products.
  const bool portable =
      e.target == "gfx1151" || option(e.plan, Opt::PortableForms) != 0;
  if (g.w.size() == 1 && g.w[0].ctype == "float" && g.a.ctype == "bf16" &&
      g.n > kSkinnyN && g.k % kBK == 0) {
    const char *row = !portable               ? "mma_bf16_split3"
                      : e.target == "gfx1151" ? "wmma_f16_split3"
                                              : "mma_bf16_split3p";
    const ir::KernelForm &f = ir::formRow(*target, row);
    g.mma = true;
    g.split = 3;
    g.splitScaled = portable;
    g.bm = f.tileM, g.nt = f.threads;
    g.bn = !portable && g.n <= 64 ? 64 : f.tileN;
    g.tileRow = f.name;
    e.pickedTile(f.name, g.bm, g.bn);
    return;
  }
  if (!g.mma) {
    // The target's vector f32 variant (valu_f32 / ffma_f32): its rows, at
    // most its columns.
    const ir::KernelVariant *fma = nullptr;
    for (const ir::KernelVariant *v : ir::variantsOf(*target))
      if (v->path == ir::MatrixPath::F32)
        fma = v;
    if (!fma)
      throw Unsupported("no vector f32 variant for " + e.target);
    g.nt = 256;
    // A few columns (the hyper-connection injection logits, N = 4): warp
    // dot products; 8 warps of kSkinnyRows rows make the 32-row tile.
    if (g.n <= kSkinnyN && g.k % 8 == 0 && g.w.size() == 1 && !g.w[0].quant()) {
      const ir::KernelForm &f =
          ir::formRow(*target, std::string(fma->name) + "_skinny");
      static_assert(8 * kSkinnyRows == 32, "skinny rows per block");
      g.skinny = true;
      g.bm = f.tileM;
      g.bn = static_cast<int>(g.n);
      g.tileRow = f.name;
      e.pickedTile(f.name, g.bm, g.bn);
      return;
    }
    // Columns rounded to 16, at most the row's.
    g.bm = fma->tileM;
    g.bn =
        static_cast<int>(std::min<int64_t>(fma->tileN, (g.n + 15) / 16 * 16));
    g.tileRow = fma->name;
    e.pickedTile(fma->name, g.bm, g.bn);
    return;
  }
  // The tile of the variant's row (KernelVariants.def, which
  // select-expert-kernels costs with); a GEMM without a variant takes
  // 64 x 64.
  int tm = 64, tn = 64;
  if (const ir::KernelVariant *v = ir::lookupVariant(*target, variant))
    tm = v->tileM, tn = v->tileN;
  // 64 columns where 128 would leave a ragged last tile (N = 320: 5 tiles
  // of 64, not 3 of 128 with 64 columns of zeros).
  if (tn == 128 && g.n % 128 != 0 && g.n % 64 == 0)
    tn = 64;
  // Gate and up (swiglu) stage two W tiles: 64 columns each keep the
  // accumulators of a 128-row tile within the register cap.
  if (tn == 128 && g.w.size() == 2)
    tn = 64;
  g.bm = tm;
  g.bn = tn;
  g.nt = tm * tn >= 128 * 64 ? 256 : 128;
  g.tileRow = variant;
  e.pickedTile(variant, g.bm, g.bn);
}

bool GemmEmitter::useWgmma(const Gemm &g) const {
  // Option gemm-core=mma keeps these tiles on mma.sync (an A/B option).
  if (e.target != "sm_90" || !g.mma || g.skinny || g.splitScaled ||
      !doubleBuffer_ || g.k % kBK != 0 || g.bm % 64 != 0 || g.nt % 128 != 0 ||
      option(e.plan, Opt::GemmCore) == 1)
    return false;
  const int groups = g.nt / 128, wgM = g.bm / 64;
  if (groups % wgM != 0 || g.bn % (groups / wgM) != 0)
    return false;
  const int cols = g.bn / (groups / wgM);
  return cols == 64 || cols == 128;
}

void GemmEmitter::decodeW(const Tensor &w, const std::string &rowPtr,
                          const std::string &k, const std::string &dst) {
  if (w.quant()) {
    bool lds = w.ggml == format::GgmlType::IQ3_S && iq3sLds_;
    e.line(
        "        strata_dq8_{}{}({} + ({}) / {} * {}, (int)(({}) % {}), {}{});",
        format::ggmlTypeInfo(w.ggml).irName, lds ? "_grid" : "", rowPtr, k,
        w.blockSize, w.blockBytes, k, w.blockSize, dst,
        lds ? ", iq3s_lds" : "");
  } else {
    // Whole rows of K % 32 == 0 elements: 16-bit pieces are 16-byte aligned
    // (in global memory, or in a raw stage's LDS row of bytes).
    e.line("        ld8((const {} *){}, {}, {});", w.ctype, rowPtr, k, dst);
  }
}

void GemmEmitter::wPiece(const Gemm &g, const Tensor &w,
                         const std::string &wRow, bool partialK) {
  // Branch-free: a column past N reads row N - 1 and is zeroed after, so
  // the step's loads are one basic block the scheduler can issue ahead of
  // the matrix ops and consume after them.
  // Where the tiles cover N exactly there is nothing to test.
  const bool exact = g.n % g.bn == 0;
  e.line("      {{ float v[8];");
  if (exact)
    e.line("      {{ {{");
  else
    e.line("      {{ const long nl = n < {}L ? n : {}L; {{ const long n = nl;",
           g.n, g.n - 1);
  e.line("        {}", wRow);
  if (partialK)
    e.line("        for (int j = 0; j < 8; ++j) v[j] = k0 + kc + j < {}L ? "
           "ld(wrow, k0 + kc + j) : 0.0f;",
           g.k);
  else if (g.split > 1) {
    decodeW(w, "wrow", fmt::format("k0 % {}L + kc", g.k), "v");
    e.line("        strata_split_{}(v, (int)(k0 / {}L));",
           g.splitScaled ? "terms" : "bf16", g.k);
  } else
    decodeW(w, "wrow", "k0 + kc", "v");
  e.line("      }} }}");
  if (!exact)
    e.line("      {{ const bool nok = n < {}L; for (int j = 0; j < 8; ++j) "
           "v[j] = nok ? v[j] : 0.0f; }}",
           g.n);
}

void GemmEmitter::tileLoop(const Gemm &g, const std::string &aRow,
                           const std::vector<std::string> &wRow) {
  const bool partialK = g.k % kBK != 0;
  if (partialK && g.w[0].quant())
    throw Unsupported("K is not a multiple of the weight's block");
  // IQ3_S's grid (2 KiB) in LDS: its lookups are random per lane.
  if (std::any_of(g.w.begin(), g.w.end(), [](const Tensor &w) {
        return w.ggml == format::GgmlType::IQ3_S;
      })) {
    e.line("  STRATA_SHARED uint32_t iq3s_lds[512];");
    e.line("  for (int i = tid_x(); i < 512; i += {}) iq3s_lds[i] = "
           "strata_iq3s_grid[i];",
           g.nt);
    e.line("  sync_block();");
  }
  // The tile this code object prints (EmittedKernel::codeTiles).
  e.recordTile(g.tileRow, g.bm, g.bn);
  if (g.mma)
    matrixTile(g, aRow, wRow);
  else if (g.skinny)
    skinnyTile(g, aRow, wRow);
  else
    ffmaTile(g, aRow, wRow);
  e.line("        if (m < M && n < {}L) {{", g.n);
  for (const std::string &l : g.epilogue)
    e.line("          {}", l);
  e.line("        }}");
  e.line("      }}");
}

void GemmEmitter::matrixTile(const Gemm &g, const std::string &aRow,
                             const std::vector<std::string> &wRow) {
  const size_t nb = g.w.size();
  const bool partialK = g.k % kBK != 0;
  // The K walked: K, or K per bf16 term of split f32 weights.
  const int64_t kTot = g.k * g.split;
  // wgmma (sm_90a): each warpgroup takes 64 rows of the tile, all its
  // columns; the operands are read from LDS by the matrix unit (no
  // per-wave fragment loads) while the waves stage the next K step.
  const bool wg = useWgmma(g);
  // wgmma: warpgroups wgM down x wgN across; each wave 16 rows of its
  // warpgroup's 64 and all of its columns.
  const int wgM = g.bm / 64, wgN = wg ? g.nt / 128 / wgM : 1;
  int wm = 4 * wgM, wn = wgN;
  if (!wg)
    waveGrid(g.bm, g.nt, wm, wn);
  if ((g.bn / 16) % wn != 0)
    throw Unsupported("tile does not split over the waves");
  int fm = g.bm / 16 / wm, fn = g.bn / 16 / wn;
  const int ld = kBK + 8;
  // Software pipeline: the next K step's A and W pieces are loaded (and
  // W decoded) into registers while the matrix units work on this one;
  // with room for two LDS buffers one barrier per step suffices.
  const int nbuf = doubleBuffer_ ? 2 : 1;
  const int ca = (g.bm * 4 + g.nt - 1) / g.nt,
            cw = (g.bn * 4 + g.nt - 1) / g.nt;
  // bf16 A rows of whole 8-element pieces: one 16-byte load per piece.
  const bool vecA = g.a.ctype == "bf16" && !partialK && g.k % 8 == 0;
  // wgmma with two weights (gate and up): one B operand of 2 x bn rows,
  // the second weight's rows after the first's in every k chunk, so one
  // m64n(2 bn) reads A once for both.
  const bool pairB = wg && nb == 2 && wgN == 1 && 2 * g.bn <= 128;
  e.line("  mma_t *As = (mma_t *)strata_lds;");
  for (size_t b = 0; b < nb; ++b)
    e.line("  mma_t *Bs{} = As + {};", b,
           pairB ? nbuf * g.bm * ld + static_cast<int>(b) * g.bn * 8
                 : nbuf * (g.bm + static_cast<int>(b) * g.bn) * ld);
  e.line("  const int wave = tid_x() >> 5, wm = wave % {}, wn = wave / {};", wm,
         wm);
  for (size_t b = 0; b < nb; ++b)
    e.line("  float acc{}[{}][{}][8] = {{}};", b, fm, fn);
  e.line("  strata_u4 pa[{}], pw[{}][{}];", ca, nb, cw);
  // Raw-staged W: each superblock's rows by cp.async into two LDS slots
  // one superblock (8 K steps) ahead; the W pieces are decoded from LDS
  // at their step, so no global load waits inside the K loop.
  const bool raw = rawStaged(g);
  const int64_t sb = raw ? superBytes(g) : 0, lr = raw ? rawRowBytes(g) : 0,
                chunks = lr / 16;
  const bool window = raw && !rawAligned(g);
  const int64_t st = raw ? stageK(g) : 0; // K elements per stage
  if (raw)
    e.line("  uint8_t *Wr = strata_lds + {};",
           nbuf * (g.bm + static_cast<int64_t>(nb) * g.bn) * ld * 2);
  auto issueRaw = [&](const std::string &kb, const std::string &slot) {
    for (size_t b = 0; b < nb; ++b) {
      e.line("    for (int c = tid_x(); c < {}; c += {}) {{", g.bn * chunks,
             g.nt);
      e.line("      int r = c / {}, q = c % {};", chunks, chunks);
      e.line("      long n = {}; n = n < {}L ? n : {}L;", g.colOf("r"), g.n,
             g.n - 1);
      e.line("      {{ {}", wRow[b]);
      if (window)
        e.line("        const uint8_t *src = (const uint8_t *)((unsigned "
               "long long)(wrow + ({}) * {}L) & ~15ull);",
               kb, sb);
      else
        e.line("        const uint8_t *src = (const uint8_t *)wrow + ({}) * "
               "{}L;",
               kb, sb);
      e.line("        cp_async16(Wr + (({}) * {} + {}) * {} + r * {} + q * "
             "16, src + q * 16); }}",
             slot, nb, b, g.bn * lr, lr);
      e.line("    }}");
    }
  };
  // A piece loop's bound test, only where the last round is partial.
  auto guard = [&](int ci, int pieces) {
    return (ci + 1) * g.nt > pieces ? fmt::format("if (c < {})", pieces)
                                    : std::string();
  };
  auto load = [&](const std::string &kStep) {
    // The step's own k0 (k0 + 32 inside the loop), named apart first:
    // `const long k0 = k0 + 32` would read itself.
    e.line("    {{ const long kload = {}; {{ const long k0 = kload;", kStep);
    // Rows past M read row M - 1 (M > m0) and are zeroed: no branch.
    for (int ci = 0; ci < ca; ++ci) {
      e.line("    {{ int c = tid_x() + {}; {} {{", ci * g.nt,
             guard(ci, g.bm * 4));
      if (vecA) {
        // The row was found once (arw); the zeroing waits for the store,
        // so nothing waits on the load before the next step.
        e.line("      pa[{}] = *(const strata_u4 *)({} + (long)arw[{}] * {}L "
               "+ {} + (c & 3) * 8);",
               ci, g.a.ptr, ci, g.k,
               g.split > 1 ? fmt::format("k0 % {}L", g.k) : "k0");
      } else {
        e.line("      int r = c >> 2, kc = (c & 3) * 8; long m = m0 + r;");
        e.line("      const bool mok = m < M; if (!mok) m = M - 1;");
        e.line("      float v[8];");
        e.line("      {{ {} for (int j = 0; j < 8; ++j) v[j] = {}; }}", aRow,
               partialK ? "(k0 + kc + j < " + std::to_string(g.k) +
                              "L ? ld(arow, k0 + kc + j) : 0.0f)"
                        : "ld(arow, k0 + kc + j)");
        e.line("      for (int j = 0; j < 8; ++j) v[j] = mok ? v[j] : 0.0f;");
        e.line("      pa[{}] = pack8_mma(v);", ci);
      }
      e.line("    }} }}");
    }
    for (int ci = 0; ci < (raw ? 0 : cw); ++ci) {
      e.line("    {{ int c = tid_x() + {}; {} {{", ci * g.nt,
             guard(ci, g.bn * 4));
      e.line("      int r = c >> 2, kc = (c & 3) * 8;");
      e.line("      long n = {};", g.colOf("r"));
      for (size_t b = 0; b < nb; ++b) {
        wPiece(g, g.w[b], wRow[b], partialK);
        e.line("      pw[{}][{}] = pack8_mma(v); }}", b, ci);
      }
      e.line("    }} }}");
    }
    e.line("    }} }}");
  };
  if (raw) {
    issueRaw("0", "0");
    e.line("  cp_async_commit();");
  }
  if (vecA) {
    // Each thread's A rows, found once: the gather's index load and
    // division are not repeated every K step. Bit ci of amask: piece ci's
    // row is below M.
    e.line("  int arw[{}]; unsigned amask = 0;", ca);
    for (int ci = 0; ci < ca; ++ci)
      e.line("  {{ long m = m0 + ((tid_x() + {}) >> 2); if (m < M) amask |= "
             "{}u; else m = M - 1; arw[{}] = (int)({}); }}",
             ci * g.nt, 1u << ci, ci, g.aIndex);
  }
  load("0");
  e.line("  int buf = 0;");
  // Where a staged element lands in buffer `sb`: rows of ld elements
  // for the fragment loads; for wgmma, 16-byte chunks [k / 8][row], the
  // k chunks chunkLd elements apart: 32 bytes past a multiple of 128, so
  // a quarter-wave's stores (2 rows x 4 chunks) take 8 distinct bank
  // quads.
  auto chunkLd = [](int rows) { return rows * 8 + 16; };
  // (pairB: a weight's tile is half of a 2 x bn row one.)
  auto slot = [&](const std::string &tile, int rows, const std::string &r,
                  const std::string &kc, const std::string &sb) {
    if (pairB && tile != "As")
      rows *= 2;
    return wg ? fmt::format("{} + {} * {} + ({}) / 8 * {} + {} * 8", tile, sb,
                            rows * ld, kc, chunkLd(rows), r)
              : fmt::format("{} + {} * {} + {} * {} + {}", tile, sb, rows * ld,
                            r, ld, kc);
  };
  // Stores the K step at k0 into buffer `sb`: stageW its W pieces decoded
  // from the raw stage (copying the next superblock at a boundary),
  // stageRegs the pieces load() left in registers.
  auto stageW = [&](const std::string &bufx) {
    if (raw) {
      // A superblock boundary: the next one's copies go into the other
      // slot (its last readers passed the previous step's barrier), this
      // one's must have landed.
      e.line("    if (k0 % {} == 0) {{", st);
      e.line("    const long kb = k0 / {};", st);
      e.line("    if (k0 + {} < {}L) {{", st, g.k);
      issueRaw("kb + 1", "(kb + 1) & 1");
      e.line("    cp_async_commit(); cp_async_wait_one();");
      e.line("    }} else cp_async_wait_all();");
      e.line("    sync_block();");
      e.line("    }}");
      // This step's W pieces from the staged superblock.
      const bool exact = g.n % g.bn == 0;
      for (int ci = 0; ci < cw; ++ci) {
        e.line("    {{ int c = tid_x() + {}; {} {{", ci * g.nt,
               guard(ci, g.bn * 4));
        e.line("      int r = c >> 2, kc = (c & 3) * 8;");
        if (!exact)
          e.line("      const bool nok = {} < {}L;", g.colOf("r"), g.n);
        for (size_t b = 0; b < nb; ++b) {
          e.line("      {{ float v[8];");
          std::string seg =
              fmt::format("(Wr + (((k0 / {}) & 1) * {} + {}) * {} + r * {})",
                          st, nb, b, g.bn * lr, lr);
          if (window) {
            // The segment's offset in its window: its global address mod
            // 16.
            e.line("      const uint8_t *seg = {};", seg);
            e.line("      {{ long n = {}; n = n < {}L ? n : {}L; {}",
                   g.colOf("r"), g.n, g.n - 1, wRow[b]);
            e.line("        seg += (unsigned long long)(wrow + k0 / {} * "
                   "{}L) & 15; }}",
                   st, sb);
            seg = "seg";
          }
          decodeW(g.w[b], seg, fmt::format("k0 % {} + kc", st), "v");
          if (!exact)
            e.line("      for (int j = 0; j < 8; ++j) v[j] = nok ? v[j] : "
                   "0.0f;");
          e.line("      *(strata_u4 *)({}) = pack8_mma(v); }}",
                 slot("Bs" + std::to_string(b), g.bn, "r", "kc", bufx));
        }
        e.line("    }} }}");
      }
    }
  };
  // Stores the K step's pieces held in the registers load() filled: A's,
  // and W's where not raw-staged.
  auto stageRegs = [&](const std::string &bufx) {
    const std::string pr = "(c >> 2)", pk = "(c & 3) * 8";
    for (int ci = 0; ci < (raw ? 0 : cw); ++ci)
      for (size_t b = 0; b < nb; ++b)
        e.line("    {{ int c = tid_x() + {}; if (c < {}) *(strata_u4 *)({}) "
               "= pw[{}][{}]; }}",
               ci * g.nt, g.bn * 4,
               slot("Bs" + std::to_string(b), g.bn, pr, pk, bufx), b, ci);
    for (int ci = 0; ci < ca; ++ci)
      e.line("    {{ int c = tid_x() + {}; if (c < {}) *(strata_u4 *)({}) = "
             "{}; }}",
             ci * g.nt, g.bm * 4, slot("As", g.bm, pr, pk, bufx),
             vecA ? fmt::format("amask & {}u ? mma_from_bf16x8(pa[{}]) : "
                                "strata_u4{{0, 0, 0, 0}}",
                                1u << ci, ci)
                  : fmt::format("pa[{}]", ci));
  };
  auto stage = [&](const std::string &bufx) {
    stageW(bufx);
    stageRegs(bufx);
  };
  if (wg) {
    // Step k0's wgmma run while the waves stage step k0 + 32 into the
    // other buffer and load step k0 + 64; each warpgroup waits for its
    // own wgmma before the step's barrier, so a buffer is rewritten only
    // after every warpgroup's reads of it completed.
    e.line("  {{ const long k0 = 0;");
    stage("0");
    e.line("  }}");
    e.line("  fence_proxy_async(); sync_block();");
    load(fmt::format("{} < {}L ? {} : 0", kBK, kTot, kBK));
    e.line("  const int wgm = (wave >> 2) % {}, wgn = (wave >> 2) / {};", wgM,
           wgM);
    const int cols = g.bn / wgN;
    // Unrolled by a raw stage (8 K steps of a 256-element superblock, 4 of
    // 128, 2 of 64; else the 2 buffers): the step's position in the stage
    // and its buffer become constants, so the decoders' block offsets, the
    // LDS addresses and the boundary test fold into immediates. SASS: the
    // IQ3_S gate/up loop 340 -> 172 instructions a step (IMAD 58 -> 14),
    // down 305 -> 201, K3 212 -> 136; H200, T = 16,384: dense GEMMs 536 ->
    // 480 ms, gate/up 229 -> 219, down 166 -> 161, K3 80 -> 78, K2 59 -> 60.
    e.line("#pragma unroll {}", raw ? st / kBK : 2);
    e.line("  for (long k0 = 0; k0 < {}L; k0 += {}) {{", kTot, kBK);
    e.line("    wg_fence();");
    for (int kk = 0; kk < kBK; kk += 16) {
      e.line("    {{ const wg_desc da = wg_desc_of(As + buf * {} + wgm * "
             "512 + {}, {});",
             g.bm * ld, kk / 8 * chunkLd(g.bm), chunkLd(g.bm) * 2);
      if (pairB)
        e.line("    wgmma_m64n128_pair(&acc0[0][0][0], &acc1[0][0][0], da, "
               "wg_desc_of(Bs0 + buf * {} + {}, {}));",
               2 * g.bn * ld, kk / 8 * chunkLd(2 * g.bn),
               chunkLd(2 * g.bn) * 2);
      for (size_t b = 0; b < (pairB ? 0 : nb); ++b)
        e.line("    wgmma_m64n{}(&acc{}[0][0][0], da, wg_desc_of(Bs{} + buf "
               "* {} + wgn * {} + {}, {}));",
               cols, b, b, g.bn * ld, cols * 8, kk / 8 * chunkLd(g.bn),
               chunkLd(g.bn) * 2);
      e.line("    }}");
    }
    e.line("    wg_commit();");
    e.line("    if (k0 + {} < {}L) {{", kBK, kTot);
    // The register-held pieces first, then the load two steps ahead, then
    // the W decode: the load has the decode's time to land.
    e.line("    {{ const long kn = k0 + {}; {{ const long k0 = kn;", kBK);
    stageRegs("(buf ^ 1)");
    e.line("    }} }}");
    load(fmt::format("k0 + {} < {}L ? k0 + {} : k0", 2 * kBK, kTot, 2 * kBK));
    e.line("    {{ const long kn = k0 + {}; {{ const long k0 = kn;", kBK);
    stageW("(buf ^ 1)");
    e.line("    }} }}");
    e.line("    }}");
    for (size_t b = 0; b < nb; ++b)
      for (int q = 0; q < fn * 8; q += 32)
        e.line("    {}(&acc{}[0][0][0] + {});",
               b == 0 && q == 0 ? "wg_wait_all" : "wg_pin32", b, q);
    e.line("    fence_proxy_async(); sync_block();");
    e.line("    buf ^= 1;");
    e.line("  }}");
  } else {
    // Every accumulator times \p factor, after \p prefix (a condition).
    auto scaleAcc = [&](const std::string &prefix, const std::string &factor) {
      for (size_t b = 0; b < nb; ++b)
        e.line("{}_Pragma(\"unroll\") for (int i = 0; i < {}; ++i) "
               "_Pragma(\"unroll\") for (int j = 0; j < {}; ++j) "
               "_Pragma(\"unroll\") for (int q = 0; q < 8; ++q) acc{}[i][j][q] "
               "*= {};",
               prefix, fm, fn, b, factor);
    };
    e.line("  for (long k0 = 0; k0 < {}L; k0 += {}) {{", kTot, kBK);
    stage("buf");
    e.line("    sync_block();");
    // The portable split's Horner step: a later term's products are S
    // times their weight's, so what was summed before it is scaled by S.
    if (g.splitScaled)
      scaleAcc(fmt::format("    if (k0 > 0 && k0 % {}L == 0) ", g.k),
               "STRATA_MMA_TERM_SCALE");
    // The last step reloads itself (valid addresses, no branch).
    load(fmt::format("k0 + {} < {}L ? k0 + {} : k0", kBK, kTot, kBK));
    // Each wave's fragments once per 16 k (one ldmatrix.x4 per 16x16 on
    // sm_90), then its fm x fn tiles from registers.
    e.line("#pragma unroll");
    e.line("    for (int kk = 0; kk < {}; kk += 16) {{", kBK);
    e.line("      mma_fa fa[{}];", fm);
    e.line("#pragma unroll");
    e.line("      for (int i = 0; i < {}; ++i)", fm);
    e.line("        fa[i] = mma_load_a(As + buf * {} + ((wm * {} + i) * 16) "
           "* {} + kk, {});",
           g.bm * ld, fm, ld, ld);
    for (size_t b = 0; b < nb; ++b) {
      e.line("      {{ mma_fb fb[{}];", fn);
      e.line("#pragma unroll");
      e.line("      for (int j = 0; j < {}; ++j)", fn);
      e.line(
          "        fb[j] = mma_load_b(Bs{} + buf * {} + ((wn * {} + j) * 16) "
          "* {} + kk, {});",
          b, g.bn * ld, fn, ld, ld);
      e.line("#pragma unroll");
      e.line("      for (int i = 0; i < {}; ++i)", fm);
      e.line("#pragma unroll");
      e.line("        for (int j = 0; j < {}; ++j)", fn);
      e.line("          mma_16x16x16_f(acc{}[i][j], fa[i], fb[j]); }}", b);
    }
    e.line("    }}");
    if (nbuf == 2)
      e.line("    buf ^= 1;");
    else
      e.line("    sync_block();");
    e.line("  }}");
    // The portable split: the sum back to W's scale (S^-(terms - 1)).
    if (g.splitScaled)
      scaleAcc("  ", g.split == 3 ? "1.0f / (STRATA_MMA_TERM_SCALE * "
                                    "STRATA_MMA_TERM_SCALE)"
                                  : "1.0f / STRATA_MMA_TERM_SCALE");
  }
  if (g.csTile && nbuf == 2) // Cs overwrites the tiles other waves read
    e.line("  sync_block();");
  if (g.csTile)
    e.line("  float *Cs = (float *)strata_lds;");
  e.line("#pragma unroll");
  e.line("  for (int i = 0; i < {}; ++i)", fm);
  e.line("#pragma unroll");
  e.line("    for (int j = 0; j < {}; ++j)", fn);
  e.line("#pragma unroll");
  e.line("      for (int q = 0; q < 8; ++q) {{");
  e.line("        int r, c;");
  e.line("        mma_acc_coord(q, &r, &c);");
  e.line("        r += (wm * {} + i) * 16;", fm);
  e.line("        c += (wn * {} + j) * 16;", fn);
  e.line("        long m = m0 + r, n = {};", g.colOf("c"));
  e.line("        float v = acc0[i][j][q];");
  if (nb > 1)
    e.line("        float v2 = acc1[i][j][q];");
}

void GemmEmitter::skinnyTile(const Gemm &g, const std::string &aRow,
                             const std::vector<std::string> &wRow) {
  const size_t nb = g.w.size();
  const bool partialK = g.k % kBK != 0;
  // Warp dot products: each lane takes 8 k of every row and column per
  // step (16-byte A loads, the few W rows hit in cache), sums over the
  // warp at the end; lane 0 runs the epilogue.
  if (nb != 1 || partialK || g.k % 8 != 0)
    throw Unsupported("skinny GEMM shape");
  e.line("  const int wave = tid_x() >> 5;");
  e.line("  float acc0[{}][{}] = {{}};", kSkinnyRows, g.bn);
  e.line("  for (long k0 = lane_id() * 8L; k0 < {}L; k0 += 256) {{", g.k);
  e.line("    float wv[{}][8];", g.bn);
  e.line("#pragma unroll");
  e.line("    for (int j = 0; j < {}; ++j) {{", g.bn);
  e.line("      const long n = {};", g.colOf("j"));
  e.line("      {} ld8(wrow, k0, wv[j]);", wRow[0]);
  e.line("    }}");
  e.line("#pragma unroll");
  e.line("    for (int i = 0; i < {}; ++i) {{", kSkinnyRows);
  e.line("      long m = m0 + wave * {} + i; m = m < M ? m : M - 1;",
         kSkinnyRows);
  e.line("      float av[8];");
  e.line("      {{ {} ld8(arow, k0, av); }}", aRow);
  e.line("#pragma unroll");
  e.line("      for (int j = 0; j < {}; ++j)", g.bn);
  e.line("#pragma unroll");
  e.line("        for (int u = 0; u < 8; ++u) acc0[i][j] += av[u] * "
         "wv[j][u];");
  e.line("    }}");
  e.line("  }}");
  e.line("#pragma unroll");
  e.line("  for (int i = 0; i < {}; ++i)", kSkinnyRows);
  e.line("#pragma unroll");
  e.line("    for (int j = 0; j < {}; ++j) acc0[i][j] = warp_sum(acc0[i][j]);",
         g.bn);
  e.line("  if (lane_id() == 0)");
  e.line("#pragma unroll");
  e.line("  for (int i = 0; i < {}; ++i)", kSkinnyRows);
  e.line("#pragma unroll");
  e.line("    for (int j = 0; j < {}; ++j) {{", g.bn);
  e.line("        long m = m0 + wave * {} + i, n = {};", kSkinnyRows,
         g.colOf("j"));
  e.line("        float v = acc0[i][j];");
}

void GemmEmitter::ffmaTile(const Gemm &g, const std::string &aRow,
                           const std::vector<std::string> &wRow) {
  const size_t nb = g.w.size();
  // f32 FMA tile: 16 x 16 threads, BM/16 rows x BN/16 columns each.
  if (g.nt != 256 || g.bm % 16 || g.bn % 16)
    throw Unsupported("f32 tile shape");
  const int rm = g.bm / 16, rn = g.bn / 16;
  const int ld = kBK + 1;
  e.line("  float *As = (float *)strata_lds;");
  for (size_t b = 0; b < nb; ++b)
    e.line("  float *Bs{} = As + {};", b,
           (g.bm + static_cast<int>(b) * g.bn) * ld);
  e.line("  const int ty = tid_x() >> 4, tx = tid_x() & 15;");
  for (size_t b = 0; b < nb; ++b)
    e.line("  float acc{}[{}][{}] = {{}};", b, rm, rn);
  e.line("  for (long k0 = 0; k0 < {}L; k0 += {}) {{", g.k, kBK);
  e.line("    for (int c = tid_x(); c < {}; c += {}) {{", g.bm * kBK, g.nt);
  e.line("      int r = c / {}, kc = c % {};", kBK, kBK);
  e.line("      long m = m0 + r;");
  e.line("      float v = 0.0f;");
  e.line("      if (m < M && k0 + kc < {}L) {{ {} v = ld(arow, k0 + kc); }}",
         g.k, aRow);
  e.line("      As[r * {} + kc] = v;", ld);
  e.line("    }}");
  if (g.w[0].quant()) {
    // Quantised weights: 8-element pieces decoded once each, into f32.
    stageW8(g, wRow, ld, "", false);
  } else {
    e.line("    for (int c = tid_x(); c < {}; c += {}) {{", g.bn * kBK, g.nt);
    e.line("      int r = c / {}, kc = c % {};", kBK, kBK);
    e.line("      long n = {};", g.colOf("r"));
    for (size_t b = 0; b < nb; ++b) {
      e.line("      {{ float v = 0.0f;");
      e.line("      if (n < {}L && k0 + kc < {}L) {{ {} v = ld(wrow, k0 + "
             "kc); }}",
             g.n, g.k, wRow[b]);
      e.line("      Bs{}[r * {} + kc] = v; }}", b, ld);
    }
    e.line("    }}");
  }
  e.line("    sync_block();");
  // Not unrolled: a fully unrolled K step hoists every LDS load and
  // spills (measured: 256 VGPRs, 85 spills on gfx1151).
  e.line("    for (int kk = 0; kk < {}; ++kk)", kBK);
  e.line("#pragma unroll");
  e.line("      for (int i = 0; i < {}; ++i)", rm);
  e.line("#pragma unroll");
  e.line("        for (int j = 0; j < {}; ++j) {{", rn);
  for (size_t b = 0; b < nb; ++b)
    e.line("          acc{}[i][j] += As[(ty + 16 * i) * {} + kk] * Bs{}[(tx "
           "+ 16 * j) * {} + kk];",
           b, ld, b, ld);
  e.line("        }}");
  e.line("    sync_block();");
  e.line("  }}");
  if (g.csTile)
    e.line("  float *Cs = (float *)strata_lds;");
  e.line("#pragma unroll");
  e.line("  for (int i = 0; i < {}; ++i)", rm);
  e.line("#pragma unroll");
  e.line("    for (int j = 0; j < {}; ++j) {{", rn);
  e.line("        int r = ty + 16 * i, c = tx + 16 * j;");
  e.line("        long m = m0 + r, n = {};", g.colOf("c"));
  e.line("        float v = acc0[i][j];");
  if (nb > 1)
    e.line("        float v2 = acc1[i][j];");
}

} // namespace strata::codegen::detail::gemm
