//===- GemmDecodeMma.cpp - the GEMM chains' matrix-unit decode form -------===//
//
// A decode step of many sequences (B = 8..16 rows) spends the warp dot
// products' instructions on the rows: each decoded weight piece takes two
// dp4a and a multiply-add per row, so at 16 rows the trunk GEMMs are bound
// by issue, not by their bytes (13.8 ms of a 48 ms step on the H200,
// 2026-12-04). This form multiplies all 16 rows by a decoded piece in
// matrix-unit ops (mma.sync m16n8k16, sm_90): a warp takes 16 columns and
// walks K in chunks of 32; lane (g, t) = (lane / 4, lane % 4) decodes the
// piece of 8 at 8 t of columns g and 8 + g, and loads the same 8 k of A's
// rows g and g + 8, straight into the fragments. The products' k order
// inside an m16n8k16 is free as long as A and B agree, so step s of the
// chunk takes k 8 t + 4 s .. + 3 where the fragment's layout names k 2 t,
// 2 t + 1, 2 t + 8, 2 t + 9: no shared memory, no exchange between lanes.
// Warps of a block split K and sum their tiles in slice order
// (deterministic). Every weight byte is still read once for all rows.
//
// gfx1151's WMMA fragments hold whole rows of k (lane l: row l % 16, all
// 16 k), which a lane's piece of 8 does not fill; gfx1151 keeps the warp
// dot products.
//
//===----------------------------------------------------------------------===//
#include "codegen/gemm/GemmEmitter.h"

#include "codegen/Limits.h"

#include "runtime/format/GgmlType.h"

#include <algorithm>

