//===- StrataOpt.cpp - parse, verify, run passes, print -------------------===//
//
// strata-opt is to strata what mlir-opt is to MLIR: the tool lit tests drive.
//
//===----------------------------------------------------------------------===//
#include "ir/Diagnostics.h"
#include "ir/Parser.h"
#include "ir/Printer.h"
#include "ir/Target.h"
#include "ir/Verifier.h"
#include "passes/Pass.h"
#include "runtime/format/FileUtil.h"
#include "runtime/format/ModelInfo.h"
#include "tools/ToolMain.h"

#include <fmt/format.h>

#include <cstdlib>
#include <iostream>
#include <optional>
#include <regex>
#include <sstream>

using namespace strata;

namespace {

constexpr size_t kMaxInputBytes = size_t(64) << 20;

const char *kUsage = R"(usage: strata-opt FILE [options]

Parses a strata model description (FILE, or - for standard input), verifies
it, runs passes, verifies after each pass, and prints the result.

options:
  --pass-pipeline=a,b,...   passes to run, in order (see --list-passes);
                            "default" names the compilation pipeline
  --meta FILE               GGUF file or key/value text that binds meta(),
                            has_weight() and weights (needed by expand)
  --max-tokens N            the token count T to plan for (plan-memory)
  --max-context N           generation: generation() is true, max_context()
                            is N (expand)
  --max-batch B             max_batch() (default 1; needs --max-context)
  --target NAME             the target passes plan for (host, gfx1151,
                            sm_90; default host)
  --logits all|last         keep-last-position: last keeps the last
                            position of [T, ...] results only
  --greedy-ids on|off       add-greedy-ids: @main also returns the argmax
                            of each logits row (default: on with
                            --max-context, as strata-compile)
  --precision P             activation storage for assign-precision: f32
                            or bf16 (default: the target's, bf16 on GPUs)
  --kv f32|bf16|int8        the KV caches' storage for assign-precision
                            (default f32; int8 is the dtype i8)
  --print-ir-after-all      print the IR after every pass (to stderr)
  --print-ir-after=NAME     print the IR after pass NAME (to stderr)
  --split-input-file        treat '// -----' lines as separate inputs
  --verify-diagnostics      check that the errors produced are exactly those
                            marked by '// expected-error {{...}}' comments
                            (also expected-note; @+N / @-N shift the line)
  -o OUT                    write the output to OUT (default: stdout); OUT
                            is written only if every input succeeded
  --list-passes             list the registered passes
  --help                    show this help

Exit status: 0 on success, 1 on an error (diagnostics; nothing is written
then), 2 on a command-line mistake.
)";

struct Options {
  std::string input;
  std::string output = "-";
  std::string metaPath;
  int64_t maxTokens = 0;
  int64_t maxContext = 0, maxBatch = 0;
  std::string target = "host", precision;
  std::string kv = "f32"; ///< a state dtype name: f32, bf16 or i8
  bool lastOnly = false;
  std::optional<bool> greedyIds; ///< default: on with --max-context
  std::vector<std::string> pipeline;
  bool printAfterAll = false;
  std::vector<std::string> printAfter;
  bool split = false;
  bool verifyDiags = false;
};

std::vector<std::string> splitComma(const std::string &s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty())
      out.push_back(item);
  return out;
}

