//===- GroupedEmitter.cpp - the grouped expert GEMMs ----------------------===//
//
// The grouped family: the experts' gate/up (SwiGLU) and down GEMMs over
// expert-sorted rows, each block finding its expert and row tile from
// the offsets; the decode form for runs of a few rows, and the TMA tile
// (GroupedTma.cpp) from kGroupedTmaRows rows an expert. The tiles and
// decode pieces are the GEMM family's (codegen/gemm/GemmEmitter.h).
//
//===----------------------------------------------------------------------===//
#include "codegen/gemm/GemmEmitter.h"

#include "runtime/format/GgmlType.h"

#include <algorithm>

namespace strata::codegen::detail::gemm {

void GemmEmitter::emitGroupedGemv(const Gemm &g, const Tensor &off,
                                  int64_t experts, int64_t slotsPerToken,
                                  int64_t rows, const std::string &sym) {
  // The shape over every routed slot's columns.
  const GemvForm shape = gemvShape(g, slotsPerToken * g.n, rows);
  const int64_t cols = kGemvWarps / shape.slices * shape.cols;
  const int64_t colBlocks = (g.n + cols - 1) / cols;
  // grouped-decode-grid, in the forms of several rows: a slot's column
  // groups on fewer blocks, each looping over groups (gemvBody), so that
  // the per-block work before the first weight load (IQ3_S's grid, the
  // expert's search, A's quantisation: three barriers) is paid once for
  // several groups, and the slots past the first of their expert (most
  // of T x k at a few rows) exit as fewer blocks. One row keeps a block a
  // group: there the loop's groups in a row cost more than the blocks'
  // setup (H100, 12-layer Qwen4-Exp: the gate/up 22.4 against 27.3 us,
  // four rows 3.54 against 3.83 ms a step;
  // bench/results/decode-batch-full12-route-20261206T201225Z-h100.txt).
  const int64_t cap = option(e.plan, Opt::GroupedDecodeGrid);
  int64_t perSlot = colBlocks;
  if (cap > 0 && rows > 1 && slotsPerToken * colBlocks > cap) {
    const int64_t loops = (slotsPerToken * colBlocks + cap - 1) / cap;
    perSlot = (colBlocks + loops - 1) / loops;
  }
  colLoop_ =
      perSlot < colBlocks ? ColumnLoop{colBlocks, perSlot} : ColumnLoop{};
  // grouped-decode-search: the expert's search under IQ3_S's grid copy,
  // one barrier for both (the copy's loads and the offsets' in flight
  // together), `found` not initialised: the offsets are a scan of the
  // experts' counts ending at T k, so exactly one expert holds a slot
  // s < T k.
  const bool oneBarrier = option(e.plan, Opt::GroupedDecodeSearch) != 0;
  // grouped-decode-wide: the chains' wide pieces (Q4_K, Q6_K experts), the
  // expert's rows as aligned as a chain's (whole super-blocks a row).
  groupedWide_ =
      option(e.plan, Opt::GroupedDecodeWide) != 0 && gemvWide(g, rows);
  // grouped-decode-blocks: the one-row form's register cap (the forms of
  // several rows keep gemm-decode-blocks: capped at 64 they spill).
  minBlocks_ = rows == 1 ? option(e.plan, Opt::GroupedDecodeBlocks) : 0;
  gemvOpen(std::any_of(g.w.begin(), g.w.end(),
                       [](const Tensor &w) {
                         return w.ggml == format::GgmlType::IQ3_S;
                       }),
           sym, gemvStage(g, shape), gemvInt8Words(g, rows), groupedWide_,
           !oneBarrier);
  // gemm-decode-prefetch-early: the IQ3_S table's copy (gemvOpen; no
  // kernel's output) before the grid dependency wait, the expert's search
  // (the offsets the kernels before write) after it.
  if (prefetchEarly())
    e.line("  grid_dependency_wait();");
  e.line("  const long s = bid_x() / {}L;", perSlot);
  e.line("  const long base = s * {}L;", perSlot);
  e.line("  if (s >= T * {}L) return;", slotsPerToken);
  // The slot's expert: the one whose slots [off[x], off[x + 1]) hold s,
  // looked for by all the block's threads at once (one round of loads; a
  // binary search waited on nine in a row).
  e.line("  STRATA_SHARED int found;");
  if (!oneBarrier) {
    e.line("  if (tid_x() == 0) found = 0;");
    e.line("  sync_block();");
  }
  e.line("  for (int x = tid_x(); x < {}; x += {})", experts, kGemvWarps * 32);
  e.line("    if ({}[x] <= s && s < {}[x + 1]) found = x;", off.ptr, off.ptr);
  e.line("  sync_block();");
  e.line("  const int ex = found;");
  // The expert's first slot takes all its slots (distinct tokens: at most
  // T, one pass for a decode run): its weights are read once.
  e.line("  if ({}[ex] != s) return;", off.ptr);
  rowBase_ = fmt::format("(long)ex * {}L", g.n);
  gemvBody(g, rows, shape, "s", fmt::format("{}[ex + 1]", off.ptr));
  colLoop_ = ColumnLoop{};
  groupedWide_ = false;
  minBlocks_ = 0;
  gemvClose();
  // (slot, block of its column groups) pairs of T * slotsPerToken slots:
  // grid x, which holds them at any T.
  e.out.grid = {{slotsPerToken * perSlot, 0, 1}, {0, 1, 1}, {0, 1, 1}};
  e.out.block = {kGemvWarps * 32, 1, 1};
  e.out.sharedBytes = 0;
}

void GemmEmitter::groupedTile(const Gemm &g, const Tensor &y, const Tensor &off,
                              int64_t experts, const std::string &sym) {
  std::string params = e.params();
  const int nt = g.nt;
  planBuffers({&g}, int64_t(nt) * 4 + 8); // + the tile scan
  e.line("STRATA_KERNEL_MIN({}, {}) void {}({}) {{", nt, minBlocks({&g}, nt),
         sym, params);
  e.prologue();
  declareRegion();
  format::PlanDim tiles = tilesOf(y.shape[0], 1, g.bm);
  tiles.constant += experts;
  const bool colsFast = tileOrder(tiles, true);
  // Which expert and which of its row tiles this block takes: a block scan
  // of the experts' tile counts.
  constexpr int kPer = 8;
  if (experts > int64_t(nt) * kPer)
    throw Unsupported("more experts than the tile scan covers");
  e.line("  STRATA_SHARED int scan[{}];", nt);
  e.line("  STRATA_SHARED int pick[2];");
  e.line("  const int per = {};", (experts + nt - 1) / nt);
  e.line("  int mine = 0;");
  e.line("  for (int x = tid_x() * per; x < (tid_x() + 1) * per && x < {}; "
         "++x)",
         experts);
  e.line("    mine += ({}[x + 1] - {}[x] + {}) / {};", off.ptr, off.ptr,
         g.bm - 1, g.bm);
  e.line("  scan[tid_x()] = mine;");
  e.line("  if (tid_x() == 0) pick[0] = -1;");
  e.line("  sync_block();");
  e.line("  for (int s = 1; s < {}; s <<= 1) {{", nt);
  e.line("    int add = tid_x() >= s ? scan[tid_x() - s] : 0;");
  e.line("    sync_block();");
  e.line("    scan[tid_x()] += add;");
  e.line("    sync_block();");
  e.line("  }}");
  e.line("  {{");
  e.line("    int before = scan[tid_x()] - mine, tile = rt;");
  e.line("    if (tile >= before && tile < before + mine) {{");
  e.line("      for (int x = tid_x() * per; x < {}; ++x) {{", experts);
  e.line("        int t = ({}[x + 1] - {}[x] + {}) / {};", off.ptr, off.ptr,
         g.bm - 1, g.bm);
  e.line("        if (tile < before + t) {{ pick[0] = x; pick[1] = tile - "
         "before; break; }}");
  e.line("        before += t;");
  e.line("      }}");
  e.line("    }}");
  e.line("  }}");
  e.line("  sync_block();");
  e.line("  if (pick[0] < 0) return;");
  e.line("  const int ex = pick[0];");
  e.line("  const long M = {}[ex + 1];", off.ptr);
  e.line("  const long m0 = {}[ex] + (long)pick[1] * {};", off.ptr, g.bm);
  e.line("  const long n0 = (long)ct * {};", g.bn);
  std::string aRow = aRowOf(g);
  std::vector<std::string> wRows;
  for (const Tensor &w : g.w) {
    int64_t rowBytes = w.quant() ? g.k / w.blockSize * w.blockBytes : g.k;
    wRows.push_back(
        fmt::format("const {} *wrow = {} + ((long)ex * {}L + n) * {}L;",
                    w.quant() ? "uint8_t" : w.ctype, w.ptr, g.n, rowBytes));
  }
  tileLoop(g, aRow, wRows);
  e.line("}}");
  // Row tiles (above): every expert's rows rounded up to the tile, at
  // most ceil(S / BM) + E.
  const format::PlanDim colTiles{0, (g.n + g.bn - 1) / g.bn, 1};
  e.out.grid = {
      colsFast ? colTiles : tiles, colsFast ? tiles : colTiles, {0, 1, 1}};
  e.out.block = {nt, 1, 1};
}

void GemmEmitter::runGrouped() {
  if (e.body.size() != 1)
    throw Unsupported("a grouped GEMM with a fused body");
  const BodyOp &op = e.body[0];
  bool swiglu = op.recipe == Recipe::MoeGroupedSwiglu;
  Gemm g;
  Tensor y = e.tensor(op.outputs[0]);
  Tensor off = e.tensor(op.inputs[swiglu ? 2 : 1]);
  g.a = e.tensor(op.inputs[0]);
  Tensor perm;
  if (swiglu) {
    perm = e.tensor(op.inputs[1]);
    g.w = {e.tensor(op.inputs[3]), e.tensor(op.inputs[4])};
  } else {
    g.w = {e.tensor(op.inputs[2])};
  }
  int64_t experts = g.w[0].shape[0].constant;
  g.n = g.w[0].shape[1].constant;
  g.k = g.w[0].shape[2].constant;
  pickTile(g, e.kernel.variant);
  g.colOf = [](const std::string &c) { return "n0 + " + c; };
  int64_t slotsPerToken = y.shape[0].coef;
  if (y.shape[0].div != 1 || y.shape[0].constant != 0 ||
      (swiglu && g.a.shape[0].coef != 1))
    throw Unsupported("grouped rows are not T * k");
  g.epilogue.push_back(fmt::format("st({}, m * {}L + n, {});", y.ptr, g.n,
                                   swiglu ? "sm_silu(v) * v2" : "v"));
  if (swiglu)
    g.aIndex = fmt::format("{}[m] / {}", perm.ptr, slotsPerToken);
  // The forms by rows (selectGrouped): in plans with state runs of a few
  // rows take the decode form (the kernel's own code), the tiles are an
  // alternate from the row after it; the TMA form an alternate from many.
  GroupedProblem gp;
  gp.target = e.target;
  gp.experts = experts;
  gp.n = g.n;
  gp.k = g.k;
  gp.slotsPerToken = slotsPerToken;
  gp.swiglu = swiglu;
  gp.mma = g.mma;
  gp.aBf16 = g.a.ctype == "bf16";
  gp.w16 = g.w[0].ctype == "bf16" || g.w[0].ctype == "f16";
  gp.wQuant = g.w[0].quant();
  gp.blockSize = g.w[0].quant() ? g.w[0].blockSize : 1;
  for (const Tensor &w : g.w)
    gp.sameTypes =
        gp.sameTypes && w.ctype == g.w[0].ctype && w.ggml == g.w[0].ggml;
  gp.state = !e.plan.states.empty();
  gp.maxTokens = e.plan.maxTokens;
  const GroupedForm form = selectGrouped(gp, e.plan);
  const int64_t decodeRows = form.decodeRows;
  const bool gemv = decodeRows > 0;
  EmittedKernel gemvOwn;
  std::string sym = "@SYMBOL@";
  if (gemv) {
    // grouped-decode-pass: the forms of several rows in passes of fewer
    // rows (the form's T range stays; a pass loop takes the rest).
    const int64_t pass = option(e.plan, Opt::GroupedDecodePass);
    e.out = gemvForms(decodeRows, [&](int64_t rows, const std::string &sym) {
      const int64_t perPass =
          rows > 1 && pass > 0 ? std::min(rows, pass) : rows;
      emitGroupedGemv(g, off, experts, slotsPerToken, perPass, sym);
    });
    if (e.plan.maxTokens < form.tileFrom)
      return;
    gemvOwn = std::move(e.out);
    e.out = EmittedKernel{};
    sym = "@SYMBOL@_tile";
  }
  if (!gemv) {
    groupedTile(g, y, off, experts, sym); // the kernel's own code
  } else {
    std::vector<EmittedKernel::GemmTile> tileRows =
        e.withOwnTiles([&] { groupedTile(g, y, off, experts, sym); });
    EmittedKernel tile = std::move(e.out);
    tile.codeTiles = std::move(tileRows);
    tile.minTokens = decodeRows + 1;
    tile.suffix = "_tile";
    e.out = std::move(gemvOwn);
    e.out.alternates.push_back(std::move(tile));
  }
  // The TMA form (its pre-launch dequantises every expert's weights
  // whatever T is, so it starts where that pays: selectGrouped).
  if (form.dequantFrom > 0)
    addAlternate(form.dequantFrom, "_dq",
                 [&] { groupedDequantOnce(g, y, off, experts); });
  if (form.tmaFrom > 0)
    addAlternate(form.tmaFrom, "_big", [&] {
      groupedTma(g, swiglu, y, off, perm, slotsPerToken, experts, form);
    });
}

void GemmEmitter::groupedDequantOnce(Gemm g, const Tensor &y, const Tensor &off,
                                     int64_t experts) {
  // The workspace: each matrix's experts x N rows of K 16-bit values (the
  // matrix units' type: f16 on gfx1151, bf16 on sm_90), 256-byte aligned.
  const int64_t rows = experts * g.n, elems = rows * g.k;
  std::vector<int64_t> offs;
  int64_t ws = 0;
  for (size_t j = 0; j < g.w.size(); ++j) {
    offs.push_back(ws);
    ws += (elems * 2 + 255) / 256 * 256;
  }
  e.workspace = true;
  e.out.workspace = {0, ws, 1};
  const std::string params = e.params();
  // The pre-launch: 8 values a thread a round over every matrix, decoded
  // as the tile's K loop decodes them (strata_dq8_<type>), then rounded to
  // the 16-bit type (pack8_mma) as the tile rounds them into LDS.
  const int64_t threads = 256;
  const int64_t blocks =
      std::min<int64_t>(1024, (elems * int64_t(g.w.size()) + 2047) / 2048);
  e.line("STRATA_KERNEL({}) void @SYMBOL@_dq_prep({}) {{", threads, params);
  e.prologue();
  for (size_t j = 0; j < g.w.size(); ++j) {
    const Tensor &w = g.w[j];
    const int64_t rowBytes = g.k / w.blockSize * w.blockBytes;
    e.line("  for (long i = ((long)bid_x() * {} + tid_x()) * 8; i < {}L; i += "
           "{}L) {{",
           threads, elems, blocks * threads * 8);
    e.line("    const long r = i / {}L, k = i % {}L;", g.k, g.k);
    e.line("    float v[8];");
    e.line("    strata_dq8_{}({} + r * {}L + k / {} * {}, (int)(k % {}), v);",
           format::ggmlTypeInfo(w.ggml).irName, w.ptr, rowBytes, w.blockSize,
           w.blockBytes, w.blockSize);
    e.line("    *(strata_u4 *)(ws + {}L + i * 2) = pack8_mma(v);", offs[j]);
    e.line("  }}");
  }
  e.line("}}");
  format::PlanPreLaunch pre;
  pre.grid = {{0, blocks, 1}, {0, 1, 1}, {0, 1, 1}};
  pre.block = {static_cast<uint32_t>(threads), 1, 1};
  // The tile over the workspace's rows as 16-bit weights.
  const bool f16 = e.target == "gfx1151";
  for (size_t j = 0; j < g.w.size(); ++j) {
    Tensor &w = g.w[j];
    w.ctype = f16 ? "f16" : "bf16";
    w.ggml = f16 ? format::GgmlType::F16 : format::GgmlType::BF16;
    w.ptr = fmt::format("((const {} *)(ws + {}L))", w.ctype, offs[j]);
    w.input = -1;
    w.blockSize = 1;
    w.blockBytes = 2;
  }
  groupedTile(g, y, off, experts, "@SYMBOL@_dq");
  e.out.pre = std::move(pre);
}

} // namespace strata::codegen::detail::gemm

namespace strata::codegen::detail {

void emitGroupedKernel(Emitter &e) { gemm::GemmEmitter(e).runGrouped(); }

} // namespace strata::codegen::detail
