//===- StrataRun.cpp - run a compiled plan on a prompt --------------------===//
//
//   strata-run PLAN_DIR --gguf FILE (--tokens 1,2,3 | --tokens-file F)
//              [--backend cpu|cuda|hip] [--check] [--dump-logits OUT.f32]
//              [--top N] [--nan-check] [--profile] [--no-graphs]
//              [--repeat N] [--dump-buffer NAME=OUT.f32 ...]
//   strata-run PLAN_DIR --gguf FILE (--prompt TEXT | --prompt-file F |
//              --tokens IDS | --tokens-file F) -n N [--temp X] [--top-k K]
//              [--top-p P] [--min-p M] [--repeat-penalty R] [--seed S]
//              [--stop STR ...] [--no-special] [--ignore-eos]
//              [--dump-ids OUT] [--dump-logits OUT.f32] [--spec K]
//              [--batch B]
//
// Without -n: one run; prints the top N tokens of the last position, a
// timing line and (GPU plans) whether a device graph ran the kernels; with
// --dump-logits writes all logits as raw little-endian float32 [T, vocab].
// With -n: generation (Generation.cpp).
//
//===----------------------------------------------------------------------===//
#include "tools/strata-run/StrataRun.h"
#include "runtime/Executor.h"
#include "runtime/format/FileUtil.h"
#include "runtime/format/Plan.h"
#include "tools/ToolMain.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

using namespace strata;

namespace strata::tools::run {

int fail(const std::string &message) {
  fmt::print(stderr, "strata-run: error: {}\n", message);
  return 1;
}

int usageError(const std::string &message) {
  fmt::print(stderr, "strata-run: error: {}\n", message);
  return 2;
}

bool parseTokens(std::string_view text, const std::string &origin,
                 std::vector<int32_t> &out, std::string &error) {
  auto isSep = [](char c) {
    return c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r';
  };
  size_t i = 0;
  while (i < text.size()) {
    if (isSep(text[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && !isSep(text[j]))
      ++j;
    std::string_view word = text.substr(i, j - i);
    int64_t v = 0;
    auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), v);
    if (ec != std::errc() || end != word.data() + word.size() || v < 0 ||
        v > std::numeric_limits<int32_t>::max()) {
      std::string shown(word.substr(0, 40));
      error = fmt::format("{}: '{}' (token {}) is not a token id (a "
                          "non-negative 32-bit integer)",
                          origin, shown, out.size());
      return false;
    }
    out.push_back(static_cast<int32_t>(v));
    i = j;
  }
  if (out.empty()) {
    error = fmt::format("{}: no token ids", origin);
    return false;
  }
  return true;
}

bool loadPlan(Options &o, format::Plan &plan, std::string &error) {
  if (!format::readPlanDir(o.planDir, plan, error))
    return false;
  // The plan's target picks the default backend; a GPU plan needs its
  // kernels' code (strata-compile --no-codegen leaves it out).
  if (o.backend.empty())
    o.backend = plan.target == "sm_90"     ? "cuda"
                : plan.target == "gfx1151" ? "hip"
                                           : "cpu";
  if (plan.target != "host")
    for (const format::PlanKernel &k : plan.kernels)
      if (!k.code) {
        error = fmt::format(
            "{}: the plan was compiled for target '{}' with --no-codegen, so "
            "its kernels have no code; compile it without --no-codegen, or "
            "with --target host (and --precision bf16 for the GPU's storage "
            "policy) to run it on the cpu backend",
            o.planDir, plan.target);
        return false;
      }
  return true;
}

std::unique_ptr<runtime::Executor>
createExecutor(const Options &o, const format::Plan &plan, std::string &error) {
  std::unique_ptr<runtime::Executor> ex = runtime::Executor::create(
      plan, o.gguf, o.backend, error, runtime::DeviceOptions{o.threads},
      o.planDir, o.synthetic);
  if (!ex)
    return nullptr;
  if (o.verifySynthetic) {
    std::string report;
    if (!ex->verifySyntheticWeights(report, error)) {
      error = "--verify-synthetic: " + error;
      return nullptr;
    }
    // Generation's standard output is the text alone.
    fmt::print(o.generate ? stderr : stdout, "{}\n", report);
  }
  if (o.check && !ex->setCheck(runtime::CheckBars{}, error))
    return nullptr;
  ex->setNanCheck(o.nanCheck);
  // Generation fills the arena with NaN once, not before each of its runs
  // (a GB a decode step for a plan of 1,024 rows); checking runs keep the
  // fill before every run.
  ex->setPoisonEachRun(!o.generate || o.check || o.nanCheck);
  ex->setGraphs(!o.noGraphs);
  return ex;
}

std::string f32Bytes(const std::vector<float> &v) {
  std::string bytes(v.size() * sizeof(float), '\0');
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t u = std::bit_cast<uint32_t>(v[i]);
    for (int b = 0; b < 4; ++b)
      bytes[i * 4 + b] = static_cast<char>((u >> (8 * b)) & 0xFF);
  }
  return bytes;
}