/// Parses argv; returns 0 to continue, or an exit status.
int parseArgs(int argc, char **argv, Options &o) {
  auto valueOf = [&](int &i, const std::string &arg,
                     const std::string &flag) -> std::optional<std::string> {
    if (arg.rfind(flag + "=", 0) == 0)
      return arg.substr(flag.size() + 1);
    if (arg == flag) {
      if (i + 1 >= argc) {
        std::cerr << fmt::format("strata-opt: error: {} needs a value\n", flag);
        return std::nullopt;
      }
      return std::string(argv[++i]);
    }
    return std::nullopt;
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      return -1;
    }
    if (a == "--list-passes") {
      for (const passes::PassInfo &p : passes::allPasses())
        std::cout << fmt::format("  {:<24}{}\n", p.name, p.summary);
      return -1;
    }
    if (a == "--print-ir-after-all") {
      o.printAfterAll = true;
    } else if (a == "--split-input-file") {
      o.split = true;
    } else if (a == "--verify-diagnostics") {
      o.verifyDiags = true;
    } else if (a.rfind("--pass-pipeline", 0) == 0) {
      auto v = valueOf(i, a, "--pass-pipeline");
      if (!v)
        return 2;
      for (const std::string &p : splitComma(*v)) {
        if (p == "default") {
          for (const std::string &d : passes::defaultPipeline())
            o.pipeline.push_back(d);
        } else {
          o.pipeline.push_back(p);
        }
      }
    } else if (a.rfind("--print-ir-after", 0) == 0) {
      auto v = valueOf(i, a, "--print-ir-after");
      if (!v)
        return 2;
      o.printAfter.push_back(*v);
    } else if (a.rfind("--max-context", 0) == 0 ||
               a.rfind("--max-batch", 0) == 0) {
      bool ctxFlag = a.rfind("--max-context", 0) == 0;
      const char *flag = ctxFlag ? "--max-context" : "--max-batch";
      auto v = valueOf(i, a, flag);
      if (!v)
        return 2;
      char *end = nullptr;
      long long n = std::strtoll(v->c_str(), &end, 10);
      long long cap = ctxFlag ? (1 << 24) : (1 << 16);
      if (v->empty() || *end || n <= 0 || n > cap) {
        std::cerr << fmt::format("strata-opt: error: {} needs an integer in "
                                 "1..{}, got '{}'\n",
                                 flag, cap, *v);
        return 2;
      }
      (ctxFlag ? o.maxContext : o.maxBatch) = n;
    } else if (a.rfind("--max-tokens", 0) == 0) {
      auto v = valueOf(i, a, "--max-tokens");
      if (!v)
        return 2;
      char *end = nullptr;
      long long n = std::strtoll(v->c_str(), &end, 10);
      if (v->empty() || *end || n <= 0 || n > (1 << 24)) {
        std::cerr << fmt::format("strata-opt: error: --max-tokens needs an "
                                 "integer in 1..{}, got '{}'\n",
                                 1 << 24, *v);
        return 2;
      }
      o.maxTokens = n;
    } else if (a.rfind("--target", 0) == 0) {
      auto v = valueOf(i, a, "--target");
      if (!v)
        return 2;
      if (!ir::lookupTarget(*v)) {
        std::cerr << fmt::format("strata-opt: error: unknown target '{}' "
                                 "(targets: {})\n",
                                 *v, ir::targetNames());
        return 2;
      }
      o.target = *v;
    } else if (a.rfind("--logits", 0) == 0) {
      auto v = valueOf(i, a, "--logits");
      if (!v)
        return 2;
      if (*v != "all" && *v != "last") {
        std::cerr << fmt::format("strata-opt: error: --logits is all or "
                                 "last, got '{}'\n",
                                 *v);
        return 2;
      }
      o.lastOnly = *v == "last";
    } else if (a.rfind("--greedy-ids", 0) == 0) {
      auto v = valueOf(i, a, "--greedy-ids");
      if (!v)
        return 2;
      if (*v != "on" && *v != "off") {
        std::cerr << fmt::format("strata-opt: error: --greedy-ids is on or "
                                 "off, got '{}'\n",
                                 *v);
        return 2;
      }
      o.greedyIds = *v == "on";
    } else if (a.rfind("--precision", 0) == 0) {
      auto v = valueOf(i, a, "--precision");
      if (!v)
        return 2;
      if (*v != "f32" && *v != "bf16") {
        std::cerr << fmt::format("strata-opt: error: --precision is f32 or "
                                 "bf16, got '{}'\n",
                                 *v);
        return 2;
      }
      o.precision = *v;
    } else if (a.rfind("--kv", 0) == 0 && (a.size() == 4 || a[4] == '=')) {
      auto v = valueOf(i, a, "--kv");
      if (!v)
        return 2;
      if (*v != "f32" && *v != "bf16" && *v != "int8") {
        std::cerr << fmt::format("strata-opt: error: --kv is f32, bf16 or "
                                 "int8, got '{}'\n",
                                 *v);
        return 2;
      }
      o.kv = *v == "int8" ? "i8" : *v;
    } else if (a.rfind("--meta", 0) == 0) {
      auto v = valueOf(i, a, "--meta");
      if (!v)
        return 2;
      o.metaPath = *v;
    } else if (a == "-o") {
      if (i + 1 >= argc) {
        std::cerr << "strata-opt: error: -o needs a file name\n";
        return 2;
      }
      o.output = argv[++i];
    } else if (a.size() > 1 && a[0] == '-') {
      std::cerr << fmt::format("strata-opt: error: unknown option '{}' (see "
                               "--help)\n",
                               a);
      return 2;
    } else if (o.input.empty()) {
      o.input = a;
    } else {
      std::cerr << fmt::format("strata-opt: error: more than one input file "
                               "('{}' and '{}')\n",
                               o.input, a);
      return 2;
    }
  }
  if (o.input.empty()) {
    std::cerr << "strata-opt: error: no input file (use - for standard "
                 "input; see --help)\n";
    return 2;
  }
  for (const std::string &p : o.pipeline)
    if (!passes::createPass(p)) {
      std::cerr << fmt::format("strata-opt: error: unknown pass '{}' in "
                               "--pass-pipeline (see --list-passes)\n",
                               p);
      return 2;
    }
  for (const std::string &p : o.printAfter)
    if (!passes::createPass(p)) {
      std::cerr << fmt::format("strata-opt: error: unknown pass '{}' in "
                               "--print-ir-after (see --list-passes)\n",
                               p);
      return 2;
    }
  return 0;
}

