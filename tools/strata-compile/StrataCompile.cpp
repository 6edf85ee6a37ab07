//===- StrataCompile.cpp - description + GGUF -> plan ---------------------===//
#include "codegen/PlanBuilder.h"
#include "ir/Diagnostics.h"
#include "ir/Parser.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"
#include "passes/Pass.h"
#include "runtime/format/FileUtil.h"
#include "runtime/format/Gguf.h"
#include "runtime/format/ModelInfo.h"
#include "tools/ToolMain.h"

#include <fmt/format.h>

#include <cstdlib>
#include <iostream>
#include <map>

using namespace strata;

namespace {

const char *kUsage =
    R"(usage: strata-compile MODEL.strata --gguf FILE --max-tokens T
                      [--target host] -o PLAN_DIR [--report]
                      [--print-ir-after-all] [--print-ir-after=NAME]
                      [--qsa-compress-ratio N] [--no-fusion]

Binds a model description to a GGUF file (metadata and tensor infos), runs
the compilation pipeline (see strata-opt --list-passes) and writes the plan
(PLAN_DIR/plan.json) for prompts of up to T tokens.

options:
  --gguf FILE            the weights (GGUF v3; a key/value text header is
                         accepted for planning without weights)
  --max-tokens T         the largest prompt the plan serves (1..16777216)
  --target NAME          host (the CPU reference backend); default host
  -o PLAN_DIR            output directory, created if missing; written only
                         if compilation succeeds
  --report               print the kernel table (bytes, FLOPs per kernel at T)
                         and the arena size against its lower bound
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
  --no-fusion            skip the fusion passes (fuse-*): one kernel per op,
                         the reference a fused plan is checked against
  --help                 show this help
)";

int fail(const std::string &msg) {
  std::cerr << "strata-compile: error: " << msg << "\n";
  return 1;
}

std::string human(double v, const char *unit) {
  const char *pre[] = {"", "K", "M", "G", "T", "P"};
  int i = 0;
  while (v >= 1000 && i < 5)
    v /= 1000, ++i;
  return fmt::format("{:.3g} {}{}", v, pre[i], unit);
}

void printReport(const format::Plan &p) {
  fmt::print("kernel report: model {} ({}), target {}, T = {}\n", p.model,
             p.arch, p.target, p.maxTokens);
  fmt::print("{:>4}  {:<18} {:<22} {:>12} {:>12} {:>9}\n", "#", "recipe",
             "output", "bytes", "flops", "flop/B");
  std::map<std::string, std::pair<uint64_t, uint64_t>> byRecipe;
  std::map<std::string, int> calls;
  uint64_t totalB = 0, totalF = 0;
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    const format::PlanKernel &k = p.kernels[i];
    const format::PlanBuffer &out = p.buffers[k.outputs[0]];
    std::string shape = "[";
    for (size_t d = 0; d < out.shape.size(); ++d) {
      const format::PlanDim &dim = out.shape[d];
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
      shape += (d ? ", " : "") + s;
    }
    shape += "]";
    std::string name = k.label();
    uint64_t bytes = static_cast<uint64_t>(k.bytes.at(p.maxTokens));
    uint64_t flops = static_cast<uint64_t>(k.flops.at(p.maxTokens));
    fmt::print("{:>4}  {:<18} {:<22} {:>12} {:>12} {:>9.2f}\n", i, name, shape,
               human(double(bytes), "B"), human(double(flops), "F"),
               bytes ? double(flops) / double(bytes) : 0.0);
    byRecipe[name].first += bytes;
    byRecipe[name].second += flops;
    calls[name] += 1;
    totalB += bytes;
    totalF += flops;
  }
  fmt::print("\nby recipe:\n{:<18} {:>6} {:>12} {:>8} {:>12} {:>8}\n", "recipe",
             "calls", "bytes", "share", "flops", "share");
  for (const auto &[name, bf] : byRecipe)
    fmt::print("{:<18} {:>6} {:>12} {:>7.1f}% {:>12} {:>7.1f}%\n", name,
               calls[name], human(double(bf.first), "B"),
               totalB ? 100.0 * bf.first / totalB : 0.0,
               human(double(bf.second), "F"),
               totalF ? 100.0 * bf.second / totalF : 0.0);
  fmt::print("\ntotal: {} kernels, {} moved, {}\n", p.kernels.size(),
             human(double(totalB), "B"), human(double(totalF), "FLOP"));
  fmt::print("arena: {} bytes ({}), lower bound {} bytes ({}), ratio {:.3f}\n",
             p.arenaBytes, human(double(p.arenaBytes), "B"), p.arenaLowerBound,
             human(double(p.arenaLowerBound), "B"),
             p.arenaLowerBound ? double(p.arenaBytes) / p.arenaLowerBound
                               : 0.0);
  fmt::print("buffers: {}, weights: {}\n", p.buffers.size(), p.weights.size());
}

} // namespace