/// A kernel's floor at the plan's roofline: the larger of its bytes over
/// the bandwidth and its FLOPs over the peak of the units it runs on (the
/// matrix units for matmul/expert variants on them and bf16 attention).
double floorSeconds(const format::Plan &plan, const format::PlanKernel &k,
                    double bytes, double flops) {
  const format::PlanRoofline &r = plan.roofline;
  if (r.memGBs <= 0)
    return 0;
  bool matrix = k.variant.find("wmma") != std::string::npos ||
                k.variant.find("mma_bf16") != std::string::npos;
  if (!matrix && plan.options.count("bf16_activations"))
    for (const format::BodyOp &op : k.body)
      matrix |= op.recipe == format::Recipe::Attention;
  if (!k.isFused() && k.recipe == format::Recipe::Attention &&
      plan.options.count("bf16_activations"))
    matrix = true;
  double peak = matrix ? r.matTflops : r.vecTflops;
  return std::max(bytes / (r.memGBs * 1e9),
                  peak > 0 ? flops / (peak * 1e12) : 0.0);
}

/// The --profile tables: per kernel family (label), calls, time, share,
/// achieved GB/s and TFLOP/s from the compiler's byte and FLOP counts at
/// the run's T (cache reads at the run's positions), the floor at the
/// plan's roofline and the share of it reached; then the ten slowest
/// kernels; totals with the sum of floors. --profile=json prints every
/// kernel instead.
void printProfile(const format::Plan &plan, const runtime::Executor &ex,
                  int64_t tokens, const std::string &backend, bool json) {
  const std::vector<double> &seconds = ex.kernelSeconds();
  struct Row {
    std::string label;
    uint64_t calls = 0;
    double bytes = 0, flops = 0, seconds = 0, floor = 0;
  };
  std::vector<Row> families, kernels;
  double total = 0, totalFloor = 0;
  for (size_t k = 0; k < plan.kernels.size() && k < seconds.size(); ++k) {
    const format::PlanKernel &pk = plan.kernels[k];
    Row r{pk.label(),
          1,
          format::kernelRunBytes(plan, pk, tokens, ex.lastRunAttended()).bytes,
          pk.flops.at(tokens),
          seconds[k],
          0};
    r.floor = floorSeconds(plan, pk, r.bytes, r.flops);
    kernels.push_back(r);
    auto it = std::find_if(families.begin(), families.end(),
                           [&](const Row &f) { return f.label == r.label; });
    if (it == families.end()) {
      families.push_back({r.label});
      it = families.end() - 1;
    }
    ++it->calls;
    it->bytes += r.bytes;
    it->flops += r.flops;
    it->seconds += r.seconds;
    it->floor += r.floor;
    total += r.seconds;
    totalFloor += r.floor;
  }
  auto pct = [](double floor, double s) {
    return floor > 0 && s > 0 ? 100.0 * floor / s : 0.0;
  };
  if (json) {
    fmt::print("{{\"backend\": \"{}\", \"tokens\": {}, \"seconds\": {:.9g}, "
               "\"floor_seconds\": {:.9g}, \"tokens_per_second\": {:.6g},\n "
               "\"kernels\": [\n",
               backend, tokens, total, totalFloor,
               total > 0 ? tokens / total : 0.0);
    for (size_t k = 0; k < kernels.size(); ++k) {
      const Row &r = kernels[k];
      fmt::print("  {{\"index\": {}, \"label\": \"{}\", \"seconds\": {:.9g}, "
                 "\"bytes\": {:.0f}, \"flops\": {:.0f}, \"floor_seconds\": "
                 "{:.9g}, \"roofline_pct\": {:.4g}}}{}\n",
                 k, r.label, r.seconds, r.bytes, r.flops, r.floor,
                 pct(r.floor, r.seconds), k + 1 < kernels.size() ? "," : "");
    }
    fmt::print(" ]}}\n");
    return;
  }
  std::sort(families.begin(), families.end(), [](const Row &a, const Row &b) {
    return a.seconds != b.seconds ? a.seconds > b.seconds : a.label < b.label;
  });
  fmt::print("profile: {} kernels on {}, {} tokens, {:.3f} ms in kernels "
             "({:.0f} tokens/s); sum of per-kernel floors {:.3f} ms ({:.1f} % "
             "of roofline)\n",
             plan.kernels.size(), backend, tokens, total * 1e3,
             total > 0 ? tokens / total : 0.0, totalFloor * 1e3,
             pct(totalFloor, total));
  fmt::print("  {:<34} {:>6} {:>10} {:>7} {:>9} {:>9} {:>10} {:>7}\n", "kernel",
             "calls", "ms", "share", "GB/s", "TFLOP/s", "floor ms", "%roof");
  auto line = [&](const Row &r) {
    fmt::print("  {:<34} {:>6} {:>10.3f} {:>6.1f}% {:>9.1f} {:>9.2f} {:>10.3f} "
               "{:>6.1f}%\n",
               r.label, r.calls, r.seconds * 1e3,
               total > 0 ? 100.0 * r.seconds / total : 0.0,
               r.seconds > 0 ? r.bytes / r.seconds / 1e9 : 0.0,
               r.seconds > 0 ? r.flops / r.seconds / 1e12 : 0.0, r.floor * 1e3,
               pct(r.floor, r.seconds));
  };
  for (const Row &r : families)
    line(r);
  std::vector<size_t> order(kernels.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return kernels[a].seconds > kernels[b].seconds;
  });
  fmt::print("slowest kernels:\n");
  for (size_t i = 0; i < std::min<size_t>(10, order.size()); ++i) {
    Row r = kernels[order[i]];
    r.label = fmt::format("{} {}", order[i], r.label);
    line(r);
  }
}

} // namespace strata::tools::run

