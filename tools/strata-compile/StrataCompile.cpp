//===- StrataCompile.cpp - description + GGUF -> plan ---------------------===//
#include "codegen/Aot.h"
#include "codegen/KernelEmitter.h"
#include "codegen/Options.h"
#include "codegen/PlanBuilder.h"
#include "codegen/Resources.h"
#include "ir/Diagnostics.h"
#include "ir/Parser.h"
#include "ir/Printer.h"
#include "ir/Target.h"
#include "ir/Verifier.h"
#include "passes/Pass.h"
#include "runtime/format/FileUtil.h"
#include "runtime/format/Gguf.h"
#include "runtime/format/ModelInfo.h"
#include "runtime/format/Utf8.h"
#include "tools/ToolMain.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <unistd.h>

using namespace strata;

namespace {

const char *kUsage =
    R"(usage: strata-compile MODEL.strata --gguf FILE --max-tokens T
                      [--target NAME] [--precision f32|bf16] -o PLAN_DIR
                      [--report[=json]]
                      [--print-ir-after-all] [--print-ir-after=NAME]
                      [--qsa-compress-ratio N] [--no-fusion] [--skip-pass NAME]
                      [--logits all|last] [--greedy-ids on|off]
                      [--cache-dir DIR] [--no-codegen] [--emit-source K]
                      [--codegen-opt NAME=VALUE ...]
                      [--max-context N|auto [--max-batch B] [--context P]
                      [--state-budget BYTES] [--kv f32|bf16|int8]]

Binds a model description to a GGUF file (metadata and tensor infos), runs
the compilation pipeline (see strata-opt --list-passes) and writes the plan
(PLAN_DIR/plan.json) for prompts of up to T tokens.

options:
  --gguf FILE            the weights (GGUF v3; a key/value text header is
                         accepted for planning without weights)
  --max-tokens T         the largest prompt the plan serves (1..16777216)
  --target NAME          host (the CPU reference backend; default), gfx1151
                         or sm_90: what the passes plan for (kernel
                         variants, precision); for gfx1151 and sm_90 every
                         kernel is generated and compiled ahead of time with
                         clang-19 (gfx1151: code objects; sm_90: PTX, and
                         cubins where ptxas is installed) into
                         PLAN_DIR/kernels, next to the emitted sources
  --cache-dir DIR        where compiled kernels are cached, keyed by a hash
                         of source, flags and compiler (default
                         $XDG_CACHE_HOME/strata-compile or
                         ~/.cache/strata-compile)
  --no-codegen           plan only: GPU plans without kernel code (strata-run
                         refuses them), for studying the passes
  --emit-source K        print the device source of kernel K (its index in
                         the plan, or its symbol) and write nothing
  --codegen-opt NAME=VALUE
                         a code generation option (repeatable; the forms
                         kept for A/B runs and the differential suite);
                         values that differ from the default are recorded
                         in the plan's options and shown by --report;
                         --codegen-opt help lists every option
  --precision P          f32 or bf16: how activations other than the
                         residual streams are stored (default: f32 on host,
                         bf16 on GPU targets); recorded in the plan
  -o PLAN_DIR            output directory, created if missing; written only
                         if compilation succeeds
  --report[=json]        print a row per kernel (body, variant, bytes, FLOPs,
                         predicted time on the target and its bound) and
                         totals: kernels, bytes, FLOPs, predicted time,
                         arena against its lower bound, hyper-connection
                         bytes per site against their floors
  --print-ir-after-all   print the IR after every pass (to stderr)
  --print-ir-after=NAME  print the IR after pass NAME (to stderr)
  --qsa-compress-ratio N qwen4exp: run QSA with indexer blocks of N tokens
                         (the checkpoint's indexer_compress_ratio) on the
                         attention layers whose attention.compress_ratios
                         entry is 0, which otherwise run dense attention
                         (llama.cpp's converter writes 0 when the
                         transformers beside it knows qwen4_exp); the model
                         reads it as meta "strata.qsa_compress_ratio"; it is
                         recorded in the plan's options
  --logits all|last      all: logits at every prompt position (default);
                         last: the last position's only, what generation
                         needs (the LM head reads one row); recorded in the
                         plan's options
  --greedy-ids on|off    on: @main also returns the argmax of each logits
                         row, so greedy decoding reads one id a row, not
                         the row (the default of plans that decode,
                         --max-context; off otherwise)
  --no-fusion            skip the fusion passes (fuse-*): one kernel per op,
                         the reference a fused plan is checked against
  --skip-pass NAME       skip one optimising pass of the pipeline (repeat
                         for more): fold-delta-inputs, cse or a fuse-*
                         pass; for A/B runs of a pass against its absence
  --max-context N        generation: descriptions see generation() true,
                         max_context() = N and max_batch() = B, and take the
                         stateful form (KV caches of B slots x N positions
                         outside the arena; plan inputs tokens, positions,
                         slots); recorded in the plan's options; GPU
                         targets get the state kernels of codegen/state/
                         (correct, not yet decode-fast)
  --max-context auto     the file's <arch>.context_length, lowered until the
                         state of B slots fits --state-budget
  --state-budget BYTES   the most state --max-context auto may take, all
                         slots together (default 8589934592, 8 GiB)
  --max-batch B          the sequence slots of the state (default 1; needs
                         --max-context)
  --kv f32|bf16|int8     how the KV caches (the attention layers' k_cache and
                         v_cache states) are stored: f32 (default), bf16, or
                         int8 with one f32 scale per (slot, position, kv
                         head) row (symmetric absmax); attention reads them
                         as stored. The plan's state entries carry the dtype
                         (int8: "i8") and bytes; recurrent states and the
                         QSA indexer's keys stay f32 (needs --max-context)
  --context P            with --report and --max-context: the decode step's
                         line counts P cached positions per row (default:
                         the whole context): bytes moved (expert stacks:
                         the expected distinct experts of B rows) and the
                         floor at the target's bandwidth
  --help                 show this help

Environment: STRATA_DEVICE_CC names the device compiler (default clang-19).

Exit status: 0 on success, 1 on an error (nothing is written then), 2 on a
command-line mistake.
)";

int fail(const std::string &msg) {
  std::cerr << "strata-compile: error: " << msg << "\n";
  return 1;
}

/// A command-line mistake: the line that says what is wrong, exit status 2.
int usageError(const std::string &msg) {
  std::cerr << "strata-compile: error: " << msg << "\n";
  return 2;
}

std::string human(double v, const char *unit) {
  const char *pre[] = {"", "K", "M", "G", "T", "P"};
  int i = 0;
  while (v >= 1000 && i < 5)
    v /= 1000, ++i;
  return fmt::format("{:.3g} {}{}", v, pre[i], unit);
}

/// A kernel's predicted time on the target: the larger of its bytes over
/// the bandwidth and its FLOPs over the peak of the path it runs on (a
/// GEMM's variant; attention and the delta rule on the matrix units at half
/// efficiency; everything else on the vector units).
struct Prediction {
  double seconds = 0;
  bool computeBound = false;
};

/// The rate (TFLOP/s counted) of the tile row \p name of \p t: a variant's
/// path peak times its efficiency, a form's divided by its passes too; 0
/// for a name that is no row.
double rowRate(const ir::Target &t, const std::string &name) {
  if (const ir::KernelVariant *v = ir::lookupVariant(t, name))
    return v->peakTflops() * v->efficiency;
  for (const ir::KernelForm *f : ir::formsOf(t))
    if (name == f->name)
      return f->peakTflops() * f->efficiency / f->passes;
  return 0;
}

Prediction predict(const format::PlanKernel &k, const ir::Target &t,
                   double bytes, double flops,
                   const std::vector<codegen::EmittedKernel::GemmTile> &run) {
  double peak = t.vecF32Tflops;
  // The tile the running code takes (the form the generator chose for the
  // report's T), else the plan's variant.
  if (double rate = run.empty() ? 0.0 : rowRate(t, run.front().variant);
      rate > 0) {
    peak = rate;
  } else if (!k.variant.empty()) {
    std::string first = k.variant.substr(0, k.variant.find(','));
    if (double r = rowRate(t, first); r > 0)
      peak = r;
  }
  auto holds = [&](format::Recipe r) {
    if (!k.isFused())
      return k.recipe == r;
    for (const format::BodyOp &op : k.body)
      if (op.recipe == r)
        return true;
    return false;
  };
  if (holds(format::Recipe::Attention) || holds(format::Recipe::GatedDeltaRule))
    peak = std::max(peak, t.matF16Tflops * 0.5);
  double mem = bytes / (t.memGBs * 1e9), compute = flops / (peak * 1e12);
  return {std::max(mem, compute), compute > mem};
}

/// What a fused kernel's body runs, e.g. "hc_write,hc_norm".
std::string bodySummary(const format::PlanKernel &k) {
  if (!k.isFused())
    return format::recipeInfo(k.recipe).name;
  std::string s;
  for (const format::BodyOp &op : k.body)
    s += (s.empty() ? "" : ",") +
         std::string(format::recipeInfo(op.recipe).name);
  return s;
}

std::string shapeStr(const std::vector<format::PlanDim> &shape) {
  std::string out = "[";
  for (size_t d = 0; d < shape.size(); ++d) {
    const format::PlanDim &dim = shape[d];
    std::string s = dim.coef == 0 ? fmt::format("{}", dim.constant)
                    : dim.constant
                        ? fmt::format("{}T+{}", dim.coef, dim.constant)
                    : dim.coef == 1 ? "T"
                                    : fmt::format("{}T", dim.coef);
    if (dim.coef != 0 && dim.div != 1)
      s = fmt::format("{}T/{}",
                      dim.coef == 1 ? "" : fmt::format("{}", dim.coef),
                      dim.div) +
          (dim.constant ? fmt::format("+{}", dim.constant) : "");
    out += (d ? ", " : "") + s;
  }
  return out + "]";
}

/// The gated-residual sites of a plan (fuse-hyper-connection's kernels) and
/// their traffic against two floors (docs/hyper-connection-floor.md); a
/// combine fused into K1 is MoE traffic, not the site's:
///   one-pass bound: R read and written once, F and lambda read, u and the
///                   next lambda written;
///   three-kernel floor: that plus what must cross between the three
///                   kernels: the normalised image written once and read
///                   by K2 and K3, the low-rank lo written and read.
struct SiteTraffic {
  int sites = 0;
  double bytes = 0, onePass = 0, threeKernel = 0, worstRatio = 0;
};

SiteTraffic hcSites(const format::Plan &p, int64_t t) {
  SiteTraffic st;
  std::map<uint32_t, size_t> producer;
  for (size_t i = 0; i < p.kernels.size(); ++i)
    for (uint32_t o : p.kernels[i].outputs)
      producer[o] = i;
  auto bufBytes = [&](uint32_t b) {
    return double(p.buffers[b].numElements(t)) *
           format::planDTypeSize(p.buffers[b].dtype);
  };
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    const format::PlanKernel &k3 = p.kernels[i];
    if (k3.fused != "hc_up_mix" || k3.inputs.size() < 2)
      continue;
    uint32_t lo = k3.inputs[0].index, xn = k3.inputs[1].index;
    if (!producer.count(lo) || !producer.count(xn))
      continue;
    const format::PlanKernel &k2 = p.kernels[producer[lo]];
    const format::PlanKernel &k1 = p.kernels[producer[xn]];
    double k1Bytes = k1.bytes.at(t);
    double onePass = bufBytes(k3.outputs[0]); // u
    if (k2.outputs.size() > 1)
      onePass += bufBytes(k2.outputs[1]); // the next lambda
    // K1's streams R, sublayer output F and gates lambda: the hc_write of
    // its body names them. A combine fused into K1 makes F a temporary; its
    // own inputs (the expert rows, routing weights, shared expert) are MoE
    // traffic and not counted for the site.
    const format::BodyOp *write = nullptr;
    for (const format::BodyOp &op : k1.body)
      if (op.recipe == format::Recipe::HcWrite)
        write = &op;
    // Without a write (a lone norm), R is the norm's input 0.
    std::set<uint32_t> siteInputs;
    if (!write)
      siteInputs.insert(0);
    if (write) {
      for (const format::BodyRef &ref : write->inputs)
        if (ref.kind == format::BodyRef::Kind::In)
          siteInputs.insert(ref.index);
      onePass += bufBytes(k1.outputs[0]); // R written
    }
    for (uint32_t in = 0; in < k1.inputs.size(); ++in) {
      const format::PlanOperand &o = k1.inputs[in];
      if (o.isWeight)
        continue;
      if (siteInputs.count(in))
        onePass += bufBytes(o.index); // R, F, lambda read
      else
        k1Bytes -= bufBytes(o.index);
    }
    double bytes = k1Bytes + k2.bytes.at(t) + k3.bytes.at(t);
    double threeKernel = onePass + 3 * bufBytes(xn) + 2 * bufBytes(lo);
    ++st.sites;
    st.bytes += bytes;
    st.onePass += onePass;
    st.threeKernel += threeKernel;
    st.worstRatio = std::max(st.worstRatio, bytes / threeKernel);
  }
  return st;
}

