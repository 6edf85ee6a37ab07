//===- StrataServe.cpp - strata-serve: an OpenAI-compatible server --------===//
//
// strata-serve PLAN --gguf F [options]: loads the plan (compiled with
// --max-context, so it has generation state) and the GGUF's tokenizer,
// checks everything the server will need before it listens (slots, logits
// of every row, chat format, vocabulary), then serves until SIGINT or
// SIGTERM. Every start-up mistake is one line on stderr and a non-zero
// exit status: 2 for the command line, 1 for the files. A GGUF without a
// vocabulary (a real-size shapes-only file) serves token ids in and out.
//
//===----------------------------------------------------------------------===//
#include "runtime/Executor.h"
#include "runtime/Session.h"
#include "runtime/format/Gguf.h"
#include "runtime/format/Plan.h"
#include "runtime/tokenizer/Tokenizer.h"
#include "tools/ToolMain.h"
#include "tools/strata-serve/ChatFormat.h"
#include "tools/strata-serve/HttpServer.h"
#include "tools/strata-serve/Metrics.h"
#include "tools/strata-serve/Scheduler.h"

#include <fmt/format.h>

#include <charconv>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <csignal>
#include <filesystem>
#include <optional>
#include <pthread.h>
#include <thread>

namespace strata::tools::serve {
namespace {

constexpr const char *kUsage =
    R"(usage: strata-serve PLAN_DIR --gguf FILE [options]

An OpenAI-compatible HTTP server over a plan with generation state
(strata-compile --max-context N --max-batch B; --logits all for --parallel > 1).
Where the GGUF has no vocabulary (tokenizer.ggml.model no_vocab) it serves
token ids: completions whose prompt is a list of ids, "token_ids" in every
choice, no text.