using namespace strata::tools::run;

namespace {

constexpr const char *kUsage =
    "usage: strata-run PLAN_DIR --gguf FILE (--tokens IDS | --tokens-file F)\n"
    "                  [--backend NAME] [--dump-logits OUT.f32] [--top N]\n"
    "                  [--dump-buffer NAME=OUT.f32 ...]\n"
    "                  [--threads N] [--nan-check] [--profile] [--check]\n"
    "                  [--synthetic-weights SEED [--verify-synthetic]]\n"
    "                  [--no-graphs] [--repeat N]\n"
    "       strata-run PLAN_DIR --gguf FILE (--prompt TEXT | --prompt-file F\n"
    "                  | --tokens IDS | --tokens-file F) -n N [--temp X]\n"
    "                  [--top-k K] [--top-p P] [--min-p M]\n"
    "                  [--repeat-penalty R] [--seed S] [--stop STR ...]\n"
    "                  [--no-special] [--ignore-eos] [--dump-ids OUT]\n"
    "                  [--dump-logits OUT.f32] [--context-shift "
    "none|truncate]\n"
    "                  [--spec K] [--batch B]\n"
    "                  [--backend NAME] ...\n"
    "\n"
    "Runs the compiled plan in PLAN_DIR (its plan.json) with the weights of\n"
    "FILE on one prompt and prints the N most likely next tokens after the\n"
    "last prompt position (id and logit), then a timing line and, for GPU\n"
    "plans, a line saying whether one device graph ran the kernels.\n"
    "\n"
    "With -n N it generates: up to N tokens after the prompt, each sampled\n"
    "from the last position's logits, the text streamed to standard output\n"
    "as it is made (whole UTF-8 characters; the prompt is not echoed; token\n"
    "ids, one per line, where the GGUF has no tokenizer). It stops at an\n"
    "end-of-generation token (EOS, EOT, <|im_end|>...; not printed), at a\n"
    "--stop string (not printed) or after N tokens; then one timing line on\n"
    "standard error. The plan needs its decode entry (strata-compile\n"
    "--max-context N; --logits last suits generation): the prompt is\n"
    "prefilled in chunks of max_tokens rows, then each token is one decode\n"
    "row over the plan's KV caches and recurrent state; the prompt and the\n"
    "tokens generated must fit in its context (--context-shift).\n"
    "\n"
    "  --gguf FILE          the GGUF weight file the plan was compiled for\n"
    "  --tokens IDS         the prompt's token ids, separated by commas\n"
    "                       (e.g. 1,2,3); 1 to the plan's max_tokens ids\n"
    "  --tokens-file F      read the token ids from F instead (separated by\n"
    "                       commas and/or whitespace; '-' is standard input)\n"
    "  --backend NAME       the device to run on: cpu (host plans), cuda\n"
    "                       (sm_90 plans), hip (gfx1151 plans); default: the\n"
    "                       plan's target's backend. GPU backends load the\n"
    "                       driver (libcuda.so.1, libamdhip64.so) at run time\n"
    "  --synthetic-weights SEED\n"
    "                       do not read weights from FILE (which may be a\n"
    "                       shapes-only GGUF: strata-gguf synth "
    "--shapes-only)\n"
    "                       but fill each with deterministic valid random\n"
    "                       blocks of its type (small finite scales), the "
    "same\n"
    "                       bytes on every backend: real-size runs without "
    "the\n"
    "                       download. GPU plans fill them on the device\n"
    "                       (the plan's strata_synthetic_fill kernel)\n"
    "  --verify-synthetic   with --synthetic-weights: compare every weight,\n"
    "                       byte for byte, with the host fill of the same\n"
    "                       seed before running (fails naming the first\n"
    "                       differing weight and byte)\n"
    "  --check              GPU backends: run every kernel also on the cpu\n"
    "                       backend, on the same inputs, and compare outputs\n"
    "                       (NMSE <= 1e-4 for f32 and bf16, i32 mismatch <=\n"
    "                       1 %); fail naming the first kernel over a bar\n"
    "                       and its fused body; print the worst per kernel.\n"
    "                       Inputs a launch reads as int8 activations (the\n"
    "                       plan's int8_inputs: gemm-decode-int8's decode\n"
    "                       GEMVs) reach the cpu rounded alike, 8 values a\n"
    "                       scale, so both sides do the same arithmetic\n"
    "  --threads N          cpu: workers per kernel, 1 to 1024 (default: one\n"
    "                       per hardware thread); results do not depend on it\n"
    "  --dump-logits OUT    write every position's logits to OUT as raw\n"
    "                       little-endian float32 [T, vocab], atomically\n"
    "  --dump-buffer NAME=OUT.f32\n"
    "                       also write buffer NAME (an IR value name after\n"
    "                       expand) as raw little-endian float32, taken when\n"
    "                       its kernel finishes; repeatable\n"
    "  --top N              how many tokens to print (default 5)\n"
    "  --nan-check          after every kernel, check its output for NaN and\n"
    "                       name the first kernel that leaves one (slow)\n"
    "  --profile[=json]     time every kernel (device events in stream\n"
    "                       order) and print per kernel family: calls, ms,\n"
    "                       share, GB/s and TFLOP/s from the compiler's byte\n"
    "                       and FLOP counts at the run's T (the KV caches'\n"
    "                       reads at the positions its rows attend), the\n"
    "                       floor at the plan's roofline and the share of it\n"
    "                       reached; the ten slowest kernels; totals,\n"
    "                       tokens/s and the sum of floors (json: every\n"
    "                       kernel)\n"
    "  --no-graphs          GPU backends: launch every kernel on its own in\n"
    "                       every run. By default the second run at a prompt\n"
    "                       length captures the plan's launches into one\n"
    "                       CUDA/HIP graph and later runs replay it (a single\n"
    "                       run launches one at a time: capturing costs what\n"
    "                       launching does); --profile, --check, --nan-check\n"
    "                       and --dump-buffer launch one at a time anyway\n"
    "  --repeat N           run the prompt N times (default 1) and print the\n"
    "                       first run's time and the later runs' minimum and\n"
    "                       median (runs 2 to N replay a graph); the outputs\n"
    "                       are the last run's\n"
    "Generation (-n):\n"
    "  -n N                 generate at most N tokens (0 or more)\n"
    "  --prompt TEXT        the prompt as text, tokenized by the GGUF's\n"
    "                       tokenizer (special tokens written in it are\n"
    "                       recognised, BOS added where the vocabulary asks)\n"
    "  --prompt-file F      read the prompt text from F ('-': standard input)\n"
    "                       (--tokens / --tokens-file give the prompt as ids)\n"
    "  --temp X             temperature, >= 0 (default 0: greedy, the most\n"
    "                       likely token, lowest id on ties); > 0 samples\n"
    "  --top-k K            keep the K most likely tokens; 0: off (default "
    "40)\n"
    "  --top-p P            nucleus: the fewest most likely tokens whose\n"
    "                       probabilities sum to P, in (0, 1]; 1: off\n"
    "                       (default 0.95)\n"
    "  --min-p M            keep tokens at least M times as likely as the\n"
    "                       most likely, in [0, 1]; 0: off (default 0.05)\n"
    "  --repeat-penalty R   penalise the last 64 tokens' repeats, > 0; 1: off\n"
    "                       (default 1)\n"
    "  --seed S             the sampler's seed (default 0): a seed gives the\n"
    "                       same tokens on every run and platform\n"
    "                       (the sampler is llama.cpp's chain: penalties,\n"
    "                       top-k, top-p, min-p, temperature; README.md)\n"
    "  --stop STR           stop when the text contains STR (not printed;\n"
    "                       it may span tokens); repeatable\n"
    "  --no-special         read special tokens in the prompt as plain text\n"
    "                       and leave control tokens out of the output\n"
    "  --ignore-eos         do not stop at end-of-generation tokens (they\n"
    "                       are generated and printed as any other)\n"
    "  --dump-ids OUT       write the prompt's ids on one line and the\n"
    "                       generated ids (an end-of-generation token\n"
    "                       included) on the next, comma-separated\n"
    "  --dump-logits OUT    with -n: the logits every generated token was\n"
    "                       sampled from, raw float32 [generated, vocab]\n"
    "  --context-shift MODE what to do when the prompt and -n do not fit the\n"
    "                       context (the plan's --max-context). By default\n"
    "                       that is refused before anything runs; none:\n"
    "                       generate until the context is full, then stop;\n"
    "                       truncate: drop the prompt's oldest tokens so it\n"
    "                       and -n fit\n"
    "  --spec K             speculative decoding: each run carries up to K\n"
    "                       draft tokens (1 to 256; fewer while drafts keep\n"
    "                       failing) guessed from the sequence itself (the\n"
    "                       tokens that followed the latest earlier\n"
    "                       occurrence of its last 3, 2 or 1 tokens); the\n"
    "                       sampler, run on each row's logits as without\n"
    "                       --spec, keeps the drafts it would have chosen\n"
    "                       and adds its own next token, so the output is\n"
    "                       the same (greedy, or sampled with a seed) and a\n"
    "                       run makes one token or more. Needs a plan that\n"
    "                       returns every row's logits (strata-compile\n"
    "                       --logits all); the timings line counts the\n"
    "                       drafts, those accepted and the rollbacks of\n"
    "                       recurrent state after a rejection\n"
    "  --batch B            a benchmark of batched decode: B sequences (B <=\n"
    "                       the plan's --max-batch and --max-tokens), the\n"
    "                       b-th from the prompt rotated left by b tokens,\n"
    "                       each prefilled alone, then -n greedy steps of B\n"
    "                       rows a run; prints each sequence's ids (a line\n"
    "                       each) and the timings (steps, ms a step, tokens/s\n"
    "                       of all); greedy only (no --temp, --spec, --stop);\n"
    "                       --profile: the last decode step's kernels\n"
    "  Generation needs a plan compiled with --max-context N (its decode\n"
    "  entry): the prompt is prefilled in chunks of --max-tokens rows, then\n"
    "  each token is one row over the KV caches and recurrent state.\n"
    "  --top, --repeat and --dump-buffer describe a single run and are\n"
    "  refused with -n; --profile with -n prints, after the text, the\n"
    "  profile of the last model run (a decode step). Files are written\n"
    "  atomically, at the end, and only on success.\n"
    "\n"
    "  --help               show this help\n"
    "\n"
    "Exit status: 0 on success, 1 on an error (nothing is written then), 2\n"
    "on a command-line mistake.\n";

/// The most drafts --spec takes: more rows than any run should carry.
constexpr int64_t kMaxSpecDrafts = 256;

/// Parses all of \p text as a decimal integer in [lo, hi] into \p out.
template <typename Int>
bool parseIntIn(std::string_view text, Int lo, Int hi, Int &out) {
  Int v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < lo || v > hi)
    return false;
  out = v;
  return true;
}