std::string jsonStr(const std::string &s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    if (static_cast<unsigned char>(c) < 0x20)
      out += fmt::format("\\u{:04x}", c);
    else
      out += c;
  }
  return out + "\"";
}

/// A compiled kernel's resources and what they allow on the target.
struct KernelUse {
  codegen::KernelResources res;
  int occupancy = -1; ///< gfx1151: waves per SIMD; sm_90: warps per SM
  double blocks = 0;  ///< blocks launched at the report's T
  /// The code's pre-launch (PlanCode::pre), if any: its resources and
  /// occupancy.
  std::optional<codegen::KernelResources> preRes;
  int preOccupancy = -1;
  /// The alternate a run of the report's T launches instead of the code
  /// (PlanCode::at), if one does: its symbol's suffix ("_dq", "_big", ...),
  /// and its resources and occupancy, which the report shows.
  std::string form;
  std::optional<codegen::KernelResources> formRes;
  int formOccupancy = -1;
  /// The GEMM tiles the code that runs at the report's T takes (its
  /// KernelVariants.def rows), which the prediction prices by.
  std::vector<codegen::EmittedKernel::GemmTile> runTiles;
};

/// The fraction of the roofline a kernel can reach with its occupancy and
/// grid: latency hiding wants about 4 waves per SIMD (gfx1151) or 16 warps
/// per SM (sm_90), and a grid smaller than the machine leaves units idle.
double achievable(const KernelUse &u, const ir::Target &t) {
  // The code that runs at the report's T: an alternate's where one does.
  const int occupancy = u.formRes ? u.formOccupancy : u.occupancy;
  if (occupancy <= 0)
    return occupancy == 0 ? 0.0 : 1.0;
  bool gfx = std::string(t.name) == "gfx1151";
  double occ = std::min(1.0, occupancy / (gfx ? 4.0 : 16.0));
  double fill = std::min(1.0, u.blocks / t.units);
  return occ * fill;
}

