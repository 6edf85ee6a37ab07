//===- Generation.cpp - strata-run -n: generate text from a prompt --------===//
//
// The prompt (text through the GGUF's tokenizer, or ids) goes to a
// runtime::Generator; every token it returns is decoded, passed through the
// stop strings and written to stdout at once (flushed per token), so the
// text appears as it is made. Where the GGUF has no tokenizer the output is
// the ids, one per line.
//
//===----------------------------------------------------------------------===//
#include "runtime/Generate.h"
#include "runtime/Sampler.h"
#include "runtime/Session.h"
#include "runtime/format/FileUtil.h"
#include "runtime/format/Gguf.h"
#include "tools/strata-run/StrataRun.h"

#ifdef STRATA_HAVE_TOKENIZER
#include "runtime/tokenizer/StopStrings.h"
#include "runtime/tokenizer/Tokenizer.h"
#endif

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <optional>
#include <unistd.h>

namespace strata::tools::run {

namespace {

using Clock = std::chrono::steady_clock;

/// Writes \p text to stdout now: a reader sees each token as it is made.
void emit(std::string_view text) {
  if (text.empty())
    return;
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

/// "12 tokens in 3.41 ms (3519.1 tokens/s)".
std::string rate(size_t tokens, double seconds) {
  return fmt::format("{} tokens in {:.2f} ms ({:.1f} tokens/s)", tokens,
                     seconds * 1e3, seconds > 0 ? tokens / seconds : 0.0);
}

#ifdef STRATA_HAVE_TOKENIZER
using tokenizer::Tokenizer;

/// The tokenizer of the GGUF \p path (one without a vocabulary loads, and
/// says so through hasVocab()).
std::unique_ptr<Tokenizer> loadTokenizer(const std::string &path,
                                         std::string &error) {
  std::unique_ptr<format::GgufFile> file =
      format::GgufFile::open(path, error, format::GgufContents::Shapes);
  if (!file)
    return nullptr;
  return Tokenizer::load(file->info(), error);
}
#else
// A runtime-only build without PCRE2 has no tokenizer: ids in, ids out.
class Tokenizer {
public:
  bool hasVocab() const { return false; }
};
#endif

/// --batch B: B sequences decoded together, the b-th from \p prompt rotated
/// left by b tokens (different sequences route to different experts, as
/// real batches do), each prefilled alone, then \p o.generate greedy steps
/// of B rows a run. Prints each sequence's generated ids (a line each) and
/// one timings line; with --profile, then the kernels of the last decode
/// step (B rows), as one sequence's --profile prints its last run.
int decodeBatch(const Options &o, const format::Plan &plan,
                runtime::Executor &ex, const std::vector<int32_t> &prompt,
                double loadSeconds) {
  std::string error;
  std::unique_ptr<runtime::Session> session =
      runtime::Session::create(ex, error);
  if (!session)
    return fail(error);
  // A last-row plan returns one logits row a run: its decode steps would
  // run the sequences one by one.
  if (!session->everyRowLogits())
    return fail("--batch needs a plan that returns every row's logits (a "
                "decode step of B rows gives B rows): recompile it with "
                "strata-compile --logits all");
  const int64_t b = o.batch, n = *o.generate;
  if (b > session->slots() || b > session->chunk())
    return fail(fmt::format(
        "--batch {}: the plan decodes at most {} sequences together (its "
        "--max-batch {} and --max-tokens {}); recompile it with larger ones",
        b, std::min(session->slots(), session->chunk()), session->slots(),
        session->chunk()));
  if (static_cast<int64_t>(prompt.size()) + n > session->context())
    return fail(fmt::format("--batch: the prompt's {} tokens and -n {} pass "
                            "the plan's max_context {}",
                            prompt.size(), n, session->context()));
  std::vector<std::vector<int32_t>> out(b);
  std::vector<runtime::SessionStep> steps(b);
  std::vector<float> logits;
  const int64_t vocab = session->vocabSize();
  // Greedy tokens by the sampler's greedy rule (the argmax, the lowest id
  // on ties) in its eight-lane pass: one max chain a row took 2.2 ms of a
  // 16-row step on the development machine, the lanes 1.38 ms.
  runtime::SamplerOptions temp0;
  temp0.temperature = 0;
  std::optional<runtime::Sampler> sampler =
      runtime::Sampler::create(temp0, error);
  if (!sampler)
    return fail(error);
  auto greedy = [&](const float *row, int32_t &token) {
    return sampler->sample(std::span<const float>(row, vocab), {}, token,
                           error);
  };
  auto t0 = Clock::now();
  for (int64_t s = 0; s < b; ++s) {
    std::vector<int32_t> ids(prompt);
    std::rotate(ids.begin(), ids.begin() + s % ids.size(), ids.end());
    if (!session->append(static_cast<int32_t>(s), ids, logits, error))
      return fail(fmt::format("sequence {}: {}", s, error));
    steps[s].slot = static_cast<int32_t>(s);
    if (!greedy(logits.data(), steps[s].token))
      return fail(fmt::format("sequence {}: {}", s, error));
  }
  auto t1 = Clock::now();
  // Greedy ids from the plan where it returns them (--greedy-ids on, the
  // default of decode plans); else the rows of logits and the sampler.
  const bool device = session->hasGreedyIds();
  std::vector<int32_t> ids;
  for (int64_t step = 0; step < n; ++step) {
    for (int64_t s = 0; s < b; ++s)
      out[s].push_back(steps[s].token);
    // The last token of each sequence is produced, never run.
    if (step + 1 == n)
      break;
    if (device) {
      // The argmax of each row on the device: B ids cross, not B rows.
      if (!session->decodeGreedy(steps, ids, error))
        return fail(fmt::format("decode step {}: {}", step, error));
      for (int64_t s = 0; s < b; ++s)
        steps[s].token = ids[s];
      continue;
    }
    if (!session->decode(steps, logits, error))
      return fail(fmt::format("decode step {}: {}", step, error));
    for (int64_t s = 0; s < b; ++s)
      if (!greedy(logits.data() + s * vocab, steps[s].token))
        return fail(
            fmt::format("decode step {}, sequence {}: {}", step, s, error));
  }
  auto t2 = Clock::now();
  for (const std::vector<int32_t> &ids : out)
    fmt::print("{}\n", fmt::join(ids, ","));
  const double prefill = std::chrono::duration<double>(t1 - t0).count(),
               decode = std::chrono::duration<double>(t2 - t1).count();
  const int64_t steps1 = n - 1;
  fmt::print(stderr,
             "timings: load {:.1f} ms; {} prompts, {}; {} decode steps of {} "
             "rows in {:.2f} ms ({:.3f} ms a step, {:.1f} tokens/s in all); "
             "{} model runs on {}, greedy ids {}\n",
             loadSeconds * 1e3, b, rate(b * prompt.size(), prefill), steps1, b,
             decode * 1e3, steps1 > 0 ? decode * 1e3 / steps1 : 0.0,
             decode > 0 ? steps1 * b / decode : 0.0, session->runs(), o.backend,
             device ? "from the plan" : "from the logits");
  // The last run is a decode step of B rows when there was one (-n 2 or
  // more); the profile is of that step only.
  if (o.profile && steps1 > 0) {
    std::fflush(stdout);
    fmt::print("\n");
    printProfile(plan, ex, b, o.backend, o.profileJson);
  } else if (o.profile) {
    fmt::print(stderr, "--profile: no decode step ran (-n 1): nothing to "
                       "profile\n");
  }
  return 0;
}

} // namespace

int generate(Options &o) {
  std::string error;
  if (o.batch > 1 &&
      (o.sampling.temperature > 0 || o.spec > 0 || !o.stops.empty() ||
       !o.dumpIds.empty() || !o.dumpLogits.empty()))
    return usageError("--batch decodes greedily and prints the ids: --temp, "
                      "--spec, --stop, --dump-ids and --dump-logits are for "
                      "one sequence");
  // The prompt's source: ids that do not parse on the command line are a
  // mistake there (2); a file's bytes are the file's error (1).
  std::vector<int32_t> prompt;
  std::string text, where = "--prompt";
  if (o.haveTokens) {
    if (!parseTokens(o.tokens, "--tokens", prompt, error))
      return usageError(error);
  } else if (o.haveTokensFile) {
    std::string ids;
    if (!format::readWholeFile(o.tokensFile, size_t(64) << 20, ids, error) ||
        !parseTokens(ids, o.tokensFile, prompt, error))
      return fail(error);
  } else if (o.havePromptFile) {
    where = o.promptFile;
    if (!format::readWholeFile(o.promptFile, size_t(64) << 20, text, error))
      return fail(error);
  } else {
    text = o.prompt;
  }
  bool textPrompt = o.havePrompt || o.havePromptFile;

  auto t0 = Clock::now();
  format::Plan plan;
  if (!loadPlan(o, plan, error))
    return fail(error);

  // The tokenizer: text in (--prompt), text out where there is a
  // vocabulary; ids only without one.
  std::unique_ptr<Tokenizer> tok;
#ifdef STRATA_HAVE_TOKENIZER
  tok = loadTokenizer(o.gguf, error);
  if (!tok)
    return fail(error);
  if (textPrompt) {
    tokenizer::EncodeOptions encode;
    encode.parseSpecial = !o.noSpecial;
    if (!tok->encode(text, encode, prompt, error))
      return fail(tok->hasVocab() ? fmt::format("{}: {}", where, error)
                                  : fmt::format("{}; {} needs one to read "
                                                "text: give the prompt's "
                                                "ids with --tokens",
                                                error, where));
    if (prompt.empty())
      return fail(fmt::format("{}: the prompt has no tokens", where));
  }
#else
  tok = std::make_unique<Tokenizer>();
  if (textPrompt)
    return fail(fmt::format("{} needs the tokenizer, and this strata-run was "
                            "built without it (PCRE2 was missing): give the "
                            "prompt's ids with --tokens",
                            where));
#endif
  if (!o.stops.empty() && !tok->hasVocab())
    return fail(fmt::format("--stop matches text, but {} has no tokenizer "
                            "(its output is token ids)",
                            o.gguf));

  std::unique_ptr<runtime::Executor> ex = createExecutor(o, plan, error);
  if (!ex)
    return fail(error);
  ex->setProfile(o.profile);
  if (o.batch > 1)
    return decodeBatch(
        o, plan, *ex, prompt,
        std::chrono::duration<double>(Clock::now() - t0).count());
  std::function<bool(int32_t)> endOfGeneration;
#ifdef STRATA_HAVE_TOKENIZER
  if (!o.ignoreEos && tok->hasVocab())
    endOfGeneration = [&t = *tok](int32_t id) {
      return id >= 0 && size_t(id) < t.vocabSize() && t.isEndOfGeneration(id);
    };
#endif
  std::unique_ptr<runtime::Generator> gen =
      runtime::Generator::create(*ex, o.sampling, endOfGeneration, error);
  if (!gen)
    return fail(error);
  if (o.spec > 0 && !gen->setSpeculation(o.spec, error))
    return fail(fmt::format("--spec {}: {}", o.spec, error));

  // The prompt and -n must fit the context (the state's positions) unless
  // --context-shift says what to do.
  int64_t limit = gen->contextLimit();
  int64_t total = static_cast<int64_t>(prompt.size()) + *o.generate;
  int64_t budget = *o.generate;
  if (total > limit) {
    if (o.contextShift.empty())
      return fail(fmt::format(
          "the prompt's {} tokens and -n {} make {} tokens, more than the "
          "plan's max_context {}; recompile it with a larger --max-context "
          "(at least {}), lower -n, or say what to do with --context-shift "
          "none|truncate",
          prompt.size(), *o.generate, total, limit, total));
    if (o.contextShift == "truncate") {
      // Keep the newest tokens, leaving room for -n (one at least).
      int64_t keep = std::max<int64_t>(1, limit - *o.generate);
      if (static_cast<int64_t>(prompt.size()) > keep)
        prompt.erase(prompt.begin(), prompt.end() - keep);
    } else if (static_cast<int64_t>(prompt.size()) > limit) {
      return fail(fmt::format("the prompt's {} tokens are more than the "
                              "plan's max_context {} (--context-shift none "
                              "generates until the context is full; truncate "
                              "drops the prompt's oldest tokens)",
                              prompt.size(), limit));
    }
    budget = std::min<int64_t>(*o.generate,
                               limit - static_cast<int64_t>(prompt.size()));
  }
  gen->setMaxTokens(budget);
  // Greedy tokens from the plan's ids unless the logits are dumped.
  gen->setLogitsWanted(!o.dumpLogits.empty());
  double loadSeconds = std::chrono::duration<double>(Clock::now() - t0).count();

  if (!gen->start(prompt, error))
    return fail(error);
#ifdef STRATA_HAVE_TOKENIZER
  std::optional<tokenizer::StreamingDecoder> decoder;
  if (tok->hasVocab())
    decoder.emplace(*tok, !o.noSpecial);
  tokenizer::StopStrings stops(o.stops);
#endif
  std::vector<float> logits;
  std::string stopped =
      budget < *o.generate
          ? fmt::format("the context is full (max_context {})", limit)
          : fmt::format("-n {} reached", *o.generate);
  bool endsWithNewline = true;
  for (int64_t i = 0; i < budget; ++i) {
    int32_t id = 0;
    if (!gen->next(id, error))
      return fail(error);
    if (!o.dumpLogits.empty())
      logits.insert(logits.end(), gen->logits().begin(), gen->logits().end());
    if (gen->finished()) {
      stopped = fmt::format("end-of-generation token {}", id);
      break;
    }
    if (!tok->hasVocab()) {
      emit(fmt::format("{}\n", id));
      continue;
    }
#ifdef STRATA_HAVE_TOKENIZER
    std::string piece, shown;
    if (!decoder->push(id, piece, error))
      return fail(fmt::format("generated {}", error));
    bool stop = stops.push(piece, shown);
    emit(shown);
    if (!shown.empty())
      endsWithNewline = shown.back() == '\n';
    if (stop) {
      stopped = fmt::format("stop string \"{}\"", stops.matched());
      break;
    }
#endif
  }
#ifdef STRATA_HAVE_TOKENIZER
  if (tok->hasVocab() && !stops.stopped()) {
    // What is still held: the bytes of an unfinished character, a tail
    // that began a stop string.
    std::string shown;
    stops.push(decoder->flush(), shown);
    stops.finish(shown);
    emit(shown);
    if (!shown.empty())
      endsWithNewline = shown.back() == '\n';
  }
#endif

  // The dumps, all or nothing.
  std::string idsText, logitsBytes;
  std::vector<format::FileToWrite> files;
  if (!o.dumpIds.empty()) {
    idsText = fmt::format("{}\n{}\n", fmt::join(gen->prompt(), ","),
                          fmt::join(gen->generated(), ","));
    files.emplace_back(o.dumpIds, idsText);
  }
  if (!o.dumpLogits.empty()) {
    logitsBytes = f32Bytes(logits);
    files.emplace_back(o.dumpLogits, logitsBytes);
  }
  if (!format::writeFilesAtomic(files, error))
    return fail(error);

  // One line like llama.cpp's timings, on a line of its own on a terminal.
  const runtime::GenerateTimings &t = gen->timings();
  if (!endsWithNewline && isatty(STDOUT_FILENO) && isatty(STDERR_FILENO))
    std::fputc('\n', stderr);
  // --spec: the drafts run and accepted, and what rejections cost.
  std::string spec;
  if (o.spec > 0)
    spec = fmt::format(
        "drafts {} proposed, {} accepted ({:.1f} %) in {} runs ({} "
        "rejected mid-way), {} rollbacks ({} rows run again, {} bytes of "
        "state copied); ",
        t.draftsProposed, t.draftsAccepted,
        t.draftsProposed ? 100.0 * t.draftsAccepted / t.draftsProposed : 0.0,
        t.verifyRuns, t.rejectedMidway, t.rollbacks, t.rowsRerun,
        t.stateBytesCopied);
  fmt::print(stderr,
             "timings: load {:.1f} ms; prompt {}; generated {}; {}{} on {}, "
             "stopped: {}\n",
             loadSeconds * 1e3, rate(t.promptTokens, t.promptSeconds),
             rate(t.generatedTokens, t.generateSeconds), spec,
             t.modelRuns == 1 ? std::string("1 model run")
                              : fmt::format("{} model runs", t.modelRuns),
             o.backend, stopped);
  // --profile: the last model run (a decode step of one row, a speculative
  // step of a few, or the prompt's last chunk when nothing was generated),
  // after the text.
  if (o.profile) {
    std::fflush(stdout);
    fmt::print("\n");
    printProfile(plan, *ex, gen->lastRunRows(), o.backend, o.profileJson);
  }
  return 0;
}

} // namespace strata::tools::run