/// 1317 as "1,317".
std::string withCommas(uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0)
      out += ',';
    out += digits[i];
  }
  return out;
}

/// The sampler option a generation flag sets (SamplerOptions.def's name),
/// or null. The flags are llama.cpp's.
const char *samplerOptionOfFlag(std::string_view flag) {
  static constexpr std::pair<std::string_view, const char *> kFlags[] = {
      {"--temp", "temperature"}, {"--top-k", "top_k"},
      {"--top-p", "top_p"},      {"--min-p", "min_p"},
      {"--seed", "seed"},        {"--repeat-penalty", "penalty_repeat"},
  };
  for (const auto &[f, name] : kFlags)
    if (f == flag)
      return name;
  return nullptr;
}

/// Parses argv; returns 0 to go on, -1 after --help, 1 on an error.
int parseArgs(int argc, char **argv, Options &o) {
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return -1;
    }
    if (a == "--nan-check") {
      o.nanCheck = true;
      continue;
    }
    if (a == "--check") {
      o.check = true;
      continue;
    }
    if (a == "--no-graphs") {
      o.noGraphs = true;
      continue;
    }
    if (a == "--verify-synthetic") {
      o.verifySynthetic = true;
      continue;
    }
    if (a == "--synthetic-weights") {
      uint64_t seed = 0;
      if (i + 1 >= args.size() ||
          !parseIntIn<uint64_t>(args[i + 1], 0, UINT64_MAX, seed))
        return usageError("--synthetic-weights needs a seed (an integer >= 0)");
      o.synthetic = seed;
      ++i;
      continue;
    }
    if (a == "--profile" || a == "--profile=json") {
      o.profile = true;
      o.profileJson = a == "--profile=json";
      continue;
    }
    if (a == "--no-special" || a == "--ignore-eos") {
      (a == "--no-special" ? o.noSpecial : o.ignoreEos) = true;
      o.generationOnly.push_back(a);
      continue;
    }
    if (a == "--context-shift") {
      if (i + 1 >= args.size() ||
          (args[i + 1] != "none" && args[i + 1] != "truncate"))
        return usageError(fmt::format(
            "--context-shift needs none or truncate{}",
            i + 1 < args.size() ? fmt::format(", got '{}'", args[i + 1])
                                : std::string()));
      o.contextShift = args[i + 1];
      o.generationOnly.push_back(a);
      ++i;
      continue;
    }
    if (a == "-n") {
      int64_t n = 0;
      if (i + 1 >= args.size() ||
          !parseIntIn<int64_t>(args[i + 1], 0, INT32_MAX, n))
        return usageError(fmt::format(
            "-n needs the number of tokens to generate (an integer from 0 to "
            "{}){}",
            INT32_MAX,
            i + 1 < args.size() ? fmt::format(", got '{}'", args[i + 1])
                                : std::string()));
      o.generate = n;
      ++i;
      continue;
    }
    if (a.rfind("--", 0) != 0 || a == "-") {
      if (!o.planDir.empty())
        return usageError(
            fmt::format("unexpected argument '{}' (one PLAN_DIR; see "
                        "--help)",
                        a));
      o.planDir = a;
      continue;
    }
    // --flag VALUE or --flag=VALUE.
    std::string value;
    size_t eq = a.find('=');
    if (eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return usageError(fmt::format("{} needs a value (see --help)", a));
    }
    if (a == "--gguf") {
      o.gguf = value;
    } else if (a == "--tokens") {
      o.tokens = value;
      o.haveTokens = true;
    } else if (a == "--tokens-file") {
      o.tokensFile = value;
      o.haveTokensFile = true;
    } else if (a == "--backend") {
      std::vector<std::string> names = runtime::deviceNames();
      if (std::find(names.begin(), names.end(), value) == names.end())
        return usageError(fmt::format("unknown backend '{}' (available: {})",
                                      value, fmt::join(names, ", ")));
      o.backend = value;
    } else if (a == "--dump-logits") {
      if (value.empty())
        return usageError("--dump-logits needs a file name");
      o.dumpLogits = value;
    } else if (a == "--prompt" || a == "--prompt-file") {
      (a == "--prompt" ? o.prompt : o.promptFile) = value;
      (a == "--prompt" ? o.havePrompt : o.havePromptFile) = true;
      o.generationOnly.push_back(a);
    } else if (const char *name = samplerOptionOfFlag(a)) {
      // The sampler checks the value and its range (SamplerOptions.def).
      std::string error;
      if (!runtime::setSamplerOption(o.sampling,
                                     fmt::format("{}={}", name, value), error))
        return usageError(fmt::format("{}: {}", a, error));
      o.generationOnly.push_back(a);
    } else if (a == "--stop") {
      if (value.empty())
        return usageError("--stop needs a nonempty string");
      o.stops.push_back(value);
      o.generationOnly.push_back(a);
    } else if (a == "--spec") {
      if (!parseIntIn<int64_t>(value, 1, kMaxSpecDrafts, o.spec))
        return usageError(fmt::format("--spec needs the most draft tokens a "
                                      "run, an integer from 1 to {}, got '{}'",
                                      kMaxSpecDrafts, value));
      o.generationOnly.push_back(a);
    } else if (a == "--batch") {
      if (!parseIntIn<int64_t>(value, 1, 1024, o.batch))
        return usageError(fmt::format("--batch needs the number of sequences "
                                      "decoded together, an integer from 1 "
                                      "to 1024, got '{}'",
                                      value));
      o.generationOnly.push_back(a);
    } else if (a == "--dump-ids") {
      if (value.empty())
        return usageError("--dump-ids needs a file name");
      o.dumpIds = value;
      o.generationOnly.push_back(a);
    } else if (a == "--dump-buffer") {
      o.singleRunOnly.push_back(a);
      size_t sep = value.find('=');
      if (sep == std::string::npos || sep == 0 || sep + 1 == value.size())
        return usageError(
            fmt::format("--dump-buffer needs NAME=OUT.f32, got '{}'", value));
      o.dumpBuffers.push_back({value.substr(0, sep), value.substr(sep + 1)});
    } else if (a == "--repeat") {
      o.singleRunOnly.push_back(a);
      if (!parseIntIn(value, 1, 1000000, o.repeat))
        return usageError(fmt::format(
            "--repeat needs an integer from 1 to 1000000, got '{}'", value));
    } else if (a == "--threads") {
      if (!parseIntIn(value, 1, 1024, o.threads))
        return usageError(fmt::format(
            "--threads needs an integer from 1 to 1024, got '{}'", value));
    } else if (a == "--top") {
      o.singleRunOnly.push_back(a);
      if (!parseIntIn(value, int64_t{1}, std::numeric_limits<int64_t>::max(),
                      o.top))
        return usageError(
            fmt::format("--top needs a positive integer, got '{}'", value));
    } else {
      return usageError(fmt::format("unknown option '{}' (see --help)", a));
    }
  }
  if (o.planDir.empty())
    return usageError("missing PLAN_DIR (see --help)");
  if (o.gguf.empty())
    return usageError("missing --gguf FILE (see --help)");
  if (o.verifySynthetic && !o.synthetic)
    return usageError("--verify-synthetic compares synthetic weights: give "
                      "--synthetic-weights SEED too");
  if (!o.generate) {
    if (o.havePrompt || o.havePromptFile)
      return usageError(
          fmt::format("{} generates text: give -n N too (see "
                      "--help)",
                      o.havePrompt ? "--prompt" : "--prompt-file"));
    if (!o.generationOnly.empty())
      return usageError(fmt::format("{} applies to generation: give -n N too "
                                    "(see --help)",
                                    o.generationOnly.front()));
    if (o.haveTokens == o.haveTokensFile)
      return usageError(
          "give exactly one of --tokens and --tokens-file (see --help)");
    return 0;
  }
  if (!o.singleRunOnly.empty())
    return usageError(fmt::format("{} describes a single run and does not "
                                  "apply to generation (-n; see --help)",
                                  o.singleRunOnly.front()));
  if (int(o.havePrompt) + int(o.havePromptFile) + int(o.haveTokens) +
          int(o.haveTokensFile) !=
      1)
    return usageError("give exactly one of --prompt, --prompt-file, --tokens "
                      "and --tokens-file (see --help)");
  return 0;
}