/// The bytes of every state of \p p.
uint64_t stateBytes(const format::Plan &p) {
  uint64_t n = 0;
  for (const format::PlanState &st : p.states)
    n += st.bytes;
  return n;
}

/// The plan's sequence slots (1 without state).
uint64_t maxBatchOf(const format::Plan &p) {
  auto it = p.options.find("max_batch");
  return it == p.options.end() || it->second < 1
             ? 1
             : static_cast<uint64_t>(it->second);
}

/// One decode step of a plan with state: every slot decodes one row
/// (T = B = max_batch) with P positions in its caches. The plan's byte
/// counts are at T (expert stacks: the expected distinct experts of B rows);
/// cache reads are counted there at the full context and scaled to the P
/// positions a row attends (format::kernelRunBytes, as strata-run
/// --profile counts a run's).
struct DecodeStep {
  int64_t rows = 0, context = 0;
  double bytes = 0, cacheBytes = 0;
  /// (bytes, kernel index) of the step's kernels, most bytes first.
  std::vector<std::pair<double, size_t>> byKernel;
};

/// Kernels of a decode step --report names, most bytes first: where a
/// one-row step's floor lies (Qwen4-Exp's LM head is 30 % of the 12-layer
/// model's row).
constexpr size_t kStepLargest = 5;

DecodeStep decodeStep(const format::Plan &p, int64_t context) {
  DecodeStep d;
  d.rows = static_cast<int64_t>(maxBatchOf(p));
  d.context = std::min<int64_t>(context, p.options.at("max_context"));
  const std::vector<int64_t> attended(static_cast<size_t>(d.rows), d.context);
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    format::KernelRunBytes b =
        format::kernelRunBytes(p, p.kernels[i], d.rows, attended);
    d.bytes += b.bytes;
    d.cacheBytes += b.cacheBytes;
    d.byKernel.push_back({b.bytes, i});
  }
  // Most bytes first; the earlier kernel first among equals.
  std::stable_sort(
      d.byKernel.begin(), d.byKernel.end(),
      [](const auto &a, const auto &b) { return a.first > b.first; });
  return d;
}