static int compileMain(int argc, char **argv) {
  std::string input, gguf, out, target = "host";
  int64_t maxTokens = 0, qsaRatio = 0;
  bool report = false, printAll = false, fusion = true;
  std::vector<std::string> printAfter;
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
    if (a == "--report") {
      report = true;
    } else if (a == "--no-fusion") {
      fusion = false;
    } else if (a == "--print-ir-after-all") {
      printAll = true;
    } else if (a.rfind("--print-ir-after", 0) == 0) {
      auto v = value("--print-ir-after");
      if (!v)
        return fail("--print-ir-after needs a pass name");
      printAfter.push_back(*v);
    } else if (a.rfind("--gguf", 0) == 0) {
      auto v = value("--gguf");
      if (!v)
        return fail("--gguf needs a file");
      gguf = *v;
    } else if (a.rfind("--target", 0) == 0) {
      auto v = value("--target");
      if (!v)
        return fail("--target needs a name");
      target = *v;
    } else if (a.rfind("--max-tokens", 0) == 0) {
      auto v = value("--max-tokens");
      char *end = nullptr;
      long long n = v ? std::strtoll(v->c_str(), &end, 10) : 0;
      if (!v || v->empty() || *end || n <= 0 || n > (1 << 24))
        return fail(
            fmt::format("--max-tokens needs an integer in 1..{}", 1 << 24));
      maxTokens = n;
    } else if (a.rfind("--qsa-compress-ratio", 0) == 0) {
      auto v = value("--qsa-compress-ratio");
      char *end = nullptr;
      long long n = v ? std::strtoll(v->c_str(), &end, 10) : 0;
      if (!v || v->empty() || *end || n <= 0 || n > 65536)
        return fail("--qsa-compress-ratio needs an integer in 1..65536");
      qsaRatio = n;
    } else if (a == "-o") {
      if (i + 1 >= argc)
        return fail("-o needs a directory");
      out = argv[++i];
    } else if (a.size() > 1 && a[0] == '-') {
      return fail(fmt::format("unknown option '{}' (see --help)", a));
    } else if (input.empty()) {
      input = a;
    } else {
      return fail(fmt::format("more than one model description ('{}' and "
                              "'{}')",
                              input, a));
    }
  }
  if (input.empty())
    return fail("no model description given (see --help)");
  if (gguf.empty())
    return fail("--gguf FILE is required");
  if (maxTokens == 0)
    return fail("--max-tokens T is required");
  if (out.empty())
    return fail("-o PLAN_DIR is required");
  if (target != "host")
    return fail(fmt::format("target '{}' has no code generator yet; "
                            "available: host",
                            target));
  for (const std::string &p : printAfter)
    if (!passes::createPass(p))
      return fail(fmt::format("unknown pass '{}' in --print-ir-after", p));

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

  ir::SourceMgr sm;
  ir::DiagnosticEngine diag(sm, std::cerr);
  auto m = ir::parseModule(sm, sm.addBuffer(input, text), diag);
  if (!m || !ir::verifyModule(*m, diag))
    return 1;
  passes::PassManager pm;
  for (const std::string &p : passes::defaultPipeline())
    if (fusion || p.rfind("fuse-", 0) != 0)
      pm.add(passes::createPass(p));
  pm.setAfterPassHook([&](const std::string &pass, const ir::Module &mod) {
    bool want = printAll;
    for (const std::string &p : printAfter)
      want |= p == pass;
    if (want)
      std::cerr << fmt::format("// -----// IR Dump After {} //----- //\n{}",
                               pass, ir::printModule(mod));
  });
  passes::PassContext ctx{diag};
  ctx.model = model.get();
  ctx.maxTokens = maxTokens;
  if (!pm.run(m, ctx))
    return 1;

  format::Plan plan;
  if (!codegen::buildPlan(*m, maxTokens, target, model->architecture(), plan,
                          error))
    return fail(error);
  if (qsaRatio)
    plan.options["qsa_compress_ratio"] = qsaRatio;
  // Round-trip through the loader's validation before anything is written.
  format::Plan check;
  if (!format::planFromJson(format::planToJson(plan), "plan.json", check,
                            error))
    return fail("internal error, the plan does not validate: " + error);
  if (!format::writePlanDir(out, plan, error))
    return fail(error);
  if (report)
    printReport(plan);
  return 0;
}

int main(int argc, char **argv) {
  return strata::tools::runToolMain("strata-compile",
                                    [&] { return compileMain(argc, argv); });
}