  --gguf FILE              the model's weights and tokenizer (required)
  --host ADDR              address to listen on (default 127.0.0.1)
  --port N                 port (default 8080; 0: any free port, printed)
  --parallel N             requests generated at once, one state slot each
                           (default 1; at most the plan's --max-batch)
  --queue N                requests that may wait for a slot (default 4 x
                           --parallel); more get 503
  --backend cpu|cuda|hip   default: the plan's target's
  --threads N              cpu backend: workers per kernel (default: all)
  --synthetic-weights SEED do not read weights from FILE (which may be a
                           shapes-only GGUF: strata-gguf synth --shapes-only)
                           but fill each with deterministic valid random
                           blocks of its type (small finite scales), the same
                           bytes on every backend, as strata-run does:
                           real-size runs without the download. GPU plans
                           fill them on the device (the plan's
                           strata_synthetic_fill kernel)
  --api-key KEY            require "Authorization: Bearer KEY"
  --max-body BYTES         largest request body (default 1048576)
  --chat-format chatml|none  how chat messages become a prompt (default:
                           recognised from the GGUF's chat template)
  --read-timeout SECONDS   time a client has to send its request (default 5)
  --help                   this text

Endpoints:
)";

int fail(const std::string &message) {
  fmt::print(stderr, "strata-serve: error: {}\n", message);
  return 1;
}
int usageError(const std::string &message) {
  fmt::print(stderr, "strata-serve: error: {}\n", message);
  return 2;
}

struct Options {
  std::string planDir, gguf, backend, chatFormat;
  HttpSettings http;
  int64_t parallel = 1;
  int64_t queue = -1; ///< -1: 4 x parallel
  int threads = 0;
  std::optional<uint64_t> synthetic; ///< --synthetic-weights SEED
};

bool parseInt(std::string_view text, int64_t lo, int64_t hi, int64_t &out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size() && out >= lo &&
         out <= hi;
}

/// Parses argv into \p o; returns -1 to go on, else the exit status.
int parseArgs(int argc, char **argv, Options &o) {
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--help" || a == "-h") {
      std::string help = kUsage;
#define SERVE_ENDPOINT(Method, Path, Handler, Auth, Help)                      \
  help +=                                                                      \
      fmt::format("  {:<5} {:<22} {}\n",                                       \
                  #Method == std::string("Get") ? "GET" : "POST", Path, Help);
#include "tools/strata-serve/Endpoints.def"
      fmt::print("{}", help);
      return 0;
    }
    if (!a.starts_with("--")) {
      if (!o.planDir.empty())
        return usageError(fmt::format("unexpected argument '{}' (one "
                                      "PLAN_DIR)",
                                      a));
      o.planDir = a;
      continue;
    }
    if (i + 1 >= argc)
      return usageError(fmt::format("{} needs a value", a));
    std::string_view v = argv[++i];
    int64_t n = 0;
    auto integer = [&](int64_t lo, int64_t hi) {
      if (parseInt(v, lo, hi, n))
        return true;
      usageError(fmt::format("{} '{}': expected an integer in [{}, {}]", a, v,
                             lo, hi));
      return false;
    };
    if (a == "--gguf") {
      o.gguf = v;
    } else if (a == "--host") {
      o.http.host = v;
    } else if (a == "--port") {
      if (!integer(0, 65535))
        return 2;
      o.http.port = static_cast<int>(n);
    } else if (a == "--parallel") {
      if (!integer(1, 4096))
        return 2;
      o.parallel = n;
    } else if (a == "--queue") {
      if (!integer(0, 65536))
        return 2;
      o.queue = n;
    } else if (a == "--backend") {
      o.backend = v;
    } else if (a == "--threads") {
      if (!integer(1, 1024))
        return 2;
      o.threads = static_cast<int>(n);
    } else if (a == "--synthetic-weights") {
      uint64_t seed = 0;
      auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), seed);
      if (ec != std::errc() || end != v.data() + v.size())
        return usageError(fmt::format("--synthetic-weights '{}': needs a seed "
                                      "(an integer >= 0)",
                                      v));
      o.synthetic = seed;
    } else if (a == "--api-key") {
      if (v.empty())
        return usageError("--api-key: the key is empty");
      o.http.apiKey = v;
    } else if (a == "--max-body") {
      if (!integer(1, int64_t(1) << 31))
        return 2;
      o.http.maxBody = static_cast<size_t>(n);
    } else if (a == "--chat-format") {
      if (v != "chatml" && v != "none")
        return usageError(fmt::format("--chat-format '{}': chatml or none", v));
      o.chatFormat = v;
    } else if (a == "--read-timeout") {
      if (!integer(1, 3600))
        return 2;
      o.http.readTimeout = static_cast<int>(n);
    } else {
      return usageError(
          fmt::format("unknown option {} (--help lists them)", a));
    }
  }
  if (o.planDir.empty())
    return usageError("missing PLAN_DIR (--help)");
  if (o.gguf.empty())
    return usageError("missing --gguf FILE");
  if (o.queue < 0)
    o.queue = 4 * o.parallel;
  return -1;
}