void printReport(const format::Plan &p, const ir::Target &target, bool json,
                 const std::vector<std::optional<KernelUse>> &uses,
                 int64_t decodeContext) {
  const int64_t t = p.maxTokens;
  struct Row {
    std::string label, body, variant, shape;
    double bytes, flops;
    Prediction pred;
  };
  const bool gfx = std::string(target.name) == "gfx1151";
  // A state write lists no output: its row shows the state it writes.
  auto outputText = [&](const format::PlanKernel &k) {
    if (!k.outputs.empty())
      return shapeStr(p.buffers[k.outputs[0]].shape);
    for (const format::PlanOperand &o : k.inputs)
      if (o.isState)
        return "state " + p.states[o.index].name;
    return std::string("-");
  };
  auto useOf = [&](size_t i) -> const KernelUse * {
    return i < uses.size() && uses[i] ? &*uses[i] : nullptr;
  };
  // "vgpr sgpr lds scratch spill occ" (gfx1151) or "regs smem stack spill
  // warps" (sm_90) for one kernel, or dashes before code exists.
  auto resText = [&](size_t i) {
    const KernelUse *u = useOf(i);
    if (!u)
      return fmt::format("{:>5} {:>5} {:>7} {:>7} {:>6} {:>4}", "-", "-", "-",
                         "-", "-", "-");
    const codegen::KernelResources &r = u->formRes ? *u->formRes : u->res;
    const int occ = u->formRes ? u->formOccupancy : u->occupancy;
    if (gfx)
      return fmt::format("{:>5} {:>5} {:>7} {:>7} {:>6} {:>4}", r.vgprs,
                         r.sgprs, r.sharedBytes, r.scratchBytes,
                         r.vgprSpills + r.sgprSpills, occ);
    return fmt::format("{:>5} {:>5} {:>7} {:>7} {:>6} {:>4}", r.registers, "-",
                       r.sharedBytes, r.scratchBytes,
                       r.spillStoreBytes + r.spillLoadBytes, occ);
  };
  std::vector<Row> rows;
  double totalB = 0, totalF = 0, totalS = 0;
  for (const format::PlanKernel &k : p.kernels) {
    Row r{k.label(),     bodySummary(k), k.variant, outputText(k),
          k.bytes.at(t), k.flops.at(t),  {}};
    const KernelUse *use = useOf(rows.size());
    r.pred = predict(k, target, r.bytes, r.flops,
                     use ? use->runTiles
                         : std::vector<codegen::EmittedKernel::GemmTile>{});
    if (const KernelUse *u = use) {
      // The form a run of T takes, where an alternate replaces the code,
      // and the tile row it takes where that is not the plan's variant
      // (e.g. _tile=wmma_f16_split3: f32 weights on the matrix units).
      if (!u->form.empty())
        r.variant += (r.variant.empty() ? "" : " ") + u->form;
      if (!u->runTiles.empty() &&
          k.variant.substr(0, k.variant.find(',')) != u->runTiles[0].variant)
        r.variant += (u->form.empty() ? " " : "=") + u->runTiles[0].variant;
      double a = achievable(*u, target);
      r.pred.seconds = a > 0 ? r.pred.seconds / a : INFINITY;
    }
    totalB += r.bytes;
    totalF += r.flops;
    totalS += r.pred.seconds;
    rows.push_back(std::move(r));
  }
  SiteTraffic hc = hcSites(p, t);
  if (json) {
    fmt::print("{{\"model\": {}, \"arch\": {}, \"target\": {}, \"T\": {},\n",
               jsonStr(p.model), jsonStr(p.arch), jsonStr(p.target), t);
    fmt::print(" \"codegen_options\": {},\n",
               jsonStr(codegen::optionsSummary(p)));
    fmt::print(" \"kernels\": [\n");
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row &r = rows[i];
      std::string res = "null";
      if (const KernelUse *u = useOf(i)) {
        const codegen::KernelResources &x = u->formRes ? *u->formRes : u->res;
        res = fmt::format(
            "{{\"symbol\": {}, \"vgprs\": {}, \"sgprs\": {}, "
            "\"registers\": {}, \"shared_bytes\": {}, \"scratch_bytes\": {}, "
            "\"vgpr_spills\": {}, \"sgpr_spills\": {}, "
            "\"spill_store_bytes\": {}, \"spill_load_bytes\": {}, "
            "\"wave_size\": {}, \"occupancy\": {}, \"blocks\": {:.0f}}}",
            jsonStr(x.symbol), x.vgprs, x.sgprs, x.registers, x.sharedBytes,
            x.scratchBytes, x.vgprSpills, x.sgprSpills, x.spillStoreBytes,
            x.spillLoadBytes, x.waveSize, u->occupancy, u->blocks);
      }
      fmt::print("  {{\"index\": {}, \"label\": {}, \"body\": {}, "
                 "\"variant\": {}, \"output\": {}, \"bytes\": {:.0f}, "
                 "\"flops\": {:.0f}, \"seconds\": {:.6g}, \"bound\": "
                 "\"{}\", \"resources\": {}}}{}\n",
                 i, jsonStr(r.label), jsonStr(r.body), jsonStr(r.variant),
                 jsonStr(r.shape), r.bytes, r.flops,
                 std::isfinite(r.pred.seconds) ? r.pred.seconds : -1.0,
                 r.pred.computeBound ? "compute" : "memory", res,
                 i + 1 < rows.size() ? "," : "");
    }
    fmt::print(" ],\n \"totals\": {{\"kernels\": {}, \"bytes\": {:.0f}, "
               "\"flops\": {:.0f}, \"seconds\": {:.6g}}},\n",
               rows.size(), totalB, totalF,
               // -1 as per kernel: some kernel cannot launch (occupancy 0).
               std::isfinite(totalS) ? totalS : -1.0);
    fmt::print(" \"arena\": {{\"bytes\": {}, \"lower_bound\": {}}},\n",
               p.arenaBytes, p.arenaLowerBound);
    if (!p.states.empty()) {
      // The KV caches' dtype where --kv chose one (f32 plans as before).
      std::string kv;
      for (const format::PlanState &st : p.states)
        if (st.dtype != format::PlanDType::F32)
          kv = fmt::format(", \"kv_dtype\": \"{}\"",
                           format::planDTypeName(st.dtype));
      fmt::print(" \"state\": {{\"states\": {}, \"bytes\": {}, "
                 "\"bytes_per_sequence\": {}{}}},\n",
                 p.states.size(), stateBytes(p), stateBytes(p) / maxBatchOf(p),
                 kv);
      DecodeStep d = decodeStep(p, decodeContext);
      std::string largest;
      for (size_t i = 0; i < d.byKernel.size() && i < kStepLargest; ++i)
        largest += fmt::format("{}{{\"kernel\": {}, \"bytes\": {:.0f}}}",
                               i ? ", " : "", d.byKernel[i].second,
                               d.byKernel[i].first);
      fmt::print(" \"decode_step\": {{\"rows\": {}, \"context\": {}, "
                 "\"bytes\": {:.0f}, \"cache_bytes\": {:.0f}, "
                 "\"floor_seconds\": {:.6g}, \"largest\": [{}]}},\n",
                 d.rows, d.context, d.bytes, d.cacheBytes,
                 d.bytes / (target.memGBs * 1e9), largest);
    }
    fmt::print(" \"hc_sites\": {{\"sites\": {}, \"bytes\": {:.0f}, "
               "\"three_kernel_floor\": {:.0f}, \"one_pass_bound\": {:.0f}, "
               "\"worst_ratio\": {:.4f}}}}}\n",
               hc.sites, hc.bytes, hc.threeKernel, hc.onePass, hc.worstRatio);
    return;
  }
  fmt::print("kernel report: model {} ({}), target {}, T = {}\n", p.model,
             p.arch, p.target, t);
  fmt::print("  {} GB/s, {} TFLOP/s vector f32, {} TFLOP/s matrix f16\n",
             target.memGBs, target.vecF32Tflops, target.matF16Tflops);
  if (std::string o = codegen::optionsSummary(p); !o.empty())
    fmt::print("  codegen options: {}\n", o);
  if (!uses.empty())
    fmt::print("  resources: {}; time = roofline / (occupancy x grid fill)\n",
               gfx ? "vgpr sgpr lds scratch spill occ(waves/SIMD)"
                   : "regs - smem stack spill occ(warps/SM)");
  fmt::print("{:>4}  {:<34} {:<16} {:<22} {:>10} {:>10} {:>10} {:>7}  {}\n",
             "#", "kernel", "variant", "output", "bytes", "flops", "time",
             "bound",
             gfx ? " vgpr  sgpr     lds scratch  spill  occ"
                 : " regs     -    smem   stack  spill warps");
  std::map<std::string, std::array<double, 4>> byLabel;
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row &r = rows[i];
    fmt::print("{:>4}  {:<34} {:<16} {:<22} {:>10} {:>10} {:>10} {:>7}  {}\n",
               i, r.label, r.variant.empty() ? "-" : r.variant, r.shape,
               human(r.bytes, "B"), human(r.flops, "F"),
               human(r.pred.seconds, "s"),
               r.pred.computeBound ? "compute" : "memory", resText(i));
    auto &agg = byLabel[r.label];
    agg[0] += 1;
    agg[1] += r.bytes;
    agg[2] += r.flops;
    agg[3] += r.pred.seconds;
  }
  fmt::print("\nby kernel:\n{:<34} {:>6} {:>10} {:>7} {:>10} {:>7} {:>10} "
             "{:>7}\n",
             "kernel", "calls", "bytes", "share", "flops", "share", "time",
             "share");
  for (const auto &[label, a] : byLabel)
    fmt::print("{:<34} {:>6} {:>10} {:>6.1f}% {:>10} {:>6.1f}% {:>10} "
               "{:>6.1f}%\n",
               label, a[0], human(a[1], "B"),
               totalB ? 100.0 * a[1] / totalB : 0.0, human(a[2], "F"),
               totalF ? 100.0 * a[2] / totalF : 0.0, human(a[3], "s"),
               totalS ? 100.0 * a[3] / totalS : 0.0);
  fmt::print("\ntotal: {} kernels, {} moved, {}, predicted {} on {} ({:.0f} "
             "tokens/s at T = {})\n",
             p.kernels.size(), human(totalB, "B"), human(totalF, "FLOP"),
             human(totalS, "s"), target.name, totalS > 0 ? t / totalS : 0.0, t);
  fmt::print("arena: {} bytes ({}), lower bound {} bytes ({}), ratio {:.3f}\n",
             p.arenaBytes, human(double(p.arenaBytes), "B"), p.arenaLowerBound,
             human(double(p.arenaLowerBound), "B"),
             p.arenaLowerBound ? double(p.arenaBytes) / p.arenaLowerBound
                               : 0.0);
  fmt::print("buffers: {}, weights: {}\n", p.buffers.size(), p.weights.size());
  if (!p.states.empty())
    fmt::print("state: {} states, {} bytes ({}), {} bytes per sequence ({}) "
               "for {} slots of {} positions\n",
               p.states.size(), stateBytes(p),
               human(double(stateBytes(p)), "B"), stateBytes(p) / maxBatchOf(p),
               human(double(stateBytes(p) / maxBatchOf(p)), "B"), maxBatchOf(p),
               p.options.at("max_context"));
  // The KV caches under --kv bf16|int8 (f32 plans print what they did).
  for (format::PlanDType dt :
       {format::PlanDType::BF16, format::PlanDType::I8}) {
    uint64_t n = 0, bytes = 0;
    for (const format::PlanState &st : p.states)
      if (st.dtype == dt)
        ++n, bytes += st.bytes;
    if (n)
      fmt::print("kv caches: {} states in {}{}, {} bytes ({})\n", n,
                 format::planDTypeName(dt),
                 dt == format::PlanDType::I8 ? " (an f32 scale per row)" : "",
                 bytes, human(double(bytes), "B"));
  }
  if (!p.states.empty()) {
    DecodeStep d = decodeStep(p, decodeContext);
    double floor = d.bytes / (target.memGBs * 1e9);
    // The kernel count beside the bytes: at one row a step's launches and
    // tails, not its bytes, are most of its time (docs/PERFORMANCE.md).
    fmt::print("decode step: {} row(s) (one per slot) at {} cached positions: "
               "{} moved (caches {}) in {} kernels, floor {} at {} GB/s "
               "({:.0f} steps/s)\n",
               d.rows, d.context, human(d.bytes, "B"), human(d.cacheBytes, "B"),
               p.kernels.size(), human(floor, "s"), target.memGBs,
               floor > 0 ? 1 / floor : 0.0);
    // The kernels that hold most of it (a line of its own: scripts grep
    // the line above).
    std::string largest;
    for (size_t i = 0; i < d.byKernel.size() && i < kStepLargest; ++i) {
      const auto &[bytes, k] = d.byKernel[i];
      largest += fmt::format("{}#{} {} {} ({:.1f} %)", i ? ", " : "", k,
                             p.kernels[k].label(), human(bytes, "B"),
                             d.bytes > 0 ? 100 * bytes / d.bytes : 0.0);
    }
    fmt::print("  largest of its bytes: {}\n", largest);
  }
  if (hc.sites)
    fmt::print("hyper-connection sites: {}, {} per site; three-kernel floor {} "
               "(ratio {:.3f}, worst site {:.3f}); one-pass bound {} (ratio "
               "{:.3f})\n",
               hc.sites, human(hc.bytes / hc.sites, "B"),
               human(hc.threeKernel / hc.sites, "B"), hc.bytes / hc.threeKernel,
               hc.worstRatio, human(hc.onePass / hc.sites, "B"),
               hc.bytes / hc.onePass);
}