/// The --check summary: per kernel label, the kernels compared and the
/// worst NMSE and i32 mismatch against the cpu backend.
void printCheck(const format::Plan &plan,
                const std::vector<runtime::KernelCheck> &checks,
                const std::string &backend) {
  struct Row {
    size_t calls = 0, worstKernel = 0;
    double nmse = 0, mismatch = 0;
  };
  std::map<std::string, Row> rows;
  double worst = 0;
  size_t worstK = 0;
  for (size_t k = 0; k < checks.size(); ++k) {
    Row &r = rows[plan.kernels[k].label()];
    ++r.calls;
    if (checks[k].worstNmse >= r.nmse) {
      r.nmse = checks[k].worstNmse;
      r.worstKernel = k;
    }
    r.mismatch = std::max(r.mismatch, checks[k].mismatch);
    if (checks[k].worstNmse >= worst) {
      worst = checks[k].worstNmse;
      worstK = k;
    }
  }
  fmt::print("check: {} kernels on {} match the cpu backend; worst NMSE "
             "{:.3g} (kernel {}, {})\n",
             checks.size(), backend, worst, worstK,
             checks.empty() ? "-" : plan.kernels[worstK].label());
  fmt::print("  {:<36} {:>6} {:>11} {:>8} {:>10}\n", "kernel", "calls",
             "worst NMSE", "kernel", "i32 diff");
  for (const auto &[label, r] : rows)
    fmt::print("  {:<36} {:>6} {:>11.3g} {:>8} {:>10.3g}\n", label, r.calls,
               r.nmse, r.worstKernel, r.mismatch);
}

