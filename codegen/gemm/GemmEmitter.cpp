//===- GemmEmitter.cpp - the GEMM chains ----------------------------------===//
//
// The gemm family: matmul chains with elementwise epilogues. runChains
// groups a kernel's chains, picks its code (the tiles, the decode forms
// as its own code or an alternate, the TMA tile as an alternate from
// kTmaMinTokens) and emits each variant's launches; the chains' kernel
// on the tiles (emitChains) with hc_read's stream mean (streamReduce).
//
//===----------------------------------------------------------------------===//
#include "codegen/gemm/GemmEmitter.h"

#include <algorithm>
#include <map>

namespace strata::codegen::detail::gemm {

void GemmEmitter::runChains() {
  std::vector<Chain> chains;
  std::map<std::pair<int, uint32_t>, std::pair<size_t, std::string>> vars;
  int nextVar = 0;
  for (const BodyOp &op : e.body) {
    if (op.recipe == Recipe::Matmul) {
      if (op.inputs[0].kind != BodyRef::Kind::In ||
          op.inputs[1].kind != BodyRef::Kind::In)
        throw Unsupported("a matmul over a value computed in the kernel");
      Chain chain;
      chain.mm = &op;
      chains.push_back(std::move(chain));
      std::string v = fmt::format("x{}", nextVar++);
      chains.back().epi.push_back(fmt::format("float {} = v;", v));
      vars[key(op.outputs[0])] = {chains.size() - 1, v};
    } else {
      size_t chain = SIZE_MAX;
      for (const BodyRef &r : op.inputs) {
        auto it = vars.find(key(r));
        if (it == vars.end())
          continue;
        if (chain != SIZE_MAX && chain != it->second.first)
          throw Unsupported("an op joins two GEMM chains");
        chain = it->second.first;
      }
      if (chain == SIZE_MAX)
        throw Unsupported(fmt::format("'{}' does not follow a matmul",
                                      format::recipeInfo(op.recipe).name));
      Chain &c = chains[chain];
      if (c.streamMean)
        throw Unsupported("an op after the stream mean");
      if (op.recipe == Recipe::HcRead) {
        auto g = vars.find(key(op.inputs[1]));
        if (g == vars.end() || op.inputs[0].kind != BodyRef::Kind::In)
          throw Unsupported("hc_read after a GEMM must read the gate from it");
        c.streamMean = &op;
        c.gateVar = g->second.second;
        continue;
      }
      format::OpClass cls = format::recipeInfo(op.recipe).cls;
      if (cls != format::OpClass::Unary && cls != format::OpClass::Binary)
        throw Unsupported(fmt::format("'{}' cannot be a GEMM epilogue",
                                      format::recipeInfo(op.recipe).name));
      Tensor y = e.tensor(op.outputs[0]);
      std::string args;
      for (size_t i = 0; i < op.inputs.size(); ++i) {
        auto it = vars.find(key(op.inputs[i]));
        std::string a;
        if (it != vars.end()) {
          a = it->second.second;
        } else {
          if (op.inputs[i].kind != BodyRef::Kind::In)
            throw Unsupported("an epilogue reads a value of another chain");
          Tensor t = e.tensor(op.inputs[i]);
          a = fmt::format("ld({}, {})", t.ptr,
                          elementIndex(t, y.shape, "row", "i"));
        }
        args += (i ? ", " : "") + a;
      }
      std::string fn =
          op.recipe == Recipe::Cast
              ? args
              : fmt::format(
                    "sm_{}({}{})", format::recipeInfo(op.recipe).name, args,
                    op.recipe == Recipe::Scale
                        ? fmt::format(", {}, {}",
                                      floatLit(e.floatAttr(op, "s")),
                                      floatLit(e.floatAttr(op, "b")))
                    : op.recipe == Recipe::Clamp
                        ? fmt::format(", {}, {}",
                                      floatLit(e.hasAttr(op, "min")
                                                   ? e.floatAttr(op, "min")
                                                   : -INFINITY),
                                      floatLit(e.hasAttr(op, "max")
                                                   ? e.floatAttr(op, "max")
                                                   : INFINITY))
                        : "");
      std::string v = fmt::format("x{}", nextVar++);
      c.epi.push_back(fmt::format("float {} = {};", v, fn));
      vars[key(op.outputs[0])] = {chain, v};
    }
    // Results that are kernel outputs are stored where they are made.
    for (const BodyRef &r : op.outputs)
      if (r.kind == BodyRef::Kind::Out) {
        auto it = vars.find(key(r));
        if (it == vars.end())
          continue;
        Tensor t = e.tensor(r);
        Chain &sc = chains[it->second.first];
        ++sc.stores;
        sc.out = t;
        sc.outVar = it->second.second;
        sc.epi.push_back(fmt::format("st({}, {}, {});", t.ptr,
                                     elementIndex(t, t.shape, "row", "i"),
                                     it->second.second));
      }
  }

  // All chains share the launch; blocks of chain c take grid.y tiles
  // [ybase_c, ybase_c + tiles_c).
  std::vector<Gemm> gemms;
  std::vector<Tensor> ys; ///< each chain's matmul output
  // The kernel's variant names one variant per matmul of the body, in order.
  std::vector<std::string> variants;
  for (size_t at = 0; at <= e.kernel.variant.size();) {
    size_t comma = e.kernel.variant.find(',', at);
    if (comma == std::string::npos)
      comma = e.kernel.variant.size();
    variants.push_back(e.kernel.variant.substr(at, comma - at));
    at = comma + 1;
  }
  for (Chain &c : chains) {
    Gemm g;
    g.a = e.tensor(c.mm->inputs[0]);
    g.w = {e.tensor(c.mm->inputs[1])};
    g.k = g.w[0].shape[1].constant;
    g.n = g.w[0].shape[0].constant;
    Tensor y = e.tensor(c.mm->outputs[0]);
    g.mPer = constProduct(y.shape, 1) / g.n;
    g.mRows = fmt::format("{} * {}L", dimExpr(y.shape[0]), g.mPer);
    size_t ci = &c - chains.data();
    pickTile(g, ci < variants.size() ? variants[ci] : e.kernel.variant);
    g.colOf = [](const std::string &c) { return "n0 + " + c; };
    std::string rowI =
        g.mPer == 1 ? "const long row = m, i = n; (void)row; (void)i;"
                    : fmt::format("const long row = m / {}L, i = (m % {}L) * "
                                  "{}L + n; (void)row; (void)i;",
                                  g.mPer, g.mPer, g.n);
    g.epilogue.push_back(rowI);
    if (c.streamMean) {
      // Tile columns are (stream, d) pairs: BD columns of d for each of the
      // n streams, so the block holds every stream of its d range.
      Tensor xn = e.tensor(c.streamMean->inputs[0]);
      int64_t ns = xn.shape[1].constant, d = xn.shape[2].constant;
      // A 64 x 128 tile: its f32 gate tile (32 KiB) reuses the LDS region
      // of the staged operands once the K loop is done.
      g.bm = 64, g.bn = 128, g.nt = 256, g.csTile = true;
      if (g.bn % ns != 0)
        throw Unsupported("stream count does not divide the tile");
      int64_t bd = g.bn / ns;
      if (d % bd != 0)
        throw Unsupported("hidden size does not divide the tile");
      g.n = ns * d;
      for (std::string &l : c.epi)
        g.epilogue.push_back(l);
      // The gate alone: the image is read in the stream reduction below,
      // by rows of consecutive columns (a scattered 2-byte load per
      // accumulator here).
      g.epilogue.push_back(
          fmt::format("Cs[r * {} + c] = {};", csLd(g.bn), c.gateVar));
    } else {
      for (std::string &l : c.epi)
        g.epilogue.push_back(l);
    }
    ys.push_back(y);
    gemms.push_back(std::move(g));
  }
  // The forms by rows (selectGemm, GemmForm.h): the decode forms, the
  // row-block form, the tiles and the TMA tile, each as the own code or an
  // alternate from its first row. The TMA tile keeps copies of the chains
  // as they are now (emitting the others widens tiles in place).
  std::vector<Gemm> alt = gemms;
  const GemmProblem shapes = gemmProblem(chains, gemms, ys, true);
  const GemmForm form = selectGemm(shapes, e.plan);
  const bool decode = form.decodeRows > 0, rowBlock = form.rowBlockFrom > 0;
  auto alternate = [&](EmittedKernel &to, int64_t from, const char *suffix,
                       const std::function<void(const std::string &)> &emit) {
    e.out = EmittedKernel{};
    std::vector<EmittedKernel::GemmTile> own =
        e.withOwnTiles([&] { emit(std::string("@SYMBOL@") + suffix); });
    EmittedKernel alt = std::move(e.out);
    alt.codeTiles = std::move(own);
    alt.minTokens = from;
    alt.suffix = suffix;
    to.alternates.push_back(std::move(alt));
  };
  auto blocks = [&](const std::string &sym) {
    emitGemv(chains, gemms, kF32RowPass, sym, kF32RowBlock,
             ys.front().shape[0]);
  };
  auto tiles = [&](const std::string &sym) {
    emitVariant(chains, gemms, ys, TmaUse::None, sym);
  };
  EmittedKernel forms;
  // gemm-decode-mma: from its rows on, the matrix-unit decode form
  // (GemmDecodeMma.cpp) takes over from the warp dot products; from one
  // row it is the own code, so a row's sums are the same whatever else the
  // step runs (a server's streams, batch-independent).
  const int64_t mmaFrom = option(e.plan, Opt::GemmDecodeMma);
  const bool mma = decode && mmaFrom > 0 &&
                   mmaFrom <= std::min(form.decodeRows, e.plan.maxTokens) &&
                   gemvMmaFits(chains, gemms);
  if (decode && mma && mmaFrom == 1) {
    emitGemvMma(chains, gemms, "@SYMBOL@");
    forms = std::move(e.out);
  } else if (decode) {
    // The warp forms up to the rows the matrix-unit form takes over from.
    const int64_t warpRows = mma ? mmaFrom - 1 : form.decodeRows;
    forms = gemvForms(warpRows, [&](int64_t rows, const std::string &sym) {
      // gemm-decode-one-blocks: the one-row form's own register cap.
      minBlocks_ = rows == 1 ? option(e.plan, Opt::GemmDecodeOneBlocks) : 0;
      emitGemv(chains, gemms, rows, sym);
      minBlocks_ = 0;
    });
    if (mma) {
      alternate(forms, mmaFrom, "_mma", [&](const std::string &sym) {
        emitGemvMma(chains, gemms, sym);
      });
    }
    if (rowBlock)
      alternate(forms, form.rowBlockFrom, "_rowblk", blocks);
  } else if (rowBlock) {
    blocks("@SYMBOL@");
    forms = std::move(e.out);
  } else {
    tiles("@SYMBOL@");
    forms = std::move(e.out);
  }
  if ((decode || rowBlock) && e.plan.maxTokens >= form.tileFrom)
    alternate(forms, form.tileFrom, "_tile", tiles);
  e.out = std::move(forms);
  // Quantised weights too (their pre-launch dequantises W): measured on the
  // H200 at T = 16,384, the dense GEMMs 381 -> 213 ms, all kernels 1,174 ->
  // 1,008 ms (test/device/results/experiments/ab-tmaq-20261201T231133Z.txt).
  // Option gemm-tma-quant=0 keeps them on the cp.async tiles (for A/B
  // runs).
  if (form.dequantFrom > 0)
    addAlternate(form.dequantFrom, "_dq",
                 [&] { emitDequantOnce(chains, alt, shapes, "@SYMBOL@_dq"); });
  if (form.tmaFrom > 0) {
    const TmaUse use = tmaUse();
    addAlternate(form.tmaFrom, "_big",
                 [&] { emitVariant(chains, alt, ys, use, "@SYMBOL@_big"); });
  }
}

void GemmEmitter::addAlternate(int64_t from, const char *suffix,
                               const std::function<void()> &emit) {
  EmittedKernel own = std::move(e.out);
  const bool ownWs = e.workspace;
  e.out = EmittedKernel{};
  e.workspace = false;
  std::vector<EmittedKernel::GemmTile> tiles = e.withOwnTiles(emit);
  EmittedKernel alt = std::move(e.out);
  alt.codeTiles = std::move(tiles);
  alt.minTokens = from;
  alt.suffix = suffix;
  e.out = std::move(own);
  e.workspace = ownWs;
  e.out.alternates.push_back(std::move(alt));
}

void GemmEmitter::emitVariant(const std::vector<Chain> &chains,
                              std::vector<Gemm> &gemms,
                              const std::vector<Tensor> &ys, TmaUse use,
                              const std::string &sym) {
  sym_ = sym;
  for (size_t ci = 0; ci < gemms.size(); ++ci) {
    Gemm &g = gemms[ci];
    const Chain &c = chains[ci];
    pickTma(g, c, ys[ci], use);
    if (c.streamMean) {
      Tensor xn = e.tensor(c.streamMean->inputs[0]);
      int64_t ns = xn.shape[1].constant, d = xn.shape[2].constant,
              bd = g.bn / ns;
      g.colOf = [bd, d](const std::string &c) {
        return fmt::format("({}) / {} * {}L + d0 + ({}) % {}", c, bd, d, c, bd);
      };
      // The gate tile's row stride follows the tile's final width.
      g.epilogue.back() =
          fmt::format("Cs[r * {} + c] = {};", csLd(g.bn), c.gateVar);
    }
  }
  std::vector<bool> merged(gemms.size(), false);
  for (size_t ci = 0; ci < gemms.size(); ++ci)
    for (size_t ri = 0; ri < gemms.size() && !gemms[ci].extra; ++ri)
      if (ri != ci && !merged[ri] &&
          mergeSkinny(gemms[ci], chains[ci], gemms[ri], chains[ri]))
        merged[ri] = true;
  std::vector<size_t> tmaIdx, restIdx;
  for (size_t ci = 0; ci < gemms.size(); ++ci)
    if (!merged[ci])
      (gemms[ci].tma ? tmaIdx : restIdx).push_back(ci);
  if (tmaIdx.empty()) {
    std::string params = e.params();
    ChainLaunch l = emitChains(chains, gemms, restIdx, params, sym_, 0);
    e.out.grid = l.grid;
    e.out.block = l.block;
    e.out.sharedBytes = l.sharedBytes;
    return;
  }
  // TMA tiles copy W as bf16: 16-bit float weights are converted into the
  // workspace first (a pre-launch; wgmma takes one element type for both
  // operands, and the matrix-unit path rounded f16 weights to bf16 anyway,
  // so the numbers are those of the tiles before).
  int64_t ws = 0, conv = 0;
  for (size_t ci : tmaIdx) {
    Gemm &g = gemms[ci];
    if (g.w[0].ctype == "f16" || g.w[0].quant() || g.extra) {
      g.wsOff = ws;
      ws += (g.n * g.k * 2 + 255) / 256 * 256;
      conv += g.n * g.k;
    }
  }
  e.workspace = ws > 0;
  if (ws > 0)
    e.out.workspace = {0, ws, 1};
  for (size_t ci : tmaIdx) {
    addTensorMaps(gemms[ci], chains[ci]);
    // The tile as printed (after a skinny chain merged into it).
    e.recordTile("tma_wgmma", gemms[ci].bm, gemms[ci].bn);
  }
  std::string params = e.params();
  // The other chains (and the conversion) run in the pre-launch: its blocks
  // keep their own occupancy instead of the TMA tile's shared memory.
  if (ws > 0 || !restIdx.empty()) {
    const int64_t convBlocks =
        ws > 0 ? std::min<int64_t>(256, (conv + 2047) / 2048) : 0;
    ChainLaunch l = emitChains(chains, gemms, restIdx, params, sym_ + "_prep",
                               convBlocks, tmaIdx);
    format::PlanPreLaunch pre;
    pre.grid = l.grid;
    pre.block = l.block;
    pre.sharedBytes = l.sharedBytes;
    e.out.pre = std::move(pre);
  }
  emitTmaKernel(chains, gemms, tmaIdx, params);
}

void GemmEmitter::streamReduce(const Gemm &g, const Chain &c) {
  Tensor xn = e.tensor(c.streamMean->inputs[0]);
  int64_t ns = xn.shape[1].constant, d = xn.shape[2].constant;
  int64_t bd = g.bn / ns;
  Tensor y = e.tensor(c.streamMean->outputs[0]);
  e.line("  sync_block();");
  e.line("  for (int q = tid_x(); q < {}; q += {}) {{", g.bm * bd, g.nt);
  e.line("    int r = q / {}, c = q % {};", bd, bd);
  e.line("    long m = m0 + r;");
  e.line("    if (m >= M) continue;");
  e.line("    float a = 0;");
  e.line("    const long row = m; (void)row;");
  e.line("#pragma unroll");
  e.line("    for (int s = 0; s < {}; ++s) {{", ns);
  e.line("      const long i = s * {}L + d0 + c; (void)i;", d);
  e.line("      a += Cs[r * {} + s * {} + c] * ld({}, {});", csLd(g.bn), bd,
         xn.ptr, elementIndex(xn, xn.shape, "row", "i"));
  e.line("    }}");
  e.line("    st({}, m * {}L + d0 + c, a / {}.0f);", y.ptr, d, ns);
  e.line("  }}");
}

GemmEmitter::ChainLaunch
GemmEmitter::emitChains(const std::vector<Chain> &chains,
                        std::vector<Gemm> &gemms,
                        const std::vector<size_t> &idx,
                        const std::string &params, const std::string &name,
                        int64_t convBlocks, const std::vector<size_t> &conv) {
  ChainLaunch l;
  // One launch, one block size; each chain keeps its row tile (grid x
  // covers the smallest; blocks past a chain's rows exit at once).
  int nt = idx.empty() ? 256 : 0;
  for (size_t ci : idx)
    nt = std::max(nt, gemms[ci].nt);
  std::vector<const Gemm *> all;
  for (size_t ci : idx) {
    Gemm &g = gemms[ci];
    g.nt = nt;
    // A narrow matrix-unit tile in a kernel of more waves (a 16 x 64 tile
    // beside K2's 256-thread injection logits) widens until its columns
    // split over the waves; columns past N are guarded like any ragged
    // last tile.
    if (g.mma) {
      int wm, wn;
      waveGrid(g.bm, nt, wm, wn);
      while ((g.bn / 16) % wn != 0)
        g.bn += 16;
    }
    all.push_back(&g);
  }
  planBuffers(all, 0);
  e.line("STRATA_KERNEL_MIN({}, {}) void {}({}) {{", nt,
         all.empty() ? 1 : minBlocks(all, nt), name, params);
  e.prologue();
  if (region_ > 0)
    declareRegion();
  int64_t ybase = 0, bmMin = INT64_MAX;
  format::PlanDim mDim{0, 1, 1};
  int64_t mPer = 1;
  for (size_t ci : idx) {
    bmMin = std::min<int64_t>(bmMin, gemms[ci].bm);
    mDim = e.tensor(chains[ci].mm->outputs[0]).shape[0];
    mPer = gemms[ci].mPer;
  }
  format::PlanDim rowTiles =
      idx.empty() ? format::PlanDim{0, 0, 1} : tilesOf(mDim, mPer, bmMin);
  // With conversion blocks the rows are grid x: the blocks past the row
  // tiles (of the first column tile) convert.
  const bool colsFast =
      tileOrder(rowTiles, convBlocks == 0 && idx.size() == 1 &&
                              !chains[idx[0]].streamMean);
  if (convBlocks > 0) {
    // 16-bit weights of the TMA tiles to bf16 in the workspace, 8 elements
    // a thread a round.
    e.line("  {{ const long R = {};", dimExpr(rowTiles));
    e.line("  if (rt >= R) {{");
    e.line("  if (ct != 0) return;");
    e.line("  const long cb = rt - R;");
    for (size_t ci : conv) {
      const Gemm &g = gemms[ci];
      if (g.wsOff < 0)
        continue;
      const int64_t rows = g.extra ? g.nMain : g.n;
      e.line("  for (long i = (cb * {} + tid_x()) * 8; i < {}L; i += {}L) {{",
             nt, rows * g.k, convBlocks * nt * 8);
      e.line("    float v[8];");
      if (g.w[0].quant())
        e.line("    {{ const long n = i / {}L, k = i % {}L; strata_dq8_{}({} + "
               "n * {}L + k / {} * {}, (int)(k % {}), v); }}",
               g.k, g.k, format::ggmlTypeInfo(g.w[0].ggml).irName, g.w[0].ptr,
               g.k / g.w[0].blockSize * g.w[0].blockBytes, g.w[0].blockSize,
               g.w[0].blockBytes, g.w[0].blockSize);
      else
        e.line("    ld8({}, i, v);", g.w[0].ptr);
      e.line("    *(strata_u4 *)(ws + {}L + i * 2) = pack8_mma(v);", g.wsOff);
      e.line("  }}");
      if (g.extra) {
        // Rows nMain.. : zeros up to extraBase, then the merged chain's
        // weights as bf16 terms (zeros where no output lands).
        e.line("  for (long i = (cb * {} + tid_x()) * 8; i < {}L; i += {}L) "
               "{{",
               nt, (g.n - g.nMain) * g.k, convBlocks * nt * 8);
        e.line("    const int rr = (int)(i / {}L) - {}; const long k = i % "
               "{}L;",
               g.k, g.extraBase - g.nMain, g.k);
        e.line("    const int s = (rr & 7) >> 1, term = rr >= 8 ? ((rr & 1) ? "
               "-1 : 2) : (rr & 1);");
        e.line("    float v[8] = {{}};");
        e.line("    if (rr >= 0 && term >= 0 && s < {}) {{ ld8({} + s * {}L, "
               "k, v); strata_split_bf16(v, term); }}",
               g.extra->n, g.extra->w[0].ptr, g.k);
        e.line("    *(strata_u4 *)(ws + {}L + ({}L * {}L + i) * 2) = "
               "pack8_mma(v);",
               g.wsOff, g.nMain, g.k);
        e.line("  }}");
      }
    }
    e.line("  return;");
    e.line("  }} }}");
    rowTiles.constant += convBlocks;
  }
  for (size_t ci : idx) {
    Gemm &g = gemms[ci];
    const Chain &c = chains[ci];
    int64_t ntiles = c.streamMean ? g.n / g.bn : (g.n + g.bn - 1) / g.bn;
    e.line("  if (ct >= {} && ct < {}) {{", ybase, ybase + ntiles);
    e.line("  const long M = {};", g.mRows);
    e.line("  const long m0 = (long)rt * {};", g.bm);
    e.line("  if (m0 >= M) return;");
    if (c.streamMean)
      e.line("  const long d0 = (long)(ct - {}) * {};", ybase,
             g.bn / e.tensor(c.streamMean->inputs[0]).shape[1].constant);
    else
      e.line("  const long n0 = (long)(ct - {}) * {};", ybase, g.bn);
    std::string aRow = aRowOf(g);
    std::string wRow =
        g.w[0].quant()
            ? fmt::format("const uint8_t *wrow = {} + n * {}L;", g.w[0].ptr,
                          g.k / g.w[0].blockSize * g.w[0].blockBytes)
            : fmt::format("const {} *wrow = {} + n * {}L;", g.w[0].ctype,
                          g.w[0].ptr, g.k);
    tileLoop(g, aRow, {wRow});
    if (c.streamMean)
      streamReduce(g, c);
    e.line("  return;");
    e.line("  }}");
    ybase += ntiles;
  }
  e.line("}}");
  const format::PlanDim colTiles{0, ybase, 1};
  l.grid = {colsFast ? colTiles : rowTiles,
            colsFast ? rowTiles : colTiles,
            {0, 1, 1}};
  l.block = {nt, 1, 1};
  l.sharedBytes = dynamic_ ? static_cast<uint64_t>(region_) : 0;
  e.out.sharedBytes = 0;
  return l;
}

} // namespace strata::codegen::detail::gemm

namespace strata::codegen::detail {

void emitGemmKernel(Emitter &e) { gemm::GemmEmitter(e).runChains(); }

} // namespace strata::codegen::detail