/// Reads every compiled module's resources (gfx1151: the code object's
/// metadata; sm_90: ptxas -v, when ptxas made cubins) and the kernels'
/// occupancy and grid at the plan's T.
bool loadKernelUses(const format::Plan &plan, const std::string &dir,
                    const ir::Target &target,
                    std::vector<std::optional<KernelUse>> &uses,
                    std::string &error) {
  const bool gfx = std::string(target.name) == "gfx1151";
  // Every entry of each module read, by symbol.
  std::map<std::string, codegen::KernelResources> bySymbol;
  std::set<std::string> modulesRead;
  uses.assign(plan.kernels.size(), std::nullopt);
  for (size_t k = 0; k < plan.kernels.size(); ++k) {
    const std::optional<format::PlanCode> &code = plan.kernels[k].code;
    if (!code)
      continue;
    std::string base = dir + "/kernels/" + code->symbol;
    if (modulesRead.insert(code->symbol).second) {
      std::vector<codegen::KernelResources> found;
      if (gfx) {
        if (!codegen::readAmdgpuCodeObject(base + ".co", found, error))
          return false;
      } else {
        std::string text;
        if (!format::readWholeFile(base + ".ptxas.txt", 1 << 20, text, error))
          continue; // no ptxas here: PTX only, no resource numbers
        if (!codegen::parsePtxasInfo(text, found, error))
          return false;
      }
      for (codegen::KernelResources &r : found)
        bySymbol.emplace(r.symbol, r);
    } else if (!bySymbol.count(code->symbol)) {
      continue; // PTX only
    }
    auto use = [&](const std::string &symbol, uint64_t dynamicShared,
                   const std::vector<int64_t> &block,
                   codegen::KernelResources &res, int &occupancy) {
      auto it = bySymbol.find(symbol);
      if (it == bySymbol.end()) {
        error = fmt::format("{}: no kernel {} in its module", base, symbol);
        return false;
      }
      res = it->second;
      res.sharedBytes += dynamicShared; // static + dynamic per block
      int threads = static_cast<int>(block[0] * block[1] * block[2]);
      occupancy = gfx ? codegen::occupancyGfx1151(res, threads)
                      : codegen::occupancySm90(res, threads);
      return true;
    };
    KernelUse u;
    if (!use(code->symbol, code->sharedBytes, code->block, u.res, u.occupancy))
      return false;
    if (code->pre) {
      u.preRes.emplace();
      if (!use(code->pre->symbol, code->pre->sharedBytes, code->pre->block,
               *u.preRes, u.preOccupancy))
        return false;
    }
    const format::PlanCode &run = code->at(plan.maxTokens);
    if (&run != &*code) {
      u.form =
          run.symbol.size() > code->symbol.size() &&
                  run.symbol.compare(0, code->symbol.size(), code->symbol) == 0
              ? run.symbol.substr(code->symbol.size())
              : run.symbol;
      u.formRes.emplace();
      if (!use(run.symbol, run.sharedBytes, run.block, *u.formRes,
               u.formOccupancy))
        return false;
    }
    u.blocks = 1;
    for (const format::PlanDim &g : run.grid)
      u.blocks *= static_cast<double>(g.at(plan.maxTokens));
    // The tiles of the code that runs: emitted again (deterministic, no
    // compile), the own code's or the alternate's of the same suffix.
    codegen::EmittedKernel ek;
    if (!codegen::emitKernel(plan, k, target.name, ek, error))
      return false;
    if (u.form.empty())
      u.runTiles = ek.codeTiles;
    else
      for (const codegen::EmittedKernel &alt : ek.alternates)
        if (alt.suffix == u.form)
          u.runTiles = alt.codeTiles;
    uses[k] = u;
  }
  return true;
}

/// Refuses a plan with a kernel (or pre-launch) the target cannot launch at
/// all (occupancy 0: too many threads, registers or bytes of shared memory
/// for one block), naming the kernel, what it asks for and the limits.
bool checkLaunchable(const format::Plan &plan, const ir::Target &target,
                     const std::vector<std::optional<KernelUse>> &uses,
                     std::string &error) {
  for (size_t k = 0; k < uses.size(); ++k) {
    if (!uses[k])
      continue;
    const format::PlanCode &code = *plan.kernels[k].code;
    auto check = [&](const codegen::KernelResources &r,
                     const std::string &symbol,
                     const std::vector<int64_t> &block) {
      std::string why = codegen::launchProblem(
          r, static_cast<int>(block[0] * block[1] * block[2]), target.name);
      if (why.empty())
        return true;
      error = fmt::format("kernel {} ({}) {} cannot launch: {}; the "
                          "generator must pick a smaller tile",
                          k, plan.kernels[k].label(), symbol, why);
      return false;
    };
    if (!check(uses[k]->res, code.symbol, code.block))
      return false;
    if (const format::PlanCode &run = code.at(plan.maxTokens);
        uses[k]->formRes && !check(*uses[k]->formRes, run.symbol, run.block))
      return false;
    if (uses[k]->preRes &&
        !check(*uses[k]->preRes, code.pre->symbol, code.pre->block))
      return false;
  }
  return true;
}