/// One `// expected-error {{...}}` marker.
struct Expected {
  ir::Severity severity;
  uint32_t line;
  std::string text;
  uint32_t markerLine;
  bool matched = false;
};

std::vector<Expected> collectExpected(std::string_view text, uint32_t firstLine,
                                      std::vector<std::string> &badMarkers) {
  static const std::regex kMarker(
      R"(expected-(error|note|remark)(@([+-]?)(\d+))?\s*\{\{(.*?)\}\})");
  std::vector<Expected> out;
  uint32_t line = firstLine;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos)
      end = text.size();
    std::string l(text.substr(start, end - start));
    if (l.find("expected-") != std::string::npos) {
      bool any = false;
      for (auto it = std::sregex_iterator(l.begin(), l.end(), kMarker);
           it != std::sregex_iterator(); ++it) {
        const std::smatch &m = *it;
        any = true;
        Expected e;
        e.severity = m[1] == "error"  ? ir::Severity::Error
                     : m[1] == "note" ? ir::Severity::Note
                                      : ir::Severity::Remark;
        e.line = line;
        if (m[2].matched) {
          int64_t n = std::stoll(m[4]);
          if (m[3] == "+")
            e.line = line + n;
          else if (m[3] == "-")
            e.line = line - n;
          else
            e.line = static_cast<uint32_t>(n);
        }
        e.text = m[5];
        e.markerLine = line;
        out.push_back(e);
      }
      if (!any && l.find("expected-error") != std::string::npos)
        badMarkers.push_back(fmt::format("line {}: malformed expected-error "
                                         "marker (want "
                                         "expected-error{{{{message}}}})",
                                         line));
    }
    ++line;
    start = end + 1;
  }
  return out;
}

