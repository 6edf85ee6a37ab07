//===- GemmTma.cpp - the GEMM chains' TMA tiles (sm_90a) ------------------===//
//
// The TMA tile (sm_90a) of the GEMM chains: a producer warp copying A and
// W by the TMA into a ring of stages, two consumer warpgroups on wgmma;
// when a chain takes it (pickTma), its tensor maps, the merged skinny
// chain (K2), the results through shared memory and the kernel itself.
// The grouped experts' TMA tile (codegen/grouped/GroupedTma.cpp) shares
// its pieces.
//
//===----------------------------------------------------------------------===//
#include "codegen/gemm/GemmEmitter.h"

#include "codegen/Limits.h"

#include "ir/Target.h"

#include <algorithm>

namespace strata::codegen::detail::gemm {

void GemmEmitter::accLoop(const char *outer, const char *body, int64_t groups,
                          int qStep, bool inWarpgroup, bool addC) {
  e.line("#pragma unroll");
  e.line("{}for (int j = 0; j < {}; ++j)", outer, groups);
  e.line("#pragma unroll");
  e.line("{}  for (int q = 0; q < 8; {}) {{", outer,
         qStep == 1 ? "++q" : fmt::format("q += {}", qStep));
  e.line("{}int r, c;", body);
  e.line("{}mma_acc_coord(q, &r, &c);", body);
  e.line("{}r += {}(wave & 3) * 16;", body,
         inWarpgroup ? "" : "(wave >> 2) * 64 + ");
  if (addC)
    e.line("{}c += j * 16;", body);
}

void GemmEmitter::openTmaKernel(int blocks, const std::string &sym,
                                const std::string &params) {
  // The block of the TMA forms' rows (a producer warp and two
  // warpgroups; the grouped row has the same, VariantTilesTest).
  const int threads =
      ir::formRow(*ir::lookupTarget(e.target), "tma_wgmma").threads;
  e.line("STRATA_KERNEL_MIN({}, {}) void {}({}) {{", threads, blocks, sym,
         params);
  e.prologue();
  e.line("  extern STRATA_SHARED __attribute__((aligned(1024))) uint8_t "
         "strata_ring_raw[];");
  e.line("  uint8_t *const strata_lds = strata_ring_raw + ((1024u - "
         "(smem_addr(strata_ring_raw) & 1023u)) & 1023u);");
}

void GemmEmitter::producerDone(bool persist) {
  e.line("      }}");
  if (persist)
    e.line("      }}");
  e.line("    }}");
  e.line("  }} else {{");
  if (persist)
    e.line("  int it = 0;");
}

void GemmEmitter::openStaging(bool persist, int64_t off, int64_t ld) {
  e.line("  if (wave < 8) {{");
  if (persist) {
    e.line("    sync_named(2 + (wave >> 2), 128);");
    e.line("    uint8_t *const cs = strata_lds + {} + (wave >> 2) * {};", off,
           64 * ld);
  } else {
    e.line("    sync_named(1, 256);");
    e.line("    uint8_t *const cs = strata_lds + (wave >> 2) * {};", 64 * ld);
  }
}

void GemmEmitter::stagedStores(const std::string &ptr, int64_t n, int64_t esz,
                               int64_t ld, int64_t cols) {
  const int64_t chunks = cols * esz / 16;
  e.line("    sync_named(2 + (wave >> 2), 128);");
  e.line("    for (int i = tid_x() & 127; i < {}; i += 128) {{", 64 * chunks);
  e.line("      const int r = i / {}, ch = i % {};", chunks, chunks);
  e.line("      const long m = m0 + (wave >> 2) * 64 + r, n = n0 + ch * {};",
         16 / esz);
  e.line("      if (m < M && n < {}L)", n);
  e.line("        *(strata_u4 *)({} + m * {}L + n) = *(const strata_u4 *)(cs + "
         "r * {} + ch * 16);",
         ptr, n, ld);
  e.line("    }}");
}

int GemmEmitter::tmaColumns(int64_t n) {
  // The widest tile with the fewest columns past N.
  int64_t best = INT64_MAX;
  int bn = 0;
  for (int cand : {256, 192, 176, 160, 128, 64}) {
    int64_t cover = (n + cand - 1) / cand * cand;
    if (cover < best)
      best = cover, bn = cand;
  }
  return bn;
}

bool GemmEmitter::mergeSkinny(Gemm &g, const Chain &c, Gemm &r,
                              const Chain &rc) {
  if (!g.tma || c.streamMean || !r.skinny || r.n > 4 ||
      r.w[0].ctype != "float" || r.k != g.k ||
      rc.mm->inputs[0].kind != BodyRef::Kind::In ||
      rc.mm->inputs[0].index != c.mm->inputs[0].index ||
      !(r.a.shape == g.a.shape) || r.mRows != g.mRows)
    return false;
  const int64_t base = (g.n + 15) / 16 * 16;
  const int bn = tmaColumns(base + 16);
  const int64_t sb = kTmaARows * 128 + int64_t(bn) * 128;
  const int stages = static_cast<int>(std::min<int64_t>(
      {8, std::max<int64_t>(2, (g.k + 63) / 64), tmaRingBytes(1) / sb}));
  if (stages < 2)
    return false;
  g.bn = bn;
  g.stages = stages;
  g.tmaBlocks = 1;
  g.nMain = g.n;
  g.n = base + 16;
  g.extra = &r;
  g.extraBase = base;
  return true;
}

bool GemmEmitter::pickTma(Gemm &g, const Chain &c, const Tensor &y,
                          TmaUse use) {
  if (use == TmaUse::None || e.target != "sm_90" || !g.mma || g.skinny ||
      g.split != 1 || g.w.size() != 1 || g.a.ctype != "bf16" ||
      g.aIndex != "m" || g.k % 8 != 0 ||
      !(g.w[0].ctype == "bf16" || g.w[0].ctype == "f16" ||
        (use == TmaUse::Quantised && g.w[0].quant())) ||
      option(e.plan, Opt::GemmTma) == 0)
    return false;
  const BodyRef &a = c.mm->inputs[0], &w = c.mm->inputs[1];
  if (a.kind != BodyRef::Kind::In || w.kind != BodyRef::Kind::In ||
      e.kernel.inputs[a.index].isWeight)
    return false;
  // A's rows as one dim of the map: exact where y's rows are not floored.
  const format::PlanDim &yd = y.shape[0];
  if (g.mPer != 1 && yd.div != 1)
    return false;
  // Dequantising W pays off only over many rows: not for GEMMs whose rows
  // stay few at any T (the last position's logits).
  if (g.w[0].quant() &&
      (yd.coef == 0 || yd.at(kTmaMinTokens) * g.mPer < kTmaMinTokens))
    return false;
  int bn = 0, blocks = 1;
  if (c.streamMean) {
    // 128 columns, a box of bd = 128 / ns per stream (each a whole number
    // of 16-column tiles, so a thread holds every stream of its columns and
    // the mean is taken in registers); two blocks an SM, so one block's
    // epilogue (reading the image) overlaps the other's K loop (K is the
    // rank, a few steps).
    Tensor xn = e.tensor(c.streamMean->inputs[0]);
    int64_t ns = xn.shape[1].constant, d = xn.shape[2].constant;
    const BodyRef &x = c.streamMean->inputs[0];
    if (128 % ns != 0 || (128 / ns) % 16 != 0 || d % (128 / ns) != 0 ||
        128 / ns > 64 || x.kind != BodyRef::Kind::In ||
        e.kernel.inputs[x.index].isWeight || xn.ctype != "bf16" ||
        xn.shape.size() != 3 || g.mPer != 1 || !(xn.shape[0] == y.shape[0]) ||
        d % 8 != 0)
      return false;
    bn = 128;
    blocks = 2;
    g.xIn = x.index;
  } else {
    bn = tmaColumns(g.n);
    if (pairOn(e.plan) && bn > 128)
      bn = 128, blocks = 2;
  }
  const int64_t sb = kTmaARows * 128 + int64_t(bn) * 128;
  const int64_t kt = (g.k + 63) / 64;
  // The stream mean's image tile (kTmaARows rows x 128 columns, bf16)
  // sits after the ring.
  const int64_t xBytes = c.streamMean ? kTmaARows * 128 * 2 : 0;
  int stages = static_cast<int>(std::min<int64_t>(
      {8, kt < 2 ? 2 : kt, (tmaRingBytes(blocks) - xBytes) / sb}));
  if (stages < 2)
    return false;
  // The form row's rows and block (KernelVariants.def; the device code's
  // ring and warp roles are written for kTmaARows rows: VariantTilesTest
  // checks the row says so).
  const ir::KernelForm &f =
      ir::formRow(*ir::lookupTarget(e.target), "tma_wgmma");
  g.tma = true;
  g.tmaBlocks = blocks;
  g.csTile = false;
  g.bm = f.tileM;
  g.bn = bn;
  g.nt = f.threads;
  g.stages = stages;
  g.aIn = a.index;
  g.wIn = w.index;
  g.mDim = {yd.coef * g.mPer, yd.constant * g.mPer, yd.div};
  return true;
}

void GemmEmitter::addTensorMaps(Gemm &g, const Chain &c) {
  format::PlanTensorMap a;
  a.operand = e.kernel.inputs[g.aIn];
  a.dtype = format::PlanDType::BF16;
  a.dims = {{0, g.k, 1}, g.mDim};
  a.strides = {static_cast<uint64_t>(g.k * 2)};
  a.box = {64, static_cast<uint32_t>(kTmaARows)};
  a.swizzle = 128;
  g.mapA = static_cast<int>(e.out.tensorMaps.size());
  e.out.tensorMaps.push_back(a);
  format::PlanTensorMap w = a;
  if (g.wsOff >= 0) {
    w.workspace = true;
    w.operand = {false, 0};
    w.offset = static_cast<uint64_t>(g.wsOff);
  } else {
    w.operand = e.kernel.inputs[g.wIn];
  }
  w.dims = {{0, g.k, 1}, {0, g.n, 1}};
  // The stream mean's tile is the streams' column ranges, a box each.
  uint32_t rows = static_cast<uint32_t>(g.bn);
  if (c.streamMean)
    rows /= static_cast<uint32_t>(
        e.tensor(c.streamMean->inputs[0]).shape[1].constant);
  w.box = {64, rows};
  g.mapW = static_cast<int>(e.out.tensorMaps.size());
  e.out.tensorMaps.push_back(w);
  if (c.streamMean) {
    Tensor xn = e.tensor(c.streamMean->inputs[0]);
    const int64_t ns = xn.shape[1].constant, d = xn.shape[2].constant;
    format::PlanTensorMap x;
    x.operand = e.kernel.inputs[g.xIn];
    x.dtype = format::PlanDType::BF16;
    // Dims (d, rows, streams): the tile lies in shared memory as
    // [stream][row][bd], and the swizzle as wide as a row of bd puts the 8
    // rows a wave's accumulators span in distinct banks.
    x.dims = {{0, d, 1}, g.mDim, {0, ns, 1}};
    x.strides = {static_cast<uint64_t>(ns * d * 2),
                 static_cast<uint64_t>(d * 2)};
    x.box = {static_cast<uint32_t>(g.bn / ns), static_cast<uint32_t>(kTmaARows),
             static_cast<uint32_t>(ns)};
    x.swizzle = static_cast<uint32_t>(g.bn / ns * 2);
    g.mapX = static_cast<int>(e.out.tensorMaps.size());
    e.out.tensorMaps.push_back(x);
  }
}

void GemmEmitter::emitTmaKernel(const std::vector<Chain> &chains,
                                std::vector<Gemm> &gemms,
                                const std::vector<size_t> &idx,
                                const std::string &params) {
  // Warps 0-7 are two consumer warpgroups (rows 0-63 and 64-127 of the
  // tile), warp 8 the producer (one lane issues every copy).
  int64_t ring = 0;
  int maxStages = 0, blocks = 2;
  // A persistent kernel keeps the staged results and the stream mean's
  // image tile out of the ring (the producer refills it during the
  // epilogue): fewer stages where they do not fit beside it.
  bool persist = persistFor(e.plan, e.kernel.label()) && idx.size() == 1;
  std::vector<bool> staged(gemms.size(), false);
  int64_t stageOff = 0, xOff = 0;
  for (size_t ci : idx) {
    Gemm &g = gemms[ci];
    const Chain &c = chains[ci];
    const int64_t sb = kTmaARows * 128 + int64_t(g.bn) * 128;
    const int64_t xBytes = g.mapX >= 0 ? int64_t(kTmaARows) * 256 : 0;
    // A chain whose one store is its result in rows of N (row m, column n
    // at m * N + n) stores through shared memory, as the grouped GEMMs do
    // (GemmEmitter::stagedStores).
    const Tensor &o = c.out;
    const int64_t esz = o.ctype == "float" ? 4 : 2;
    const int64_t csBytes = 128 * (g.bn * esz + 16);
    const bool stageable =
        stagedOn(e.plan) && !c.streamMean && !g.extra && c.stores == 1 &&
        g.mPer == 1 && !o.isTemp && o.ctype != "int32_t" &&
        constProduct(o.shape, 1) == g.n && (g.n * esz) % 16 == 0 &&
        g.epilogue.back().rfind("st(", 0) == 0;
    // Persistent: two stages at least beside the staged results, else the
    // results stored from the accumulators, else not persistent.
    auto fit = [&](bool st) {
      return (tmaRingBytes(g.tmaBlocks) - xBytes - (st ? csBytes : 0)) / sb;
    };
    staged[ci] =
        stageable && (persist ? fit(true) >= 2 : csBytes <= g.stages * sb);
    if (persist && fit(staged[ci]) < 2) {
      persist = false;
      staged[ci] = stageable && csBytes <= g.stages * sb;
    }
    if (persist) {
      g.stages = static_cast<int>(std::min<int64_t>(g.stages, fit(staged[ci])));
      stageOff = g.stages * sb;
      xOff = stageOff + (staged[ci] ? csBytes : 0);
      ring = xOff + xBytes;
    } else {
      ring = std::max(ring, g.stages * sb + xBytes);
    }
    maxStages = std::max(maxStages, g.stages);
    blocks = std::min(blocks, g.tmaBlocks);
  }
  openTmaKernel(blocks, sym_, params);
  // full[s], empty[s], then xfull (the stream mean's image tile; and,
  // persistent, xempty).
  e.line("  uint64_t *const full = (uint64_t *)(strata_lds + {}), *const "
         "empty = full + {}, *const xfull = full + {};",
         ring, maxStages, 2 * maxStages);
  int64_t ybase = 0;
  format::PlanDim mDim = gemms[idx[0]].mDim;
  const format::PlanDim rowTiles = tilesOf(mDim, 1, kTmaARows);
  const bool colsFast =
      !persist &&
      tileOrder(rowTiles, idx.size() == 1 && !chains[idx[0]].streamMean);
  for (size_t ci : idx) {
    Gemm &g = gemms[ci];
    const Chain &c = chains[ci];
    const int64_t sb = kTmaARows * 128 + int64_t(g.bn) * 128;
    int64_t ntiles = c.streamMean ? g.n / g.bn : (g.n + g.bn - 1) / g.bn;
    int64_t ns = 0, d = 0, bd = 0;
    if (c.streamMean) {
      Tensor xn = e.tensor(c.streamMean->inputs[0]);
      ns = xn.shape[1].constant, d = xn.shape[2].constant, bd = g.bn / ns;
    }
    // The tile's origin: rows m0.., columns n0.. (the stream mean: d0..
    // of each stream).
    const std::string col0 = c.streamMean ? "d0" : "n0";
    const int64_t colStep = c.streamMean ? bd : g.bn;
    if (persist) {
      // Tile i is row tile i / ntiles, column tile i % ntiles: consecutive
      // blocks share a row tile of A, as colsFast orders them.
      e.line("  {{");
      e.line("  const long M = {};", g.mRows);
      e.line("  const long tiles = (M + {}) / {} * {};", kTmaARows - 1,
             kTmaARows, ntiles);
    } else {
      e.line("  if (ct >= {} && ct < {}) {{", ybase, ybase + ntiles);
      e.line("  const long M = {};", g.mRows);
      e.line("  const long m0 = (long)rt * {};", g.bm);
      e.line("  if (m0 >= M) return;");
      e.line("  const long {} = (long)(ct - {}) * {};", col0, ybase, colStep);
    }
    const std::string tileLoop =
        "for (long tile = bid_x(), tn = 0; tile < tiles; tile += grid_x(), "
        "++tn)";
    const std::string origin =
        fmt::format("const long m0 = tile / {} * {}, {} = tile % {} * {};",
                    ntiles, kTmaARows, col0, ntiles, colStep);
    e.line("  if (tid_x() == 0) {{");
    e.line("    for (int s = 0; s < {}; ++s) {{ mbar_init(&full[s], 1); "
           "mbar_init(&empty[s], 2); }}",
           g.stages);
    if (g.mapX >= 0)
      e.line("    mbar_init(xfull, 1);");
    if (g.mapX >= 0 && persist)
      e.line("    mbar_init(xfull + 1, 2);");
    e.line("    mbar_init_fence();");
    e.line("  }}");
    e.line("  sync_block();");
    // The wave index from lane 0 (a shuffle), so ptxas knows the role
    // branches are warp-uniform: from tid_x() it took the consumers for a
    // divergent path and serialised their wgmma in some shapes (C7520).
    e.line("  const int wave = shfl_i(tid_x() >> 5, 0), kt = {};",
           (g.k + 63) / 64);
    if (!persist)
      e.line("  float acc0[1][{}][8] = {{}};", g.bn / 16);
    e.line("  if (wave == 8) {{");
    e.line("    if (lane_id() == 0) {{");
    e.line("      uint64_t ma, mw;");
    e.line("      STRATA_PARAM_ADDR(ma, \"{}\");",
           e.tensorMapParam(g.mapA, sym_));
    e.line("      STRATA_PARAM_ADDR(mw, \"{}\");",
           e.tensorMapParam(g.mapW, sym_));
    if (persist) {
      e.line("      int it = 0;");
      e.line("      {} {{", tileLoop);
      e.line("      {}", origin);
      e.line("      for (int k = 0; k < kt; ++k, ++it) {{");
      e.line("        const int s = it % {};", g.stages);
      e.line("        mbar_wait(&empty[s], ((it / {}) & 1) ^ 1);", g.stages);
    } else {
      e.line("      for (int k = 0; k < kt; ++k) {{");
      e.line("        const int s = k % {};", g.stages);
      e.line("        mbar_wait(&empty[s], ((k / {}) & 1) ^ 1);", g.stages);
    }
    e.line("        uint8_t *st = strata_lds + s * {};", sb);
    e.line("        mbar_expect_tx(&full[s], {});", sb);
    e.line("        tma_load_2d(st, ma, k * 64, (int)m0, &full[s]);");
    if (c.streamMean)
      for (int64_t s = 0; s < ns; ++s)
        e.line("        tma_load_2d(st + {}, mw, k * 64, (int)({}L + d0), "
               "&full[s]);",
               kTmaARows * 128 + s * bd * 128, s * d);
    else
      e.line("        tma_load_2d(st + {}, mw, k * 64, (int)n0, &full[s]);",
             kTmaARows * 128);
    if (g.mapX >= 0 && persist) {
      // The image tile once the ring's free stages are issued: the next
      // stage waits for the previous tile's epilogue anyway, which is
      // when its mean has read the image tile.
      e.line("        if (k == {}) {{",
             std::min<int64_t>(g.stages, (g.k + 63) / 64) - 1);
      e.line("          uint64_t mx;");
      e.line("          STRATA_PARAM_ADDR(mx, \"{}\");",
             e.tensorMapParam(g.mapX, sym_));
      e.line("          mbar_wait(xfull + 1, (int)(tn & 1) ^ 1);");
      e.line("          mbar_expect_tx(xfull, {});", kTmaARows * 256);
      e.line("          tma_load_3d(strata_lds + {}, mx, (int)d0, (int)m0, 0, "
             "xfull);",
             xOff);
      e.line("        }}");
    }
    if (g.mapX >= 0 && !persist) {
      // The image tile behind the first step's operands: needed only by
      // the epilogue.
      e.line("        if (k == 0) {{");
      e.line("          uint64_t mx;");
      e.line("          STRATA_PARAM_ADDR(mx, \"{}\");",
             e.tensorMapParam(g.mapX, sym_));
      e.line("          mbar_expect_tx(xfull, {});", kTmaARows * 256);
      e.line("          tma_load_3d(strata_lds + {}, mx, (int)d0, (int)m0, 0, "
             "xfull);",
             g.stages * sb);
      e.line("        }}");
    }
    producerDone(persist);
    if (persist) {
      e.line("  {} {{", tileLoop);
      e.line("  {}", origin);
      e.line("  float acc0[1][{}][8] = {{}};", g.bn / 16);
      e.line("    tma_gemm_consume<{}, {}, {}>(&acc0[0][0][0], strata_lds, "
             "full, empty, kt, wave >> 2, it, true);",
             g.bn, g.stages, sb);
      e.line("  it += kt;");
    } else {
      e.line("    tma_gemm_consume<{}, {}, {}>(&acc0[0][0][0], strata_lds, "
             "full, empty, kt, wave >> 2);",
             g.bn, g.stages, sb);
      e.line("  }}");
    }
    const Tensor &o = c.out;
    const int64_t esz = o.ctype == "float" ? 4 : 2;
    const int64_t ld = g.bn * esz + 16;
    if (staged[ci]) {
      openStaging(persist, stageOff, ld);
      accLoop("    ", "        ", g.bn / 16, 1, true);
      e.line("        const long m = m0 + (wave >> 2) * 64 + r, n = {};",
             g.colOf("c"));
      e.line("        float v = acc0[0][j][q];");
      e.line("        if (m < M && n < {}L) {{", g.n);
      for (size_t li = 0; li + 1 < g.epilogue.size(); ++li)
        e.line("          {}", g.epilogue[li]);
      e.line("          st(({} *)(cs + r * {}), c, {});", o.ctype, ld,
             c.outVar);
      e.line("        }}");
      e.line("      }}");
      stagedStores(o.ptr, g.n, esz, ld, g.bn);
      e.line("  }}");
    } else {
      accLoop("  ", "        ", g.bn / 16, 1, false);
      // The producer warp holds no accumulators: its rows read as past M.
      e.line("        long m = wave < 8 ? m0 + r : M, n = {};", g.colOf("c"));
      e.line("        float v = acc0[0][j][q];");
      e.line("        if (m < M && n < {}L) {{", g.extra ? g.nMain : g.n);
      for (size_t li = 0; li < g.epilogue.size(); ++li)
        // The stream mean keeps each gate in its accumulator.
        e.line("          {}",
               c.streamMean && li + 1 == g.epilogue.size()
                   ? fmt::format("acc0[0][j][q] = {};", c.gateVar)
                   : g.epilogue[li]);
      e.line("        }}");
      e.line("      }}");
      if (g.extra) {
        // The merged chain's outputs: lane t of each quad in the column tile
        // holding extraBase sums the three terms of output t.
        const int64_t tile = g.extraBase / g.bn, j0 = g.extraBase % g.bn / 16;
        e.line("  if (n0 == {}L && wave < 8 && (lane_id() & 3) < {}) {{",
               tile * g.bn, g.extra->n);
        e.line("#pragma unroll");
        e.line("    for (int h = 0; h < 2; ++h) {{");
        e.line("      const long m = m0 + (wave >> 2) * 64 + (wave & 3) * 16 + "
               "(lane_id() >> 2) + 8 * h, n = lane_id() & 3;");
        e.line(
            "      const float v = acc0[0][{}][2 * h] + acc0[0][{}][2 * h + 1] "
            "+ acc0[0][{}][4 + 2 * h];",
            j0, j0, j0);
        e.line("      if (m < M) {{");
        for (const std::string &l : g.extra->epilogue)
          e.line("        {}", l);
        e.line("      }}");
        e.line("    }}");
        e.line("  }}");
      }
      if (c.streamMean) {
        // Stream s of tile column c is column s * bd + c: accumulator (j + s
        // bd / 16, q) of the same thread.
        Tensor y = e.tensor(c.streamMean->outputs[0]);
        e.line("  mbar_wait(xfull, {});", persist ? "(int)(tn & 1)" : "0");
        e.line("  const uint8_t *const Xs = strata_lds + {};",
               persist ? xOff : g.stages * sb);
        // Two adjacent columns (accumulators q, q + 1) a step: one 4-byte
        // read of the image tile, one 4-byte store of the mean.
        accLoop("  ", "        ", bd / 16, 2, false);
        e.line("        const long m = wave < 8 ? m0 + r : M;");
        e.line("        if (m < M) {{");
        e.line("          float a0 = 0, a1 = 0;");
        e.line("#pragma unroll");
        e.line("          for (int s = 0; s < {}; ++s) {{", ns);
        // Image element (s, r, c) of the tile, swizzled by the copy over
        // rows of bd (2 bd bytes: 32, 64 or 128): the 16-byte chunk bits of
        // the offset (from bit 4) XOR the bits from bit 7; c is even, so c
        // and c + 1 share a 4-byte word.
        e.line("            const uint32_t o = ((s * {} + r) * {} + c) * 2;",
               kTmaARows, bd);
        e.line("            const uint32_t x = *(const uint32_t *)(Xs + (o ^ "
               "((o >> 7) & {}) << 4));",
               bd * 2 / 16 - 1);
        e.line("            a0 += acc0[0][j + s * {}][q] * __builtin_bit_cast("
               "float, x << 16);",
               bd / 16);
        e.line(
            "            a1 += acc0[0][j + s * {}][q + 1] * __builtin_bit_cast("
            "float, x & 0xffff0000u);",
            bd / 16);
        e.line("          }}");
        e.line("          st2({}, m * {}L + d0 + c, a0 / {}.0f, a1 / {}.0f);",
               y.ptr, d, ns, ns);
        e.line("        }}");
        e.line("      }}");
        if (persist) {
          // The image tile is free once every thread of both warpgroups
          // read it (one arrival each).
          e.line("  sync_named(2 + (wave >> 2), 128);");
          e.line("  if ((tid_x() & 127) == 0) mbar_arrive(xfull + 1);");
        }
      }
    }
    if (persist)
      e.line("  }}");
    e.line("  return;");
    e.line("  }}");
    if (persist)
      e.line("  }}");
    ybase += ntiles;
  }
  e.line("}}");
  const format::PlanDim colTiles{0, ybase, 1};
  if (persist) {
    // A block per SM (two where the tile fits twice), each looping over
    // the tiles.
    const ir::Target *t = ir::lookupTarget(e.target);
    e.out.grid = {{0, int64_t(t->units) * blocks, 1}, {0, 1, 1}, {0, 1, 1}};
  } else {
    e.out.grid = {colsFast ? colTiles : rowTiles,
                  colsFast ? rowTiles : colTiles,
                  {0, 1, 1}};
  }
  e.out.block = {
      static_cast<uint32_t>(
          ir::formRow(*ir::lookupTarget(e.target), "tma_wgmma").threads),
      1, 1};
  e.out.sharedBytes = static_cast<uint64_t>(
      1024 + ring + (2 * int64_t(maxStages) + (persist ? 2 : 1)) * 8);
}

} // namespace strata::codegen::detail::gemm