/// The state --max-context auto may take by default: 8 GiB for all slots.
constexpr uint64_t kDefaultStateBudget = uint64_t(8) << 30;

/// --max-context auto: the file's context length (<arch>.context_length),
/// lowered (to a multiple of 256, or of 16 below 256) until the state of
/// \p slots slots fits \p budget bytes. The state's bytes are affine in the
/// context (caches grow with it, recurrent state does not): two compiles
/// give the line, a third checks the choice. \p compileAt(context, printIr,
/// plan) returns an exit status. Returns 0 with \p context set, or an exit
/// status (1 with \p error set when the budget or the file is the reason).
template <typename CompileAt>
int sizeAutoContext(const format::ModelInfo &model, uint64_t budget,
                    int64_t slots, CompileAt &&compileAt, int64_t &context,
                    std::string &error) {
  std::string key = model.architecture() + ".context_length";
  const format::MetaValue *v = model.findMeta(key);
  std::optional<int64_t> asInt = v ? v->asInt() : std::nullopt;
  uint64_t fileContext = asInt && *asInt > 0 ? uint64_t(*asInt) : 0;
  if (fileContext == 0) {
    error = fmt::format("--max-context auto reads {} from the GGUF, and the "
                        "file has no such positive integer; give --max-context "
                        "N",
                        key);
    return 1;
  }
  auto bytesAt = [&](int64_t c, uint64_t &bytes) -> int {
    format::Plan p;
    if (int rc = compileAt(c, false, p))
      return rc;
    bytes = 0;
    for (const format::PlanState &st : p.states)
      bytes += st.bytes;
    return 0;
  };
  int64_t c = static_cast<int64_t>(std::min<uint64_t>(fileContext, 1 << 24));
  uint64_t full = 0;
  if (int rc = bytesAt(c, full))
    return rc;
  if (full <= budget) {
    context = c;
    return 0;
  }
  // Affine in the context: bytes(c) = fixed + perPosition * c.
  int64_t half = std::max<int64_t>(1, c / 2);
  uint64_t atHalf = 0;
  if (int rc = bytesAt(half, atHalf))
    return rc;
  double perPosition =
      half < c ? double(full - atHalf) / double(c - half) : double(full);
  double fixed = std::max(0.0, double(full) - perPosition * double(c));
  int64_t fit =
      perPosition > 0 && double(budget) > fixed
          ? static_cast<int64_t>((double(budget) - fixed) / perPosition)
          : 0;
  fit = std::min(fit, c);
  fit = fit >= 256 ? fit / 256 * 256 : fit / 16 * 16;
  uint64_t bytes = 0;
  while (fit > 0) {
    if (int rc = bytesAt(fit, bytes))
      return rc;
    if (bytes <= budget)
      break;
    fit -= fit > 256 ? 256 : 16;
  }
  if (fit <= 0) {
    error = fmt::format("--max-context auto: the state of {} slot(s) does not "
                        "fit --state-budget {} bytes even at 16 positions "
                        "({} bytes at the file's {}); raise the budget, lower "
                        "--max-batch or give --max-context N",
                        slots, budget, full, fileContext);
    return 1;
  }
  context = fit;
  return 0;
}

} // namespace

