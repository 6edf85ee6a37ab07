//===- RowCached.cpp - the row family's cached kernels --------------------===//
//
// The row family's cached ops (CachedKernel.h): the short convolution's
// window and the n-gram token history, stepped a row at a time. Checked
// against the CPU backend (strata-run --check).
//
//   conv1d_cached       one thread per channel, rows in order (the ring);
//                       with conv-by-slot, slots in parallel up to
//                       kConvBySlotRows rows
//   ngram_hash_cached   one thread, rows in order (the ring)
//
//===----------------------------------------------------------------------===//
#include "codegen/CachedKernel.h"
#include "codegen/Limits.h"
#include "codegen/Options.h"
#include "ir/Target.h"

#include <string>

namespace strata::codegen::detail {

using format::BodyOp;
using format::BodyRef;

namespace {
/// The most rows conv-by-slot's form runs (each block scans the rows before
/// its own for its slot; a decode step has up to --max-batch).
constexpr int64_t kConvBySlotRows = 32;
} // namespace

void emitConv1dCached(Emitter &e, const BodyOp &op) {
  std::vector<int64_t> ws = stateDims(e, 0);
  Tensor x = e.tensor(op.inputs[1]), wt = e.tensor(op.inputs[2]);
  expectLoadable(x, "the input");
  expectLoadable(wt, "the conv weight");
  int64_t c = constDim(x, 1), kw = constDim(wt, 1);
  int64_t dil = e.intAttr(op, "dilation"), win = ws[1];
  if (win != (kw - 1) * dil)
    throw Unsupported("a window that is not (K - 1) * dilation long");
  // act = "silu": the epilogue fuse-elementwise folded in (the silu the
  // prefill's conv1d_causal kernel applies as it stores).
  const bool silu = e.hasAttr(op, "act") && e.strAttr(op, "act") == "silu";
  // A row's window: its slot's earlier inputs from the ring (this thread
  // wrote them), then its own input stored there.
  auto row = [&]() {
    e.line("    float *ring = in0 + s * {}L;", win * c);
    e.line("    const float xv = ld(in1, r * {}L + c);", c);
    e.line("    float sum = 0.0f;");
    e.line("    for (long j = 0; j < {}L; ++j) {{", kw);
    e.line("      const long back = ({}L - j) * {}L, src = p - back;", kw - 1,
           dil);
    e.line("      if (src < 0) continue;");
    e.line("      const float v = back == 0 ? xv : ring[(src % {}L) * {}L + "
           "c];",
           win, c);
    e.line("      sum += ld(in2, c * {}L + j) * v;", kw);
    e.line("    }}");
    e.line("    st(out0, r * {}L + c, {});", c, silu ? "sm_silu(sum)" : "sum");
    e.line("    ring[(p % {}L) * {}L + c] = xv;", win, c);
  };
  const format::PlanDim channels{0, (c + kCachedThreads - 1) / kCachedThreads,
                                 1};
  // The rows in order, one thread a channel for all of them.
  auto inOrder = [&](const std::string &sym) {
    e.line("STRATA_KERNEL({}) void {}({}) {{", kCachedThreads, sym, e.params());
    e.prologue();
    e.line("  const long c = (long)bid_x() * {} + tid_x();", kCachedThreads);
    e.line("  if (c >= {}L) return;", c);
    e.line("  for (long r = 0; r < T; ++r) {{");
    e.line("    const long s = in3[r], p = in4[r];");
    e.line("    if (s < 0 || s >= {}L || p < 0) continue;", ws[0]);
    row();
    e.line("  }}");
    e.line("}}");
    e.out.grid = {channels, {0, 1, 1}, {0, 1, 1}};
    e.out.block = {kCachedThreads, 1, 1};
  };
  const int64_t bySlot =
      option(e.plan, Opt::ConvBySlot) != 0 ? kConvBySlotRows : 0;
  if (bySlot == 0) {
    inOrder("@SYMBOL@");
    return;
  }
  // conv-by-slot: a block row y a row of the run; the slot's first row's
  // block takes the slot's rows in order, the others exit: slots in
  // parallel (a decode step's rows are one a slot), each slot's rows in
  // the order above. Up to kConvBySlotRows rows (each block scans the rows
  // before its own); runs of more rows take the form above.
  e.line("STRATA_KERNEL({}) void @SYMBOL@({}) {{", kCachedThreads, e.params());
  e.prologue();
  e.line("  const long c = (long)bid_x() * {} + tid_x();", kCachedThreads);
  e.line("  if (c >= {}L) return;", c);
  e.line("  const long r0 = bid_y(), s0 = in3[r0];");
  e.line("  if (s0 < 0 || s0 >= {}L || in4[r0] < 0) return;", ws[0]);
  e.line("  for (long q = 0; q < r0; ++q)");
  e.line("    if (in3[q] == s0 && in4[q] >= 0) return;");
  e.line("  for (long r = r0; r < T; ++r) {{");
  e.line("    const long s = in3[r], p = in4[r];");
  e.line("    if (s != s0 || p < 0) continue;");
  row();
  e.line("  }}");
  e.line("}}");
  e.out.grid = {channels, {1, 0, 1}, {0, 1, 1}};
  e.out.block = {kCachedThreads, 1, 1};
  if (e.plan.maxTokens <= bySlot)
    return;
  EmittedKernel own = std::move(e.out);
  e.out = EmittedKernel{};
  inOrder("@SYMBOL@_rows");
  EmittedKernel alt = std::move(e.out);
  alt.args = own.args; // the same parameters (params() set own's)
  alt.minTokens = bySlot + 1;
  alt.suffix = "_rows";
  own.alternates.push_back(std::move(alt));
  e.out = std::move(own);
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
  beginCachedKernel(e, 1);
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

} // namespace strata::codegen::detail
