//===- Scheduler.h - continuous batching over a Session ---------*- C++ -*-===//
//
// One thread owns the Session (and through it the Executor): the HTTP
// threads hand it Jobs and read their output, and never touch the model.
//
// The plan's state has --max-batch slots; the scheduler uses --parallel of
// them. Each iteration of its loop:
//   1. admits queued jobs into free slots (Session::reset: the slot's next
//      row is at position 0, which starts a sequence afresh);
//   2. frees the slots whose client went away (Job::cancel);
//   3. runs ONE run of the model (Session::step): a decode row of every
//      slot past its prompt, then a chunk of one prompt that is still
//      being prefilled (the slots taking turns), as many of its rows as
//      the plan's max_tokens leaves beside the decode rows. So a long
//      prompt costs the running streams a few rows of one run per token,
//      not a run of their own per chunk, nor the whole prompt's time.
// A plan that returns the last row's logits only (--logits last, served
// with --parallel 1: one slot, so never a decode row beside a prompt) runs
// the chunk (Session::append) and the decode (Session::decode) as before,
// each in its own run.
// A row depends only on its own slot's state, so a request's tokens do not
// depend on what else runs (equal to strata-run's on the cpu backend; see
// docs/serve.md).
//
// Sampling is per job (its own seeded runtime::Sampler over the job's own
// history), as strata-run's Generator samples: the first token from the
// logits after the prompt, each next one from the logits after the token
// before it; the last token is never run. Text comes out of a
// StreamingDecoder (whole UTF-8 characters) through the job's StopStrings;
// a GGUF without a vocabulary makes no text, only ids (as strata-run).
//
// Jobs beyond the slots wait in a queue of --queue places; submit() refuses
// one more (the HTTP layer answers 503).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/Sampler.h"
#include "tools/strata-serve/Metrics.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace strata::runtime {
class Session;
struct SessionStep;
} // namespace strata::runtime
namespace strata::tokenizer {
class Tokenizer;
} // namespace strata::tokenizer

namespace strata::tools::serve {

using Clock = std::chrono::steady_clock;

/// What a job asks for (checked by the HTTP layer: the prompt's ids are in
/// the vocabulary and prompt + maxTokens fits the context).
struct JobSpec {
  std::vector<int32_t> prompt;
  runtime::SamplerOptions sampling;
  int64_t maxTokens = 1;
  std::vector<std::string> stops;
  /// Alternatives reported with each token's log-probability; -1: none.
  int64_t logprobs = -1;
  /// End-of-generation tokens do not end the job (they are shown).
  bool ignoreEos = false;
  Clock::time_point arrival = Clock::now();
};

/// One alternative of a token: its id, text and log-probability.
struct TokenAlternative {
  int32_t id = 0;
  std::string text;
  double logprob = 0;
};

/// A generated token's log-probability under the model (log-softmax of its
/// logits row) and the most likely alternatives.
struct TokenLogprob {
  TokenAlternative token;
  std::vector<TokenAlternative> top;
};

/// What a job has produced since the consumer last looked.
struct JobOutput {
  std::string text;
  std::vector<TokenLogprob> logprobs;
  /// The ids of the tokens generated since (an end-of-generation token
  /// too: it counts in completionTokens).
  std::vector<int32_t> ids;
  bool finished = false;
  /// "stop" (end-of-generation token or stop string), "length" (max_tokens)
  /// or "" while running.
  std::string finishReason;
  /// Set when the model failed: the job ends with a server error.
  std::string error;
  int64_t promptTokens = 0, completionTokens = 0;
};

/// A request in the scheduler. The HTTP thread that submitted it reads its
/// output with take(); the scheduler thread writes it.
class Job {
public:
  explicit Job(JobSpec spec) : spec_(std::move(spec)) {}

  /// Waits up to \p timeout for new output (or the end) and moves it into
  /// \p out. Returns false when nothing new came in time.
  bool take(JobOutput &out, std::chrono::milliseconds timeout);
  /// The client went away: the scheduler frees the job's slot at its next
  /// iteration (or drops it from the queue when it gets there).
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }
  const JobSpec &spec() const { return spec_; }

private:
  friend class Scheduler;
  /// Adds token \p id's output (scheduler thread).
  void push(int32_t id, std::string text, std::vector<TokenLogprob> logprobs);
  /// Ends the job (scheduler thread).
  void finish(std::string reason, std::string error);