static int compileMain(int argc, char **argv) {
  std::string input, gguf, out, target = "host", precision;
  std::string kv; ///< --kv as a state dtype name: f32, bf16 or i8
  int64_t maxTokens = 0, qsaRatio = 0, maxContext = 0, maxBatch = 0;
  // --max-context auto: the file's context length, capped by stateBudget.
  bool autoContext = false;
  uint64_t stateBudget = kDefaultStateBudget;
  int64_t decodeContext = 0; ///< --context: the decode step's cached rows
  bool report = false, reportJson = false, printAll = false, fusion = true;
  bool lastOnly = false, codegenOn = true, budgetGiven = false;
  std::optional<bool> greedyIds; // default: on where the plan decodes
  std::string cacheDir, emitSource;
  // --codegen-opt values, checked as they are read and applied to the plan
  // once it is built.
  format::Plan codegenOpts;
  std::vector<std::string> printAfter;
  std::vector<std::string> skipped;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const std::string &flag) -> std::optional<std::string> {
      if (a.rfind(flag + "=", 0) == 0)
        return a.substr(flag.size() + 1);
      if (a == flag && i + 1 < argc)
        return std::string(argv[++i]);
      return std::nullopt;
    };
    if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      return 0;
    }
    if (a == "--report" || a == "--report=json") {
      report = true;
      reportJson = a == "--report=json";
    } else if (a.rfind("--precision", 0) == 0) {
      auto v = value("--precision");
      if (!v || (*v != "f32" && *v != "bf16"))
        return usageError("--precision is f32 or bf16");
      precision = *v;
    } else if (a.rfind("--kv", 0) == 0 && (a.size() == 4 || a[4] == '=')) {
      auto v = value("--kv");
      if (!v || (*v != "f32" && *v != "bf16" && *v != "int8"))
        return usageError(
            fmt::format("--kv is f32, bf16 or int8{}",
                        v ? fmt::format(", not '{}'", *v) : std::string()));
      kv = *v == "int8" ? "i8" : *v;
    } else if (a == "--no-codegen") {
      codegenOn = false;
    } else if (a.rfind("--codegen-opt", 0) == 0) {
      auto v = value("--codegen-opt");
      if (!v)
        return usageError("--codegen-opt needs NAME=VALUE (--codegen-opt "
                          "help lists the options)");
      if (*v == "help") {
        std::cout << codegen::optionsHelp();
        return 0;
      }
      std::string why;
      if (!codegen::setOption(codegenOpts, *v, why))
        return usageError(why);
    } else if (a.rfind("--cache-dir", 0) == 0) {
      auto v = value("--cache-dir");
      if (!v || v->empty())
        return usageError("--cache-dir needs a folder");
      cacheDir = *v;
    } else if (a.rfind("--emit-source", 0) == 0) {
      auto v = value("--emit-source");
      if (!v || v->empty())
        return usageError("--emit-source needs a kernel index or symbol");
      emitSource = *v;
    } else if (a == "--no-fusion") {
      fusion = false;
    } else if (a.rfind("--logits", 0) == 0) {
      auto v = value("--logits");
      if (!v || (*v != "all" && *v != "last"))
        return usageError("--logits is all or last");
      lastOnly = *v == "last";
    } else if (a.rfind("--greedy-ids", 0) == 0) {
      auto v = value("--greedy-ids");
      if (!v || (*v != "on" && *v != "off"))
        return usageError("--greedy-ids is on or off");
      greedyIds = *v == "on";
    } else if (a.rfind("--skip-pass", 0) == 0) {
      auto v = value("--skip-pass");
      if (!v || v->empty())
        return usageError("--skip-pass needs a pass name");
      skipped.push_back(*v);
    } else if (a == "--print-ir-after-all") {
      printAll = true;
    } else if (a.rfind("--print-ir-after", 0) == 0) {
      auto v = value("--print-ir-after");
      if (!v)
        return usageError("--print-ir-after needs a pass name");
      printAfter.push_back(*v);
    } else if (a.rfind("--gguf", 0) == 0) {
      auto v = value("--gguf");
      if (!v)
        return usageError("--gguf needs a file");
      gguf = *v;
    } else if (a.rfind("--target", 0) == 0) {
      auto v = value("--target");
      if (!v)
        return usageError("--target needs a name");
      target = *v;
    } else if (a.rfind("--max-tokens", 0) == 0) {
      auto v = value("--max-tokens");
      char *end = nullptr;
      long long n = v ? std::strtoll(v->c_str(), &end, 10) : 0;
      if (!v || v->empty() || *end || n <= 0 || n > (1 << 24))
        return usageError(
            fmt::format("--max-tokens needs an integer in 1..{}", 1 << 24));
      maxTokens = n;
    } else if (a.rfind("--max-context", 0) == 0) {
      auto v = value("--max-context");
      if (v && *v == "auto") {
        autoContext = true;
        maxContext = 1; // sized once the file is read
        continue;
      }
      char *end = nullptr;
      long long n = v ? std::strtoll(v->c_str(), &end, 10) : 0;
      if (!v || v->empty() || *end || n <= 0 || n > (1 << 24))
        return usageError(
            fmt::format("--max-context needs an integer in 1..{}", 1 << 24));
      maxContext = n;
    } else if (a.rfind("--state-budget", 0) == 0) {
      auto v = value("--state-budget");
      // Digits only: strtoull would take "-3" as a huge number.
      bool digits = v && !v->empty() &&
                    v->find_first_not_of("0123456789") == std::string::npos;
      unsigned long long n =
          digits ? std::strtoull(v->c_str(), nullptr, 10) : 0;
      if (!digits || n == 0 || n == ULLONG_MAX)
        return usageError("--state-budget needs a byte count (an integer > 0)");
      stateBudget = n;
      budgetGiven = true;
    } else if (a.rfind("--context", 0) == 0) {
      auto v = value("--context");
      char *end = nullptr;
      long long n = v ? std::strtoll(v->c_str(), &end, 10) : 0;
      if (!v || v->empty() || *end || n <= 0 || n > (1 << 24))
        return usageError(
            fmt::format("--context needs an integer in 1..{}", 1 << 24));
      decodeContext = n;
    } else if (a.rfind("--max-batch", 0) == 0) {
      auto v = value("--max-batch");
      char *end = nullptr;
      long long n = v ? std::strtoll(v->c_str(), &end, 10) : 0;
      if (!v || v->empty() || *end || n <= 0 || n > (1 << 16))
        return usageError(
            fmt::format("--max-batch needs an integer in 1..{}", 1 << 16));
      maxBatch = n;
    } else if (a.rfind("--qsa-compress-ratio", 0) == 0) {
      auto v = value("--qsa-compress-ratio");
      char *end = nullptr;
      long long n = v ? std::strtoll(v->c_str(), &end, 10) : 0;
      if (!v || v->empty() || *end || n <= 0 || n > 65536)
        return usageError("--qsa-compress-ratio needs an integer in 1..65536");
      qsaRatio = n;
    } else if (a == "-o") {
      if (i + 1 >= argc)
        return usageError("-o needs a directory");
      out = argv[++i];
    } else if (a.size() > 1 && a[0] == '-') {
      return usageError(fmt::format("unknown option '{}' (see --help)", a));
    } else if (input.empty()) {
      input = a;
    } else {
      return usageError(fmt::format("more than one model description ('{}' and "
                                    "'{}')",
                                    input, a));
    }
  }
  if (input.empty())
    return usageError("no model description given (see --help)");
  if (gguf.empty())
    return usageError("--gguf FILE is required");
  if (maxTokens == 0)
    return usageError("--max-tokens T is required");
  if (maxBatch && !maxContext)
    return usageError("--max-batch needs --max-context (generation)");
  if (decodeContext && (!report || !maxContext))
    return usageError("--context P sizes the decode step --report prints; "
                      "give --report and --max-context too");
  if (decodeContext && !autoContext && decodeContext > maxContext)
    return usageError(fmt::format("--context {} is past --max-context {}",
                                  decodeContext, maxContext));
  if (budgetGiven && !autoContext)
    return usageError("--state-budget sizes --max-context auto; give "
                      "--max-context auto too");
  if (!kv.empty() && !maxContext && !autoContext)
    return usageError("--kv stores the KV caches of a generation plan; give "
                      "--max-context too");
  if (kv.empty())
    kv = "f32";
  if (maxContext && !maxBatch)
    maxBatch = 1;
  if (out.empty() && emitSource.empty())
    return usageError("-o PLAN_DIR is required");
  if (!emitSource.empty() && !codegen::isDeviceTarget(target))
    return usageError("--emit-source needs --target gfx1151 or sm_90");
  const ir::Target *tgt = ir::lookupTarget(target);
  if (!tgt)
    return usageError(fmt::format("unknown target '{}' (targets: {})", target,
                                  ir::targetNames()));
  if (precision.empty())
    precision = tgt->gpu ? "bf16" : "f32";
  for (const std::string &p : printAfter)
    if (!passes::createPass(p))
      return usageError(
          fmt::format("unknown pass '{}' in --print-ir-after", p));
  // Only the passes that optimise may be left out: the others bind,
  // lower, type or place what the plan needs.
  auto optional = [](const std::string &p) {
    return p == "fold-delta-inputs" || p == "cse" || p == "prefetch-experts" ||
           p.rfind("fuse-", 0) == 0;
  };
  for (const std::string &p : skipped) {
    const auto &pipe = passes::defaultPipeline();
    if (std::find(pipe.begin(), pipe.end(), p) == pipe.end() || !optional(p))
      return usageError(fmt::format(
          "--skip-pass {}: not an optimising pass of the pipeline (those "
          "are fold-delta-inputs, cse, fuse-hyper-connection, "
          "fuse-elementwise, fuse-siblings, fuse-rows, prefetch-experts and "
          "fuse-route-sort)",
          p));
  }

  std::string text, error;
  if (!format::readWholeFile(input, size_t(64) << 20, text, error))
    return fail(error);
  auto model = format::loadModelInfo(gguf, error);
  if (!model)
    return fail(error);
  if (qsaRatio && !model->addMeta("strata.qsa_compress_ratio",
                                  format::MetaValue::makeUInt(
                                      static_cast<uint64_t>(qsaRatio)))) {
    return fail(fmt::format("{} already holds strata.qsa_compress_ratio; "
                            "drop --qsa-compress-ratio",
                            gguf));
  }

  // Parse, bind and run the pipeline for a context of \p context positions
  // (0: no generation state) into \p plan; 0 on success, else the exit
  // status (the diagnostics printed). --max-context auto runs it more than
  // once; only the last run prints the IR dumps asked for.
  std::map<std::string, std::string> bakedMeta;
  auto compileAt = [&](int64_t context, bool printIr,
                       format::Plan &plan) -> int {
    ir::SourceMgr sm;
    ir::DiagnosticEngine diag(sm, std::cerr);
    auto m = ir::parseModule(sm, sm.addBuffer(input, text), diag);
    if (!m || !ir::verifyModule(*m, diag))
      return 1;
    // A description binds the files of its own architecture: its metadata
    // keys are "<arch>.*", and strata-run refuses a plan of another (so the
    // compiler does too, before anything is written).
    if (model->architecture() != m->name)
      return fail(fmt::format("{} is a '{}' model (general.architecture), "
                              "but {} describes '{}'",
                              gguf, format::escapeBytes(model->architecture()),
                              input, m->name));
    passes::PassManager pm;
    for (const std::string &p : passes::defaultPipeline())
      if ((fusion || p.rfind("fuse-", 0) != 0) &&
          std::find(skipped.begin(), skipped.end(), p) == skipped.end())
        pm.add(passes::createPass(p));
    pm.setAfterPassHook([&](const std::string &pass, const ir::Module &mod) {
      bool want = printAll;
      for (const std::string &p : printAfter)
        want |= p == pass;
      if (want && printIr)
        std::cerr << fmt::format("// -----// IR Dump After {} //----- //\n{}",
                                 pass, ir::printModule(mod));
    });
    passes::PassContext ctx{diag};
    ctx.model = model.get();
    ctx.maxTokens = maxTokens;
    ctx.target = target;
    ctx.precision = precision;
    ctx.kv = kv;
    ctx.lastPositionOnly = lastOnly;
    ctx.greedyIds = passes::PassContext::greedyIdsFor(greedyIds, context > 0);
    ctx.maxContext = context;
    ctx.maxBatch = context ? maxBatch : 0;
    if (!pm.run(m, ctx))
      return 1;
    plan = format::Plan();
    if (!codegen::buildPlan(*m, maxTokens, target, model->architecture(), plan,
                            error))
      return fail(error);
    bakedMeta = ctx.bakedMeta;
    return 0;
  };

  format::Plan plan;
  if (autoContext) {
    if (int rc = sizeAutoContext(*model, stateBudget, maxBatch, compileAt,
                                 maxContext, error))
      return rc == 1 && !error.empty() ? fail(error) : rc;
  }
  if (int rc = compileAt(maxContext, true, plan))
    return rc;
  if (qsaRatio)
    plan.options["qsa_compress_ratio"] = qsaRatio;
  // What the plan folded in from the file's metadata; keys strata itself
  // added (strata.*: compile options) are in the options instead.
  for (const auto &[key, value] : bakedMeta)
    if (key.rfind("strata.", 0) != 0)
      plan.metadata[key] = value;
  if (lastOnly)
    plan.options["last_position_logits"] = 1;
  if (maxContext) {
    plan.options["max_context"] = maxContext;
    plan.options["max_batch"] = maxBatch;
  }
  for (const auto &[key, value] : codegenOpts.options)
    plan.options[key] = value;
  // The roofline --profile measures against.
  plan.roofline = {tgt->memGBs, tgt->vecF32Tflops, tgt->matF16Tflops};
  // Generated sm_90 kernels begin with grid_dependency_wait(): the runtime
  // may start each while the one before it drains.
  if (codegenOn && target == "sm_90")
    plan.options["grid_dependency_wait"] = 1;
  // bf16 storage changes the numbers a plan computes.
  if (precision == "bf16")
    plan.options["bf16_activations"] = 1;
  // Round-trip through the loader's validation before anything is written.
  format::Plan check;
  if (!format::planFromJson(format::planToJson(plan), "plan.json", check,
                            error))
    return fail("internal error, the plan does not validate: " + error);
  // What strata-run checks of the file against the plan, checked here too:
  // the compiler never writes a plan its runtime refuses for this file.
  if (!format::checkPlanMetadata(check, *model, error) ||
      !format::checkPlanWeights(check, *model, error))
    return fail(error);
  bool gpu = codegen::isDeviceTarget(target);
  if (!emitSource.empty()) {
    // One kernel's source, by index or symbol; nothing is written.
    for (size_t k = 0; k < plan.kernels.size(); ++k) {
      codegen::EmittedKernel ek;
      if (!codegen::emitKernel(plan, k, target, ek, error))
        return fail(error);
      if (emitSource == std::to_string(k) || emitSource == ek.symbol) {
        fmt::print("{}", codegen::deviceSource(target, ek));
        return 0;
      }
    }
    return fail(fmt::format("no kernel '{}' in the plan ({} kernels: give an "
                            "index 0..{} or a symbol)",
                            emitSource, plan.kernels.size(),
                            plan.kernels.size() - 1));
  }
  std::error_code fsErr;
  bool existed = std::filesystem::exists(out, fsErr);
  codegen::AotStats aot;
  if (gpu && codegenOn) {
    codegen::AotOptions opts;
    opts.cacheDir = cacheDir;
    if (const char *cc = std::getenv("STRATA_DEVICE_CC"); cc && *cc)
      opts.clang = cc;
    opts.progress = isatty(2);
    if (!codegen::compileKernels(plan, out, opts, aot, error)) {
      // Leave nothing half-written: the kernels folder, and the plan folder
      // when this run made it (the failing source is in the cache folder).
      std::filesystem::remove_all(out + "/kernels", fsErr);
      if (!existed)
        std::filesystem::remove_all(out, fsErr);
      return fail(error);
    }
    // The plan with its code validates (an internal error if not) and each
    // kernel can launch (else it would fail at run time only); a refusal
    // leaves nothing half-written.
    std::vector<std::optional<KernelUse>> uses;
    std::string why;
    if (!format::planFromJson(format::planToJson(plan), "plan.json", check,
                              error))
      why = "internal error, the plan does not validate: " + error;
    else if (!loadKernelUses(plan, out, *tgt, uses, error) ||
             !checkLaunchable(plan, *tgt, uses, error))
      why = error;
    if (!why.empty()) {
      std::filesystem::remove_all(out + "/kernels", fsErr);
      if (!existed)
        std::filesystem::remove_all(out, fsErr);
      return fail(why);
    }
  }
  if (!format::writePlanDir(out, plan, error))
    return fail(error);
  if (report) {
    std::vector<std::optional<KernelUse>> uses;
    if (gpu && codegenOn && !loadKernelUses(plan, out, *tgt, uses, error))
      return fail(error);
    printReport(plan, *tgt, reportJson, uses,
                decodeContext         ? decodeContext
                : plan.states.empty() ? 0
                                      : plan.options.at("max_context"));
  }
  return 0;
}

int main(int argc, char **argv) {
  return strata::tools::runToolMain("strata-compile",
                                    [&] { return compileMain(argc, argv); });
}