int serveMain(int argc, char **argv) {
  Options o;
  if (int rc = parseArgs(argc, argv, o); rc >= 0)
    return rc;

  std::string error;
  format::Plan plan;
  if (!format::readPlanDir(o.planDir, plan, error))
    return fail(error);
  if (o.backend.empty())
    o.backend = plan.target == "sm_90"     ? "cuda"
                : plan.target == "gfx1151" ? "hip"
                                           : "cpu";

  // The tokenizer and the chat template, from the GGUF's metadata.
  std::unique_ptr<format::GgufFile> file =
      format::GgufFile::open(o.gguf, error, format::GgufContents::Shapes);
  if (!file)
    return fail(error);
  std::unique_ptr<tokenizer::Tokenizer> tok =
      tokenizer::Tokenizer::load(file->info(), error);
  if (!tok)
    return fail(error);
  // Without a vocabulary there is neither text nor chat: the chat format
  // is not needed (chat requests are refused one by one).
  const bool vocab = tok->hasVocab();
  std::string chatTemplate;
  if (const format::MetaValue *t =
          file->info().findMeta("tokenizer.chat_template");
      t && t->type == format::GgufValueType::String)
    chatTemplate = t->s;
  ChatFormat chat;
  if (vocab && !chooseChatFormat(o.chatFormat, chatTemplate, chat, error))
    return fail(error);
  file.reset();

  std::unique_ptr<runtime::Executor> ex = runtime::Executor::create(
      plan, o.gguf, o.backend, error, runtime::DeviceOptions{o.threads},
      o.planDir, o.synthetic);
  if (!ex)
    return fail(error);
  // The arena's NaN fill once, not before every step (a serve plan's arena
  // is GBs; the output's NaN scan stays).
  ex->setPoisonEachRun(false);
  std::unique_ptr<runtime::Session> session =
      runtime::Session::create(*ex, error);
  if (!session)
    return fail(error);
  // One decode run carries a row per busy slot: the plan must have the
  // slots and return every row's logits (a last-row plan gives one row a
  // run, so its slots would decode one at a time).
  if (o.parallel > session->slots())
    return fail(fmt::format("--parallel {}: the plan has {} state slot{}; "
                            "recompile it with strata-compile --max-batch {} "
                            "(or more)",
                            o.parallel, session->slots(),
                            session->slots() == 1 ? "" : "s", o.parallel));
  if (o.parallel > session->chunk())
    return fail(fmt::format("--parallel {}: a run of the plan holds {} rows; "
                            "recompile it with strata-compile --max-tokens {} "
                            "(or more)",
                            o.parallel, session->chunk(), o.parallel));
  if (o.parallel > 1 && !session->everyRowLogits())
    return fail(fmt::format("--parallel {}: the plan returns the last row's "
                            "logits only, so a batched decode would give one "
                            "sequence's; recompile it with strata-compile "
                            "--logits all (or serve with --parallel 1)",
                            o.parallel));
  if (vocab && static_cast<int64_t>(tok->vocabSize()) < session->vocabSize())
    return fail(fmt::format("the plan's logits have {} entries, the GGUF's "
                            "vocabulary {} tokens",
                            session->vocabSize(), tok->vocabSize()));

  o.http.modelId = std::filesystem::path(o.gguf).stem().string();
  o.http.context = session->context();
  o.http.vocab = session->vocabSize();
  o.http.threads = static_cast<size_t>(o.parallel + o.queue + 8);

  // SIGINT and SIGTERM are waited for by one thread, blocked in all others
  // (the mask is inherited by every thread started after this).
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // A client gone mid-write must be an error of that write, not the end of
  // the server.
  std::signal(SIGPIPE, SIG_IGN);

#ifdef __GLIBC__
  // Every job allocates and frees buffers of a vocabulary's size (the
  // sampler's candidates, logits rows). glibc's mmap threshold grows to the
  // size of the largest block freed, after which such buffers come from the
  // heap and leave it fragmented: the server's memory would wander with the
  // order of requests. A fixed threshold keeps them mapped and unmapped.
  mallopt(M_MMAP_THRESHOLD, 256 << 10);
#endif
  Metrics metrics;
  Scheduler scheduler(*session, *tok, metrics, o.parallel, o.queue);
  HttpServer server(o.http, scheduler, *tok, chat, metrics);
  int port = server.bind(error);
  if (port < 0)
    return fail(error);
  scheduler.start();
  std::thread([&server, signals] {
    int sig = 0;
    sigwait(&signals, &sig);
    fmt::print(stderr, "strata-serve: {}, shutting down\n",
               sig == SIGINT ? "SIGINT" : "SIGTERM");
    server.stop();
  }).detach();
  fmt::print(stderr,
             "strata-serve: listening on http://{}:{} (model {}, {} slot{} "
             "of {} positions, queue {}, {}, backend {}{})\n",
             o.http.host, port, o.http.modelId, o.parallel,
             o.parallel == 1 ? "" : "s", session->context(), o.queue,
             vocab ? "chat format " + chat.describe()
                   : std::string("no vocabulary: token ids in and out"),
             o.backend,
             o.synthetic
                 ? fmt::format(", synthetic weights (seed {})", *o.synthetic)
                 : std::string());
  bool ok = server.serve();
  scheduler.stop();
  if (!ok)
    return fail("the HTTP server stopped with an error");
  return 0;
}

} // namespace
} // namespace strata::tools::serve

int main(int argc, char **argv) {
  return strata::tools::runToolMain("strata-serve", [&] {
    return strata::tools::serve::serveMain(argc, argv);
  });
}