int run(int argc, char **argv) {
  Options o;
  if (int rc = parseArgs(argc, argv, o))
    return rc < 0 ? 0 : rc;
  if (o.generate)
    return generate(o);

  std::string error;
  std::vector<int32_t> tokens;
  if (o.haveTokens) {
    // --tokens that do not parse are a command-line mistake; a file's
    // content that does not is an error in the file.
    if (!parseTokens(o.tokens, "--tokens", tokens, error))
      return usageError(error);
  } else {
    std::string text;
    if (!format::readWholeFile(o.tokensFile, size_t(64) << 20, text, error) ||
        !parseTokens(text, o.tokensFile, tokens, error))
      return fail(error);
  }

  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  format::Plan plan;
  if (!loadPlan(o, plan, error))
    return fail(error);
  std::unique_ptr<runtime::Executor> ex = createExecutor(o, plan, error);
  if (!ex)
    return fail(error);
  ex->setProfile(o.profile);
  std::vector<std::string> captureNames;
  for (const auto &[name, file] : o.dumpBuffers)
    captureNames.push_back(name);
  if (!ex->setCapture(captureNames, error))
    return fail(error);
  auto t1 = Clock::now();
  runtime::RunOutput out;
  if (!ex->run(tokens, out, error))
    return fail(error);
  auto t2 = Clock::now();
  // The graph: the last run's use, the capture of the run that made it.
  runtime::GraphUse graph = ex->graphUse();
  int capturedIn = graph.captured ? 1 : 0;
  double captureMs = graph.captureSeconds * 1e3;
  std::vector<double> laterMs;
  for (int r = 1; r < o.repeat; ++r) {
    auto a = Clock::now();
    if (!ex->run(tokens, out, error))
      return fail(error);
    laterMs.push_back(
        std::chrono::duration<double, std::milli>(Clock::now() - a).count());
    graph = ex->graphUse();
    if (graph.captured) {
      capturedIn = r + 1;
      captureMs = graph.captureSeconds * 1e3;
    }
  }
  if (o.check)
    printCheck(plan, ex->checks(), o.backend);

  int64_t vocab = out.shape.empty() ? 1 : out.shape.back();
  int64_t rows = vocab == 0 ? 0 : static_cast<int64_t>(out.data.size()) / vocab;
  if (rows == 0)
    return fail("the plan's output is empty");

  // All outputs are written together, all or nothing: if one cannot be
  // written, no file is created or replaced.
  std::vector<std::pair<std::string, std::string>> outputs; // path, bytes
  if (!o.dumpLogits.empty())
    outputs.emplace_back(o.dumpLogits, f32Bytes(out.data));
  for (const auto &[name, file] : o.dumpBuffers)
    outputs.emplace_back(file, f32Bytes(ex->captured().at(name).data));
  std::vector<format::FileToWrite> files;
  for (const auto &[file, bytes] : outputs)
    files.emplace_back(file, bytes);
  if (!format::writeFilesAtomic(files, error))
    return fail(error);

  const float *last = out.data.data() + (rows - 1) * vocab;
  std::vector<int64_t> ids(vocab);
  std::iota(ids.begin(), ids.end(), 0);
  int64_t n = std::min(o.top, vocab);
  std::partial_sort(ids.begin(), ids.begin() + n, ids.end(),
                    [&](int64_t a, int64_t b) {
                      return last[a] > last[b] || (last[a] == last[b] && a < b);
                    });
  // The output's last row is the prompt's last position (a plan of the
  // last position's logits has that one row).
  fmt::print("top {} of {} at position {} (last of {} tokens):\n", n, vocab,
             tokens.size() - 1, tokens.size());
  fmt::print("  {:>4}  {:>10}  {:>12}\n", "rank", "id", "logit");
  for (int64_t i = 0; i < n; ++i)
    fmt::print("  {:>4}  {:>10}  {:>12.6f}\n", i + 1, ids[i], last[ids[i]]);
  double loadMs = std::chrono::duration<double, std::milli>(t1 - t0).count();
  double runMs = std::chrono::duration<double, std::milli>(t2 - t1).count();
  fmt::print("time: load {:.1f} ms, run {:.1f} ms on {} ({} tokens, {} "
             "kernels, {:.1f} tokens/s)\n",
             loadMs, runMs, o.backend, tokens.size(), plan.kernels.size(),
             runMs > 0 ? tokens.size() * 1000.0 / runMs : 0.0);
  if (!laterMs.empty()) {
    std::sort(laterMs.begin(), laterMs.end());
    double median = laterMs[laterMs.size() / 2];
    if (laterMs.size() % 2 == 0)
      median = (median + laterMs[laterMs.size() / 2 - 1]) / 2;
    fmt::print("repeat: {} runs: first {:.3f} ms, then min {:.3f} ms, median "
               "{:.3f} ms ({:.1f} tokens/s at the median)\n",
               o.repeat, runMs, laterMs.front(), median,
               median > 0 ? tokens.size() * 1000.0 / median : 0.0);
  }
  if (plan.target != "host") {
    if (graph.used)
      fmt::print("graph: {} launches in one graph (captured in run {} in "
                 "{:.2f} ms, replayed from there on)\n",
                 withCommas(graph.launches), capturedIn, captureMs);
    else if (o.noGraphs)
      fmt::print("graph: off (--no-graphs)\n");
    else if (graph.off == runtime::kGraphFirstRun)
      fmt::print("graph: off ({}; with --repeat 2 or more, run 2 captures "
                 "one)\n",
                 graph.off);
    else
      fmt::print("graph: off ({})\n", graph.off);
  }
  if (o.profile)
    printProfile(plan, *ex, static_cast<int64_t>(tokens.size()), o.backend,
                 o.profileJson);
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  return strata::tools::runToolMain("strata-run",
                                    [&] { return run(argc, argv); });
}
