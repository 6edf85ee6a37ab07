//===- GroupedTma.cpp - the grouped expert GEMMs' TMA tile (sm_90a) -------===//
//
// The grouped experts on the TMA tile (sm_90a): a pre-launch gathers A's
// rows in slot order and converts the experts' weights into the
// workspace (gate and up interleaved per 128-column half, so SwiGLU runs
// in registers) and writes the row-tile table; then the producer and
// consumer warpgroups as in codegen/gemm/GemmTma.cpp.
//
//===----------------------------------------------------------------------===//
#include "codegen/gemm/GemmEmitter.h"

#include "codegen/Limits.h"

#include "ir/Target.h"

#include <algorithm>

namespace strata::codegen::detail::gemm {

void GemmEmitter::groupedTma(Gemm g, bool swiglu, const Tensor &y,
                             const Tensor &off, const Tensor &perm,
                             int64_t slotsPerToken, int64_t experts,
                             const GroupedForm &f) {
  const Tensor &w0 = g.w[0];
  // The tile (selectGrouped): gate and up side by side (bh columns of
  // each), or bn columns of N.
  const int64_t bh = f.bh, bn = f.bn, nw = f.nw;
  // The form row (KernelVariants.def): the block, and the tile recorded
  // for VariantTilesTest (the ring is written for kTmaARows rows).
  const ir::KernelForm &row =
      ir::formRow(*ir::lookupTarget(e.target), "tma_wgmma_grouped");
  e.recordTile(row.name, kTmaARows, static_cast<int>(bn));
  const int64_t colTiles = swiglu ? (g.n + bh - 1) / bh : (g.n + bn - 1) / bn;
  const int blocks = f.blocks, stages = f.stages;
  const int64_t sb = f.stageBytes, kt = (g.k + 63) / 64;
  // The workspace: W as bf16 [E * nw, K], the row-tile table (expert, its
  // tile) at the longest prompt, then (swiglu) A's rows gathered in slot
  // order, [S, K].
  format::PlanDim rowTiles = tilesOf(y.shape[0], 1, kTmaARows);
  rowTiles.constant += experts;
  const int64_t wBytes = (experts * nw * g.k * 2 + 255) / 256 * 256;
  const int64_t tableOff = wBytes;
  const int64_t aOff =
      tableOff + (rowTiles.at(e.plan.maxTokens) * 8 + 255) / 256 * 256;
  e.workspace = true;
  e.out.workspace = {swiglu ? y.shape[0].coef * g.k * 2 : 0,
                     aOff + (swiglu ? y.shape[0].constant * g.k * 2 : 0), 1};
  format::PlanTensorMap a;
  a.dtype = format::PlanDType::BF16;
  a.dims = {{0, g.k, 1}, y.shape[0]};
  a.strides = {static_cast<uint64_t>(g.k * 2)};
  a.box = {64, static_cast<uint32_t>(kTmaARows)};
  a.swizzle = 128;
  if (swiglu) {
    a.workspace = true;
    a.operand = {false, 0};
    a.offset = static_cast<uint64_t>(aOff);
  } else {
    a.operand = e.kernel.inputs[0];
  }
  format::PlanTensorMap w = a;
  w.workspace = true;
  w.operand = {false, 0};
  w.offset = 0;
  w.dims = {{0, g.k, 1}, {0, experts * nw, 1}};
  w.box = {64, static_cast<uint32_t>(bn)};
  e.out.tensorMaps = {a, w};
  std::string params = e.params();
  const std::string sym = "@SYMBOL@_big";

  // The pre-launch: block 0 writes the row-tile table (a scan of the
  // experts' tile counts, as the kernel's own code does in every block),
  // all blocks dequantise W into the workspace and (swiglu) gather A.
  constexpr int kPrepThreads = 256;
  constexpr int64_t kPrepBlocks = 1056; // 8 blocks of 256 on each of 132 SMs
  const std::string rows = dimExpr(rowTiles);
  e.line("STRATA_KERNEL_MIN({}, 1) void {}_prep({}) {{", kPrepThreads, sym,
         params);
  e.prologue();
  e.line("  const long stride = (long)grid_x() * {} * 8;", kPrepThreads);
  e.line("  if (bid_x() == 0) {{");
  e.line("    STRATA_SHARED int scan[{}];", kPrepThreads);
  e.line("    const int per = {};",
         (experts + kPrepThreads - 1) / kPrepThreads);
  e.line("    int mine = 0;");
  e.line("    for (int x = tid_x() * per; x < (tid_x() + 1) * per && x < {}; "
         "++x)",
         experts);
  e.line("      mine += ({}[x + 1] - {}[x] + {}) / {};", off.ptr, off.ptr,
         kTmaARows - 1, kTmaARows);
  e.line("    scan[tid_x()] = mine;");
  e.line("    sync_block();");
  e.line("    for (int s = 1; s < {}; s <<= 1) {{", kPrepThreads);
  e.line("      int add = tid_x() >= s ? scan[tid_x() - s] : 0;");
  e.line("      sync_block();");
  e.line("      scan[tid_x()] += add;");
  e.line("      sync_block();");
  e.line("    }}");
  e.line("    int *const table = (int *)(ws + {}L);", tableOff);
  e.line("    int at = scan[tid_x()] - mine;");
  e.line("    for (int x = tid_x() * per; x < (tid_x() + 1) * per && x < {}; "
         "++x)",
         experts);
  e.line("      for (int t = 0; t < ({}[x + 1] - {}[x] + {}) / {}; ++t, ++at) "
         "{{ table[2 * at] = x; table[2 * at + 1] = t; }}",
         off.ptr, off.ptr, kTmaARows - 1, kTmaARows);
  e.line("    for (long t = scan[{}] + tid_x(); t < {}; t += {}) table[2 * t] "
         "= -1;",
         kPrepThreads - 1, rows, kPrepThreads);
  e.line("  }}");
  const int64_t rowBytes =
      w0.quant() ? g.k / w0.blockSize * w0.blockBytes : g.k * 2;
  e.line("  for (long i = ((long)bid_x() * {} + tid_x()) * 8; i < {}L; i += "
         "stride) {{",
         kPrepThreads, experts * nw * g.k);
  e.line("    const long r = i / {}L, k = i % {}L, ex = r / {}L;", g.k, g.k,
         nw);
  if (swiglu) {
    e.line("    const long h = r % {}L, n = h / {} * {} + h % {};", nw, bn, bh,
           bh);
    e.line("    const uint8_t *const src = (const uint8_t *)(h % {} < {} ? {} "
           ": {});",
           bn, bh, g.w[0].ptr, g.w[1].ptr);
  } else {
    e.line("    const long n = r % {}L;", nw);
    e.line("    const uint8_t *const src = (const uint8_t *){};", w0.ptr);
  }
  e.line("    float v[8] = {{}};");
  e.line("    if (n < {}L) {{", g.n);
  e.line("      const uint8_t *const row = src + (ex * {}L + n) * {}L;", g.n,
         rowBytes);
  if (w0.quant())
    e.line("      strata_dq8_{}(row + k / {} * {}, (int)(k % {}), v);",
           format::ggmlTypeInfo(w0.ggml).irName, w0.blockSize, w0.blockBytes,
           w0.blockSize);
  else
    e.line("      ld8((const {} *)row, k, v);", w0.ctype);
  e.line("    }}");
  e.line("    *(strata_u4 *)(ws + i * 2) = pack8_mma(v);");
  e.line("  }}");
  if (swiglu) {
    e.line("  for (long i = ((long)bid_x() * {} + tid_x()) * 8; i < {} * {}L; "
           "i += stride) {{",
           kPrepThreads, dimExpr(y.shape[0]), g.k);
    e.line("    const long m = i / {}L, k = i % {}L;", g.k, g.k);
    e.line("    *(strata_u4 *)(ws + {}L + i * 2) = *(const strata_u4 *)({} + "
           "(long)({}[m] / {}) * {}L + k);",
           aOff, g.a.ptr, perm.ptr, slotsPerToken, g.k);
    e.line("  }}");
  }
  e.line("}}");
  format::PlanPreLaunch pre;
  pre.grid = {{0, kPrepBlocks, 1}, {0, 1, 1}, {0, 1, 1}};
  pre.block = {kPrepThreads, 1, 1};
  e.out.pre = std::move(pre);

  // The kernel: a producer warp copying A's tile (the expert's rows from
  // its offset; rows past them are masked) and W's (the expert's block of
  // rows in the workspace) into the ring, two consumer warpgroups.
  // Gate column c of the tile is accumulator (j, q), its up column (j +
  // bh / 16, q) of the same thread.
  const int64_t outCols = swiglu ? bh : bn;
  const int64_t esz = y.ctype == "float" ? 4 : 2;
  const int64_t ld = outCols * esz + 16, csBytes = 128 * ld;
  const bool stageable =
      stagedOn(e.plan) && (g.n * esz) % 16 == 0 && y.ctype != "int32_t";
  // Persistent (persistFor): blocks loop over the tiles, the staged
  // results outside the ring where two stages still fit.
  const bool persist = persistFor(e.plan, e.kernel.label());
  int ks = stages;
  bool staged = stageable && csBytes <= stages * sb;
  if (persist) {
    const int64_t beside = (tmaRingBytes(blocks) - csBytes) / sb;
    staged = stageable && beside >= 2;
    if (staged)
      ks = static_cast<int>(std::min<int64_t>(stages, beside));
  }
  const int64_t stageOff = ks * sb,
                ring = stageOff + (persist && staged ? csBytes : 0);
  openTmaKernel(blocks, sym, params);
  e.line("  uint64_t *const full = (uint64_t *)(strata_lds + {}), *const "
         "empty = full + {};",
         ring, ks);
  // A tile's expert and rows (the table's row tile rt), its columns (ct).
  const std::string tileOf[] = {
      fmt::format("const int *const tt = (const int *)(ws + {}L) + 2 * rt;",
                  tableOff),
      "const int ex = tt[0];",
      fmt::format("const long M = {}[ex + 1];", off.ptr),
      fmt::format("const long m0 = {}[ex] + (long)tt[1] * {};", off.ptr,
                  kTmaARows),
      fmt::format("const long n0 = (long)ct * {};", swiglu ? bh : bn)};
  const std::string tileLoop = fmt::format(
      "for (long tile = bid_x(); tile < tiles; tile += grid_x()) {{ const "
      "long rt = tile / {}, ct = tile % {};",
      colTiles, colTiles);
  bool colsFast = false;
  if (persist) {
    e.line("  const long tiles = {} * {}L;", dimExpr(rowTiles), colTiles);
  } else {
    colsFast = tileOrder(rowTiles, true);
    e.line("  {}", tileOf[0]);
    e.line("  if (tt[0] < 0) return;");
    for (int i = 1; i < 5; ++i)
      e.line("  {}", tileOf[i]);
  }
  e.line("  if (tid_x() == 0) {{");
  e.line("    for (int s = 0; s < {}; ++s) {{ mbar_init(&full[s], 1); "
         "mbar_init(&empty[s], 2); }}",
         ks);
  e.line("    mbar_init_fence();");
  e.line("  }}");
  e.line("  sync_block();");
  // The wave index from lane 0: warp-uniform to ptxas (as the TMA tile's).
  e.line("  const int wave = shfl_i(tid_x() >> 5, 0), kt = {};", kt);
  if (!persist)
    e.line("  float acc0[1][{}][8] = {{}};", bn / 16);
  e.line("  if (wave == 8) {{");
  e.line("    if (lane_id() == 0) {{");
  e.line("      uint64_t ma, mw;");
  e.line("      STRATA_PARAM_ADDR(ma, \"{}\");", e.tensorMapParam(0, sym));
  e.line("      STRATA_PARAM_ADDR(mw, \"{}\");", e.tensorMapParam(1, sym));
  if (persist) {
    // Tiles past the table's last are skipped by the producer and the
    // consumers alike (the ring's position stays in step).
    e.line("      int it = 0;");
    e.line("      {}", tileLoop);
    e.line("      {}", tileOf[0]);
    e.line("      if (tt[0] < 0) continue;");
    e.line("      {}", tileOf[1]);
    e.line("      {}", tileOf[3]);
  }
  e.line("      const int wr = (int)(ex * {}L + (long)ct * {});", nw, bn);
  e.line("      for (int k = 0; k < kt; ++k{}) {{", persist ? ", ++it" : "");
  e.line("        const int s = {} % {};", persist ? "it" : "k", ks);
  e.line("        mbar_wait(&empty[s], (({} / {}) & 1) ^ 1);",
         persist ? "it" : "k", ks);
  e.line("        uint8_t *st = strata_lds + s * {};", sb);
  e.line("        mbar_expect_tx(&full[s], {});", sb);
  e.line("        tma_load_2d(st, ma, k * 64, (int)m0, &full[s]);");
  e.line("        tma_load_2d(st + {}, mw, k * 64, wr, &full[s]);",
         kTmaARows * 128);
  producerDone(persist);
  if (persist) {
    e.line("  {}", tileLoop);
    e.line("  {}", tileOf[0]);
    e.line("  if (tt[0] < 0) continue;");
    for (int i = 1; i < 5; ++i)
      e.line("  {}", tileOf[i]);
    e.line("  float acc0[1][{}][8] = {{}};", bn / 16);
    e.line("    tma_gemm_consume<{}, {}, {}>(&acc0[0][0][0], strata_lds, "
           "full, empty, kt, wave >> 2, it, true);",
           bn, ks, sb);
    e.line("  it += kt;");
  } else {
    e.line("    tma_gemm_consume<{}, {}, {}>(&acc0[0][0][0], strata_lds, "
           "full, empty, kt, wave >> 2);",
           bn, ks, sb);
    e.line("  }}");
  }
  auto value = [&](const std::string &q) {
    return swiglu ? fmt::format("sm_silu(acc0[0][j][{}]) * acc0[0][j + {}][{}]",
                                q, bh / 16, q)
                  : fmt::format("acc0[0][j][{}]", q);
  };
  if (staged) {
    // Through shared memory (the ring, once both warpgroups' last wgmma
    // reads are done; persistent: an area of its own, free once the
    // warpgroup stored the previous tile): each warpgroup's 64 rows, then
    // 16-byte stores of whole row pieces. The accumulators' own 2-byte
    // stores touched a sector per row per instruction: the down
    // projection's 839 MB of output ran at 72 % of the L2's throughput.
    openStaging(persist, stageOff, ld);
    accLoop("    ", "        ", outCols / 16, 2, true, false);
    e.line("        st2(({} *)(cs + r * {}), j * 16 + c, {}, {});", y.ctype, ld,
           value("q"), value("q + 1"));
    e.line("      }}");
    stagedStores(y.ptr, g.n, esz, ld, outCols);
    e.line("  }}");
  } else {
    accLoop("  ", "      ", outCols / 16, 1, false);
    // The producer warp holds no accumulators: its rows read as past M.
    e.line("      const long m = wave < 8 ? m0 + r : M, n = n0 + c;");
    e.line("      if (m < M && n < {}L) st({}, m * {}L + n, {});", g.n, y.ptr,
           g.n, value("q"));
    e.line("    }}");
  }
  if (persist)
    e.line("  }}\n  }}");
  e.line("}}");
  const format::PlanDim cols{0, colTiles, 1};
  if (persist)
    e.out.grid = {{0, int64_t(ir::lookupTarget(e.target)->units) * blocks, 1},
                  {0, 1, 1},
                  {0, 1, 1}};
  else
    e.out.grid = {
        colsFast ? cols : rowTiles, colsFast ? rowTiles : cols, {0, 1, 1}};
  e.out.block = {static_cast<uint32_t>(row.threads), 1, 1};
  e.out.sharedBytes = static_cast<uint64_t>(1024 + ring + 2 * int64_t(ks) * 8);
}

} // namespace strata::codegen::detail::gemm