  JobSpec spec_;
  std::atomic<bool> cancelled_{false};
  std::mutex mutex_;
  std::condition_variable ready_;
  JobOutput pending_;
  bool changed_ = false;
  int64_t completionTokens_ = 0;
};

/// The scheduler thread and its queue (see the file comment).
class Scheduler {
public:
  /// A scheduler over slots 0 .. \p parallel - 1 of \p session (used, not
  /// owned), with a queue of \p queue places; \p tokenizer makes the text
  /// and tells the end-of-generation tokens.
  Scheduler(runtime::Session &session, const tokenizer::Tokenizer &tokenizer,
            Metrics &metrics, int64_t parallel, int64_t queue);
  ~Scheduler();
  Scheduler(const Scheduler &) = delete;
  Scheduler &operator=(const Scheduler &) = delete;

  /// Starts the thread.
  void start();
  /// Stops the thread; jobs still running or queued end with an error.
  void stop();

  /// Queues \p spec; null when every slot is busy and the queue is full.
  std::shared_ptr<Job> submit(JobSpec spec);

private:
  /// A slot and the job it runs.
  struct Slot {
    std::shared_ptr<Job> job;
    enum class Phase { Prefill, Decode } phase = Phase::Prefill;
    size_t prefilled = 0;
    std::vector<int32_t> sequence; ///< prompt, then generated tokens
    std::optional<runtime::Sampler> sampler;
    struct Text; ///< decoder and stop strings (Scheduler.cpp)
    /// Null where the GGUF has no vocabulary (no text).
    std::shared_ptr<Text> text;
    int32_t pending = 0; ///< the last token, not yet run
    int64_t generated = 0;
    Clock::time_point lastToken;
  };

  void loop();
  /// Takes queued jobs into free slots (called with mutex_ held).
  void admit();
  /// Appends a decode step of every decoding slot to \p steps and its
  /// slot index to \p of.
  void decoding(std::vector<runtime::SessionStep> &steps,
                std::vector<size_t> &of) const;
  /// The prefilling slot whose turn it is (the turn moves past it), or
  /// none.
  std::optional<size_t> prefillTurn();
  /// One run: a token of every decoding slot and the next prompt chunk of
  /// one prefilling slot (Session::step; a plan with every row's logits).
  void mixedStep();
  /// Runs the next prompt chunk of one prefilling slot on its own.
  void prefillStep();
  /// Runs one token of every decoding slot (a run without prompt rows).
  void decodeStep();
  /// Counts a prompt chunk of \p rows of slot \p s that ran; true when it
  /// ends the prompt (the slot then decodes: its first token is due).
  bool prefilled(size_t s, size_t rows);
  /// Counts the runs the session made since it had made \p runsBefore and
  /// their rows (each call the scheduler makes is one run).
  void countRuns(size_t runsBefore);
  /// Samples from \p logits for slot \p s and handles the token (output,
  /// end of the job or the next decode).
  void next(size_t s, std::span<const float> logits);
  /// Handles slot \p s's token \p id, chosen from \p logits (empty when
  /// it was the plan's greedy id: no logprobs were asked).
  void take(size_t s, int32_t id, std::span<const float> logits);
  /// True if slot \p s's next token may be the plan's greedy id: its
  /// sampler takes the highest logit and it asks for no logprobs.
  bool idOnly(size_t s) const;
  /// Frees slot \p s, ending its job with \p reason / \p error.
  void release(size_t s, std::string reason, std::string error);

  runtime::Session &session_;
  const tokenizer::Tokenizer &tokenizer_;
  Metrics &metrics_;
  int64_t queueCap_;
  std::vector<Slot> slots_;
  size_t prefillTurn_ = 0;
  std::vector<float> logits_;
  /// Greedy ids of the latest step (Session::step with flags), and whether
  /// the plan has them and every row's logits.
  std::vector<int32_t> ids_;
  bool useIds_ = false;

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> queue_;
  /// Jobs admitted and not yet finished (guarded by mutex_).
  int64_t running_ = 0;
  bool stopping_ = false;
  /// Jobs ran since the scheduler last went idle (scheduler thread only).
  bool ranSinceIdle_ = false;
  std::thread thread_;
};

} // namespace strata::tools::serve