namespace strata::codegen::detail::gemm {

namespace {

/// K elements a warp's step covers: four lanes a column, a piece of 8
/// each.
constexpr int64_t kMmaChunk = 32;

} // namespace

bool GemmEmitter::gemvMmaFits(const std::vector<Chain> &chains,
                              const std::vector<Gemm> &gemms) const {
  if (e.target != "sm_90")
    return false;
  for (size_t ci = 0; ci < gemms.size(); ++ci) {
    const Gemm &g = gemms[ci];
    // Matrix-unit inputs round A to bf16: only where the plan already
    // stores activations so (the bf16 policy), as the prefill tiles.
    if (chains[ci].streamMean || g.a.ctype != "bf16" || g.k % kMmaChunk != 0 ||
        g.w.size() > 2)
      return false;
    for (const Tensor &w : g.w)
      if (w.ctype == "float" || (w.quant() && w.blockSize % 8 != 0))
        return false;
  }
  return true;
}

void GemmEmitter::emitGemvMma(const std::vector<Chain> &chains,
                              const std::vector<Gemm> &gemms,
                              const std::string &sym) {
  (void)chains;
  bool iq3s = false;
  size_t nb = 1;
  for (const Gemm &g : gemms) {
    nb = std::max(nb, g.w.size());
    for (const Tensor &w : g.w)
      iq3s = iq3s || w.ggml == format::GgmlType::IQ3_S;
  }
  // IQ3_S's grid in LDS: a warp decodes 16 columns' pieces at once.
  gemvEntry(iq3s, sym);
  // The slices' accumulator tiles: 8 floats a lane a matrix.
  e.line("  STRATA_SHARED float red[{}][{}][32];", nb * 8, kGemvWarps);
  int64_t base = 0;
  for (const Gemm &g : gemms) {
    GemvMmaProblem p;
    p.n = g.n;
    p.k = g.k;
    const GemvMmaForm form = selectGemvMma(p);
    const int64_t cols = kGemvWarps / form.slices * 16;
    const int64_t blocks = (g.n + cols - 1) / cols;
    e.line("  if (bid_x() >= {} && bid_x() < {}) {{", base, base + blocks);
    e.line("  const long base = {};", base);
    rowBase_ = "0L";
    gemvMmaBody(g, form);
    e.line("  return;");
    e.line("  }}");
    base += blocks;
  }
  gemvClose();
  e.out.grid = {{0, base, 1}, {0, 1, 1}, {0, 1, 1}};
  e.out.block = {kGemvWarps * 32, 1, 1};
  e.out.sharedBytes = 0;
}

void GemmEmitter::gemvMmaBody(const Gemm &g, GemvMmaForm form) {
  const size_t nb = g.w.size();
  const int slices = form.slices;
  // Warp (group, slice) takes columns n0 .. n0 + 15 and the chunks slice,
  // slice + slices, ... of K.
  e.line("  const int slice = wave % {}, group = wave / {};", slices, slices);
  e.line("  const long n0 = ((long)(bid_x() - base) * {} + group) * 16L;",
         kGemvWarps / slices);
  e.line("  const bool live = n0 < {}L;", g.n);
  e.line("  const int tg = lane >> 2, tq = lane & 3;");
  for (size_t b = 0; b < nb; ++b) {
    const Tensor &w = g.w[b];
    const int64_t rowBytes =
        w.quant() ? g.k / w.blockSize * w.blockBytes : g.k * 2;
    // A column past N (the last group's) reads column 0 and stores nothing.
    for (int h = 0; h < 2; ++h)
      e.line("  const uint8_t *wrow{}_{} = (const uint8_t *){} + ({} + (n0 + "
             "{} + tg < {}L ? n0 + {} + tg : 0L)) * {}L;",
             b, h, w.ptr, rowBase_, h * 8, g.n, h * 8, rowBytes);
  }
  e.line("  const long M = {};", g.mRows);
  // Rows in passes of 16; the block agrees on every bound, so its barriers
  // are uniform.
  e.line("  for (long m0 = 0; m0 < M; m0 += 16) {{");
  for (size_t b = 0; b < nb; ++b)
    e.line("  float acc{}[8] = {{}};", b);
  e.line("  if (live) {{");
  // A's rows g and g + 8 of the pass (row 0's where past M, zeroed).
  e.line("    const uint16_t *arow0, *arow1;");
  for (int r = 0; r < 2; ++r) {
    e.line("    const bool alive{} = m0 + tg + {} < M;", r, r * 8);
    e.line("    {{ const long m = alive{} ? m0 + tg + {} : 0L; arow{} = (const "
           "uint16_t *){} + (long)({}) * {}L; }}",
           r, r * 8, r, g.a.ptr, g.aIndex, g.k);
  }
  e.line("#pragma unroll {}", form.unroll);
  e.line("    for (long kc = slice * {}L + tq * 8L; kc < {}L; kc += {}L) {{",
         kMmaChunk, g.k, kMmaChunk * slices);
  e.line("      strata_u4 a0 = *(const strata_u4 *)(arow0 + kc), a1 = "
         "*(const strata_u4 *)(arow1 + kc);");
  e.line("      if (!alive0) a0 = (strata_u4){{0, 0, 0, 0}};");
  e.line("      if (!alive1) a1 = (strata_u4){{0, 0, 0, 0}};");
  for (size_t b = 0; b < nb; ++b) {
    e.line("      strata_u4 wb{}[2];", b);
    for (int h = 0; h < 2; ++h) {
      e.line("      {{ float v[8];");
      decodeW(g.w[b], fmt::format("wrow{}_{}", b, h), "kc", "v");
      e.line("        wb{}[{}] = pack8_mma(v); }}", b, h);
    }
  }
  // Step s: k 8 t + 4 s .. + 3 of rows g, g + 8 and columns g, 8 + g.
  e.line("#pragma unroll");
  e.line("      for (int s = 0; s < 2; ++s) {{");
  e.line("        const mma_fa fa = {{a0[2 * s], a1[2 * s], a0[2 * s + 1], "
         "a1[2 * s + 1]}};");
  for (size_t b = 0; b < nb; ++b)
    e.line("        mma_16x16x16_f(acc{}, fa, (mma_fb){{wb{}[0][2 * s], "
           "wb{}[0][2 * s + 1], wb{}[1][2 * s], wb{}[1][2 * s + 1]}});",
           b, b, b, b, b);
  e.line("      }}");
  e.line("    }}");
  e.line("  }}");
  if (slices > 1) {
    // The slices' tiles summed in slice order by the group's slice 0.
    e.line("#pragma unroll");
    e.line("  for (int i = 0; i < 8; ++i) {{");
    for (size_t b = 0; b < nb; ++b)
      e.line("    red[{} * 8 + i][wave][lane] = acc{}[i];", b, b);
    e.line("  }}");
    e.line("  sync_block();");
    e.line("  if (slice == 0) {{");
    e.line("#pragma unroll");
    e.line("    for (int i = 0; i < 8; ++i) {{");
    for (size_t b = 0; b < nb; ++b) {
      e.line("      float s{} = 0.0f;", b);
      e.line("      for (int j = 0; j < {}; ++j) s{} += red[{} * 8 + i][wave + "
             "j][lane];",
             slices, b, b);
      e.line("      acc{}[i] = s{};", b, b);
    }
    e.line("    }}");
    e.line("  }}");
    // The next pass's stores wait for these reads.
    e.line("  sync_block();");
  }
  e.line("  if (live && slice == 0) {{");
  e.line("#pragma unroll");
  e.line("    for (int i = 0; i < 8; ++i) {{");
  e.line("      int tr, tc;");
  e.line("      mma_acc_coord(i, &tr, &tc);");
  e.line("      const long m = m0 + tr, n = n0 + tc;");
  e.line("      if (m < M && n < {}L) {{", g.n);
  e.line("        const float v = acc0[i]{};", nb > 1 ? ", v2 = acc1[i]" : "");
  for (const std::string &l : g.epilogue)
    e.line("        {}", l);
  e.line("      }}");
  e.line("    }}");
  e.line("  }}");
  e.line("  }}");
}

} // namespace strata::codegen::detail::gemm