/// Processes one input chunk; appends its output. Returns success.
bool processChunk(const Options &o, const std::string &name,
                  std::string_view chunk, uint32_t firstLine,
                  const format::ModelInfo *model, std::string &output) {
  ir::SourceMgr sm;
  // Leading newlines keep line numbers those of the whole file.
  std::string text(firstLine - 1, '\n');
  text.append(chunk);
  uint32_t buf = sm.addBuffer(name, text);
  ir::DiagnosticEngine diag(sm, std::cerr);
  diag.setCapture(o.verifyDiags);

  std::string printed;
  auto m = ir::parseModule(sm, buf, diag);
  bool ok = m && ir::verifyModule(*m, diag);
  if (ok && !o.pipeline.empty()) {
    passes::PassManager pm;
    for (const std::string &p : o.pipeline)
      pm.add(passes::createPass(p));
    pm.setAfterPassHook([&](const std::string &pass, const ir::Module &mod) {
      bool want = o.printAfterAll;
      for (const std::string &p : o.printAfter)
        want |= p == pass;
      if (want)
        std::cerr << fmt::format("// -----// IR Dump After {} //----- //\n{}",
                                 pass, ir::printModule(mod));
    });
    passes::PassContext ctx{diag};
    ctx.model = model;
    ctx.maxTokens = o.maxTokens;
    ctx.maxContext = o.maxContext;
    ctx.maxBatch = o.maxContext && !o.maxBatch ? 1 : o.maxBatch;
    ctx.target = o.target;
    ctx.lastPositionOnly = o.lastOnly;
    ctx.greedyIds =
        passes::PassContext::greedyIdsFor(o.greedyIds, o.maxContext > 0);
    ctx.kv = o.kv;
    ctx.precision = !o.precision.empty()              ? o.precision
                    : ir::lookupTarget(o.target)->gpu ? "bf16"
                                                      : "f32";
    ok = pm.run(m, ctx);
  }
  if (ok)
    printed = ir::printModule(*m);

  if (!o.verifyDiags) {
    if (ok)
      output += printed;
    return ok;
  }
  // --verify-diagnostics: compare captured diagnostics with the markers.
  std::vector<std::string> bad;
  std::vector<Expected> expected = collectExpected(chunk, firstLine, bad);
  bool match = bad.empty();
  for (const std::string &b : bad)
    std::cerr << fmt::format("{}: error: {}\n", name, b);
  for (const ir::Diagnostic &d : diag.captured()) {
    bool found = false;
    for (Expected &e : expected)
      if (!e.matched && e.severity == d.severity && e.line == d.loc.line &&
          d.message.find(e.text) != std::string::npos) {
        e.matched = true;
        found = true;
        break;
      }
    if (!found && d.severity == ir::Severity::Error) {
      match = false;
      std::cerr << fmt::format("{}:{}:{}: error: unexpected error: {}\n", name,
                               d.loc.line, d.loc.col, d.message);
    }
  }
  for (const Expected &e : expected)
    if (!e.matched) {
      match = false;
      std::cerr << fmt::format("{}:{}: error: expected {} \"{}\" was not "
                               "produced\n",
                               name, e.markerLine,
                               e.severity == ir::Severity::Error  ? "error"
                               : e.severity == ir::Severity::Note ? "note"
                                                                  : "remark",
                               e.text);
    }
  if (ok)
    output += printed;
  return match;
}

} // namespace

static int optMain(int argc, char **argv) {
  Options o;
  if (int rc = parseArgs(argc, argv, o))
    return rc < 0 ? 0 : rc;

  std::string text, error;
  if (!format::readWholeFile(o.input, kMaxInputBytes, text, error)) {
    std::cerr << "strata-opt: error: " << error << "\n";
    return 1;
  }
  std::unique_ptr<format::ModelInfo> model;
  if (!o.metaPath.empty()) {
    model = format::loadModelInfo(o.metaPath, error);
    if (!model) {
      std::cerr << "strata-opt: error: " << error << "\n";
      return 1;
    }
  }
  std::string name = o.input == "-" ? "<stdin>" : o.input;

  // Split into chunks at lines that are exactly "// -----".
  std::vector<std::pair<std::string_view, uint32_t>> chunks;
  if (o.split) {
    static const std::string kSep = "// -----";
    size_t start = 0, lineStart = 0;
    uint32_t line = 1, chunkLine = 1;
    std::string_view all(text);
    while (lineStart <= all.size()) {
      size_t end = all.find('\n', lineStart);
      if (end == std::string_view::npos)
        end = all.size();
      std::string_view l = all.substr(lineStart, end - lineStart);
      while (!l.empty() && (l.back() == '\r' || l.back() == ' '))
        l.remove_suffix(1);
      if (l == kSep) {
        chunks.push_back({all.substr(start, lineStart - start), chunkLine});
        start = end + 1;
        chunkLine = line + 1;
      }
      ++line;
      lineStart = end + 1;
    }
    chunks.push_back(
        {start <= all.size() ? all.substr(start) : std::string_view(),
         chunkLine});
  } else {
    chunks.push_back({text, 1});
  }

  // Chunks that produce no module (expected failures under
  // --verify-diagnostics) leave no trace, so the output re-parses.
  std::string output;
  bool allOk = true;
  for (size_t k = 0; k < chunks.size(); ++k) {
    std::string chunkOut;
    allOk &= processChunk(o, name, chunks[k].first, chunks[k].second,
                          model.get(), chunkOut);
    if (chunkOut.empty())
      continue;
    if (!output.empty())
      output += "// -----\n";
    output += chunkOut;
  }
  if (!allOk)
    return 1;
  if (!format::writeFileAtomic(o.output, output, error)) {
    std::cerr << "strata-opt: error: " << error << "\n";
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  return strata::tools::runToolMain("strata-opt",
                                    [&] { return optMain(argc, argv); });
}
