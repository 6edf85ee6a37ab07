//===- StrataRun.h - strata-run's options and shared helpers ----*- C++ -*-===//
//
// strata-run has two modes over one command line: a single run of the plan
// on a prompt (StrataRun.cpp: the top tokens, logits, profile) and, with -n,
// generation (Generation.cpp: text or ids, one token at a time).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/Executor.h"
#include "runtime/Sampler.h"
#include "runtime/format/Plan.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace strata::tools::run {

/// The parsed command line.
struct Options {
  std::string planDir, gguf, tokens, tokensFile, backend, dumpLogits;
  std::vector<std::pair<std::string, std::string>> dumpBuffers; ///< name, file
  bool haveTokens = false, haveTokensFile = false, nanCheck = false;
  bool profile = false, profileJson = false, check = false;
  bool noGraphs = false, verifySynthetic = false;
  std::optional<uint64_t> synthetic;
  int64_t top = 5;
  int repeat = 1;
  int threads = 0; ///< 0 = the backend's default

  // Generation (-n).
  std::optional<int64_t> generate; ///< -n: tokens to generate at most
  std::string prompt, promptFile, dumpIds;
  bool havePrompt = false, havePromptFile = false;
  bool noSpecial = false, ignoreEos = false;
  /// --spec K: speculative decoding with at most K prompt-lookup drafts a
  /// run (0: off).
  int64_t spec = 0;
  /// --batch B: B sequences decoded together, a row each per run (a
  /// benchmark of batched decode; 1: one sequence, the normal path).
  int64_t batch = 1;
  /// --context-shift: "" (refuse what does not fit), "none" or "truncate".
  std::string contextShift;
  std::vector<std::string> stops;
  /// Greedy unless --temp > 0; the other defaults are llama.cpp's.
  runtime::SamplerOptions sampling = [] {
    runtime::SamplerOptions s;
    s.temperature = 0;
    return s;
  }();
  /// Options that only generation reads, as given (for "needs -n").
  std::vector<std::string> generationOnly;
  /// Options that only a single run reads, as given (refused with -n).
  std::vector<std::string> singleRunOnly;
};

/// "strata-run: error: MESSAGE" on stderr; returns 1.
int fail(const std::string &message);
/// A command-line mistake: the same line; returns 2.
int usageError(const std::string &message);

/// Parses ids separated by runs of commas and whitespace into \p out; the
/// error names \p origin and the bad item.
bool parseTokens(std::string_view text, const std::string &origin,
                 std::vector<int32_t> &out, std::string &error);

/// Reads the plan of o.planDir, sets o.backend to the plan's target's
/// backend if none was given, and refuses a GPU plan without code.
bool loadPlan(Options &o, format::Plan &plan, std::string &error);
/// The executor of \p plan on o.gguf with the options every mode shares
/// (backend, threads, synthetic weights and their check, --check,
/// --nan-check, graphs); null with \p error set on failure.
std::unique_ptr<runtime::Executor>
createExecutor(const Options &o, const format::Plan &plan, std::string &error);

/// Raw little-endian float32 bytes of \p v.
std::string f32Bytes(const std::vector<float> &v);

/// Generation mode (-n): prompt to text or ids on stdout, the timings on
/// stderr, the dumps written at the end. Returns the exit status.
int generate(Options &o);

/// The --profile tables of \p ex's last run, of \p tokens rows: its kernel
/// times (Executor::kernelSeconds) against the bytes and FLOPs the plan
/// counts at that run, the caches' reads at the positions its slots attend
/// (Executor::lastRunAttended).
void printProfile(const format::Plan &plan, const runtime::Executor &ex,
                  int64_t tokens, const std::string &backend, bool json);

} // namespace strata::tools::run
