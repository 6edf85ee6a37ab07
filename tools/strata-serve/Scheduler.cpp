//===- Scheduler.cpp - continuous batching over a Session -----------------===//
#include "tools/strata-serve/Scheduler.h"

#include "runtime/Session.h"
#include "runtime/tokenizer/StopStrings.h"
#include "runtime/tokenizer/Tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#ifdef __GLIBC__
#include <malloc.h>
#endif

namespace strata::tools::serve {

namespace {
/// \p d in seconds, for the metrics' histograms.
double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}
} // namespace

bool Job::take(JobOutput &out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!ready_.wait_for(lock, timeout, [&] { return changed_; }))
    return false;
  out = std::move(pending_);
  pending_ = JobOutput{};
  // Totals and the end stay visible to the next take().
  pending_.finished = out.finished;
  pending_.finishReason = out.finishReason;
  pending_.error = out.error;
  pending_.promptTokens = out.promptTokens;
  pending_.completionTokens = out.completionTokens;
  changed_ = false;
  return true;
}

void Job::push(int32_t id, std::string text,
               std::vector<TokenLogprob> logprobs) {
  std::lock_guard<std::mutex> lock(mutex_);
  pending_.ids.push_back(id);
  pending_.text += text;
  for (TokenLogprob &l : logprobs)
    pending_.logprobs.push_back(std::move(l));
  pending_.promptTokens = static_cast<int64_t>(spec_.prompt.size());
  pending_.completionTokens = ++completionTokens_;
  changed_ = true;
  ready_.notify_all();
}

void Job::finish(std::string reason, std::string error) {
  std::lock_guard<std::mutex> lock(mutex_);
  pending_.finished = true;
  pending_.finishReason = std::move(reason);
  pending_.error = std::move(error);
  pending_.promptTokens = static_cast<int64_t>(spec_.prompt.size());
  pending_.completionTokens = completionTokens_;
  changed_ = true;
  ready_.notify_all();
}

/// A slot's text path: the decoder holds the bytes of an unfinished UTF-8
/// character, the stop strings a tail that may begin one.
struct Scheduler::Slot::Text {
  Text(const tokenizer::Tokenizer &t, std::vector<std::string> stops)
      : decoder(t, /*renderSpecial=*/true), stops(std::move(stops)) {}
  tokenizer::StreamingDecoder decoder;
  tokenizer::StopStrings stops;
};

Scheduler::Scheduler(runtime::Session &session,
                     const tokenizer::Tokenizer &tokenizer, Metrics &metrics,
                     int64_t parallel, int64_t queue)
    : session_(session), tokenizer_(tokenizer), metrics_(metrics),
      queueCap_(queue), slots_(parallel) {
  useIds_ = session.hasGreedyIds() && session.everyRowLogits();
}

Scheduler::~Scheduler() { stop(); }

void Scheduler::start() {
  thread_ = std::thread([this] { loop(); });
}

void Scheduler::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable())
    thread_.join();
}

std::shared_ptr<Job> Scheduler::submit(JobSpec spec) {
  auto job = std::make_shared<Job>(std::move(spec));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Busy slots plus waiting jobs: what the slots and the queue hold.
    if (stopping_ || running_ + static_cast<int64_t>(queue_.size()) >=
                         static_cast<int64_t>(slots_.size()) + queueCap_)
      return nullptr;
    queue_.push_back(job);
    metrics_.queueDepth = static_cast<int64_t>(queue_.size());
  }
  wake_.notify_all();
  return job;
}

void Scheduler::admit() {
  size_t s = 0;
  while (!queue_.empty()) {
    while (s < slots_.size() && slots_[s].job)
      ++s;
    if (s == slots_.size())
      break;
    std::shared_ptr<Job> job = std::move(queue_.front());
    queue_.pop_front();
    if (job->cancelled()) {
      // Went away while it waited: nothing ran for it.
      ++metrics_.cancelled;
      job->finish("cancelled", "");
      continue;
    }
    if (job->spec().prompt.empty()) {
      // The HTTP layer refuses these; a slot with no prompt row to run
      // would never reach its first token.
      job->finish("", "the prompt has no tokens");
      continue;
    }
    std::string error;
    std::optional<runtime::Sampler> sampler =
        runtime::Sampler::create(job->spec().sampling, error);
    if (!sampler) {
      job->finish("", error);
      continue;
    }
    session_.reset(static_cast<int32_t>(s));
    Slot &slot = slots_[s];
    slot = Slot{};
    slot.job = std::move(job);
    slot.sampler = std::move(sampler);
    slot.sequence = slot.job->spec().prompt;
    if (tokenizer_.hasVocab())
      slot.text =
          std::make_shared<Slot::Text>(tokenizer_, slot.job->spec().stops);
    ++running_;
  }
  metrics_.queueDepth = static_cast<int64_t>(queue_.size());
  metrics_.slotsBusy = running_;
}

void Scheduler::release(size_t s, std::string reason, std::string error) {
  Slot &slot = slots_[s];
  if (!slot.job)
    return;
  slot.job->finish(std::move(reason), std::move(error));
  slot = Slot{};
  // The slot's state needs no clearing: the next job's first row is at
  // position 0 (Session.h).
  session_.reset(static_cast<int32_t>(s));
  std::lock_guard<std::mutex> lock(mutex_);
  --running_;
  metrics_.slotsBusy = running_;
}

void Scheduler::loop() {
  auto busy = [&] {
    return !queue_.empty() ||
           std::any_of(slots_.begin(), slots_.end(),
                       [](const Slot &s) { return s.job != nullptr; });
  };
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
#ifdef __GLIBC__
      // Going idle after a burst: every job's buffers (a sampler holds a
      // vocabulary's worth of candidates) were freed, but glibc keeps the
      // freed heap; give it back, so that the server's memory between
      // bursts is its working set, not its peak.
      if (!busy() && !stopping_ && ranSinceIdle_) {
        ranSinceIdle_ = false;
        malloc_trim(0);
      }
#endif
      wake_.wait(lock, [&] { return stopping_ || busy(); });
      ranSinceIdle_ = true;
      if (stopping_)
        break;
      admit();
    }
    for (size_t s = 0; s < slots_.size(); ++s)
      if (slots_[s].job && slots_[s].job->cancelled()) {
        ++metrics_.cancelled;
        release(s, "cancelled", "");
      }
    if (session_.everyRowLogits()) {
      mixedStep();
    } else {
      prefillStep();
      decodeStep();
    }
  }
  // Shutting down: every job still here ends with an error.
  for (size_t s = 0; s < slots_.size(); ++s)
    release(s, "", "the server is shutting down");
  std::lock_guard<std::mutex> lock(mutex_);
  for (std::shared_ptr<Job> &job : queue_)
    job->finish("", "the server is shutting down");
  queue_.clear();
}

std::optional<size_t> Scheduler::prefillTurn() {
  // The slots take turns, so that prompts arriving together all start soon.
  for (size_t i = 0; i < slots_.size(); ++i) {
    size_t s = (prefillTurn_ + i) % slots_.size();
    if (slots_[s].job && slots_[s].phase == Slot::Phase::Prefill) {
      prefillTurn_ = s + 1;
      return s;
    }
  }
  return std::nullopt;
}

void Scheduler::countRuns(size_t runsBefore) {
  size_t runs = session_.runs() - runsBefore;
  if (runs == 0)
    return;
  metrics_.modelRuns += runs;
  metrics_.runRows.observe(static_cast<double>(session_.lastRunRows()));
}

bool Scheduler::prefilled(size_t s, size_t rows) {
  Slot &slot = slots_[s];
  ++metrics_.prefillChunks;
  metrics_.promptTokens += rows;
  slot.prefilled += rows;
  if (slot.prefilled != slot.job->spec().prompt.size())
    return false;
  slot.phase = Slot::Phase::Decode;
  return true;
}

void Scheduler::decoding(std::vector<runtime::SessionStep> &steps,
                         std::vector<size_t> &of) const {
  for (size_t s = 0; s < slots_.size(); ++s)
    if (slots_[s].job && slots_[s].phase == Slot::Phase::Decode) {
      steps.push_back({static_cast<int32_t>(s), slots_[s].pending});
      of.push_back(s);
    }
}

void Scheduler::mixedStep() {
  std::vector<runtime::SessionStep> steps;
  std::vector<size_t> of;
  decoding(steps, of);
  // The prompt chunks take the rows the decode rows leave: the prefilling
  // slots in turn, each as many rows as its prompt still has and the run
  // still holds, so that several short prompts share one run. --parallel
  // <= max_tokens (checked at start-up) and a prefilling slot has no decode
  // row, so at least one row is left whenever a slot prefills.
  const size_t rows = static_cast<size_t>(session_.chunk());
  size_t room = steps.size() < rows ? rows - steps.size() : 0;
  std::vector<runtime::SessionChunk> chunks;
  std::vector<size_t> prefilling;
  for (size_t i = 0; i < slots_.size() && room > 0; ++i) {
    const size_t s = (prefillTurn_ + i) % slots_.size();
    const Slot &slot = slots_[s];
    if (!slot.job || slot.phase != Slot::Phase::Prefill)
      continue;
    const std::vector<int32_t> &prompt = slot.job->spec().prompt;
    const size_t n = std::min(prompt.size() - slot.prefilled, room);
    chunks.push_back(
        {static_cast<int32_t>(s),
         std::span<const int32_t>(prompt).subspan(slot.prefilled, n)});
    prefilling.push_back(s);
    room -= n;
  }
  // The slots take turns: the next run starts after the last one served.
  if (!prefilling.empty())
    prefillTurn_ = prefilling.back() + 1;
  if (steps.empty() && chunks.empty())
    return;
  std::string error;
  size_t runsBefore = session_.runs();
  Clock::time_point t0 = Clock::now();
  // Rows whose next token is the plan's greedy id need no logits: a
  // greedy stream's step, and a chunk that does not end its prompt (its
  // last row's logits are never read).
  std::vector<bool> greedy;
  if (useIds_) {
    for (size_t s : of)
      greedy.push_back(idOnly(s));
    for (size_t c = 0; c < chunks.size(); ++c) {
      const Slot &slot = slots_[prefilling[c]];
      const bool ends = slot.prefilled + chunks[c].ids.size() ==
                        slot.job->spec().prompt.size();
      greedy.push_back(!ends || idOnly(prefilling[c]));
    }
  }
  if (useIds_ ? !session_.step(steps, chunks, greedy, logits_, ids_, error)
              : !session_.step(steps, chunks, logits_, error)) {
    // Which row caused it is unknown, so every job in the run ends.
    const char *what = steps.empty()    ? "prefill: "
                       : chunks.empty() ? "decode: "
                                        : "decode and prefill run: ";
    for (size_t s : of)
      release(s, "", what + error);
    for (size_t s : prefilling)
      release(s, "", what + error);
    return;
  }
  countRuns(runsBefore);
  Clock::time_point t1 = Clock::now();
  metrics_.modelRunTime.observe(seconds(t1 - t0));
  const int64_t vocab = session_.vocabSize();
  // Row i of the wanted rows: its logits are the k-th row returned, k the
  // unflagged rows before it (all of them without ids).
  std::vector<size_t> logitRow;
  for (size_t i = 0, k = 0; i < steps.size() + chunks.size(); ++i)
    logitRow.push_back(greedy.empty() || !greedy[i] ? k++ : SIZE_MAX);
  auto row = [&](size_t i) {
    return std::span<const float>(logits_).subspan(logitRow[i] * vocab, vocab);
  };
  // Slot s's token from wanted row i: the plan's id or a draw.
  auto decide = [&](size_t s, size_t i) {
    if (!greedy.empty() && greedy[i])
      take(s, ids_[i], {});
    else
      next(s, row(i));
  };
  if (!steps.empty()) {
    ++metrics_.decodeSteps;
    metrics_.decodeBatch.observe(static_cast<double>(steps.size()));
  }
  if (!chunks.empty())
    ++metrics_.prefillRuns;
  if (!steps.empty() && !chunks.empty())
    ++metrics_.mixedRuns;
  for (size_t i = 0; i < of.size(); ++i)
    decide(of[i], i);
  // Each chunk's last row follows the decode rows' (Session::step).
  for (size_t c = 0; c < chunks.size(); ++c)
    if (prefilled(prefilling[c], chunks[c].ids.size()))
      decide(prefilling[c], steps.size() + c);
  metrics_.sampleTime.observe(seconds(Clock::now() - t1));
}

void Scheduler::prefillStep() {
  std::optional<size_t> p = prefillTurn();
  if (!p)
    return;
  const size_t s = *p;
  const std::vector<int32_t> &prompt = slots_[s].job->spec().prompt;
  const size_t done = slots_[s].prefilled;
  size_t n = std::min<size_t>(prompt.size() - done,
                              static_cast<size_t>(session_.chunk()));
  std::string error;
  size_t runsBefore = session_.runs();
  Clock::time_point t0 = Clock::now();
  if (!session_.append(static_cast<int32_t>(s),
                       std::span<const int32_t>(prompt).subspan(done, n),
                       logits_, error)) {
    release(s, "", "prefill: " + error);
    return;
  }
  countRuns(runsBefore);
  Clock::time_point t1 = Clock::now();
  metrics_.modelRunTime.observe(seconds(t1 - t0));
  metrics_.prefillRuns += session_.runs() - runsBefore;
  if (prefilled(s, n))
    next(s, logits_);
  metrics_.sampleTime.observe(seconds(Clock::now() - t1));
}

void Scheduler::decodeStep() {
  std::vector<runtime::SessionStep> steps;
  std::vector<size_t> of;
  decoding(steps, of);
  if (steps.empty())
    return;
  std::string error;
  size_t runsBefore = session_.runs();
  Clock::time_point t0 = Clock::now();
  if (!session_.decode(steps, logits_, error)) {
    // A run failed: which row caused it is unknown, so every job in it ends.
    for (size_t s : of)
      release(s, "", "decode: " + error);
    return;
  }
  countRuns(runsBefore);
  Clock::time_point t1 = Clock::now();
  metrics_.modelRunTime.observe(seconds(t1 - t0));
  ++metrics_.decodeSteps;
  metrics_.decodeBatch.observe(static_cast<double>(steps.size()));
  const int64_t vocab = session_.vocabSize();
  for (size_t i = 0; i < of.size(); ++i)
    next(of[i], std::span<const float>(logits_).subspan(i * vocab, vocab));
  metrics_.sampleTime.observe(seconds(Clock::now() - t1));
}

namespace {

/// The log-probability of \p id and the \p top most likely tokens under
/// softmax(\p logits).
TokenLogprob logprobOf(std::span<const float> logits, int32_t id, int64_t top,
                       const tokenizer::Tokenizer &tok) {
  double max = -INFINITY;
  for (float x : logits)
    max = std::max<double>(max, x);
  double sum = 0;
  for (float x : logits)
    sum += std::exp(static_cast<double>(x) - max);
  const double logZ = max + std::log(sum);
  auto alt = [&](int32_t i) {
    return TokenAlternative{i, std::string(tok.piece(i, true)),
                            static_cast<double>(logits[i]) - logZ};
  };
  TokenLogprob out;
  out.token = alt(id);
  // The top few by one pass (the vocabulary is large, top is at most 5);
  // equal logits by lowest id.
  std::vector<int32_t> best;
  for (int32_t i = 0; i < static_cast<int32_t>(logits.size()); ++i) {
    if (static_cast<int64_t>(best.size()) == top &&
        (top == 0 || logits[i] <= logits[best.back()]))
      continue;
    auto at = std::find_if(best.begin(), best.end(),
                           [&](int32_t b) { return logits[i] > logits[b]; });
    best.insert(at, i);
    if (static_cast<int64_t>(best.size()) > top)
      best.pop_back();
  }
  for (int32_t i : best)
    out.top.push_back(alt(i));
  return out;
}

} // namespace

bool Scheduler::idOnly(size_t s) const {
  const Slot &slot = slots_[s];
  return slot.job && slot.sampler->plainGreedy() &&
         slot.job->spec().logprobs < 0;
}

void Scheduler::next(size_t s, std::span<const float> logits) {
  Slot &slot = slots_[s];
  int32_t id = 0;
  std::string error;
  if (!slot.sampler->sample(logits, slot.sequence, id, error)) {
    release(s, "", "sampler: " + error);
    return;
  }
  take(s, id, logits);
}

void Scheduler::take(size_t s, int32_t id, std::span<const float> logits) {
  Slot &slot = slots_[s];
  const JobSpec &spec = slot.job->spec();
  std::string error;
  auto now = Clock::now();
  if (slot.generated == 0)
    metrics_.timeToFirstToken.observe(
        std::chrono::duration<double>(now - spec.arrival).count());
  else
    metrics_.interTokenLatency.observe(
        std::chrono::duration<double>(now - slot.lastToken).count());
  slot.lastToken = now;
  ++slot.generated;
  ++metrics_.generatedTokens;
  slot.sequence.push_back(id);

  std::vector<TokenLogprob> logprobs;
  if (spec.logprobs >= 0)
    logprobs.push_back(logprobOf(logits, id, spec.logprobs, tokenizer_));
  // An end-of-generation token ends the text and is not shown (as
  // strata-run), unless the job ignores them.
  if (!spec.ignoreEos && tokenizer_.isEndOfGeneration(id)) {
    slot.job->push(id, "", std::move(logprobs));
    ++metrics_.completed;
    release(s, "stop", "");
    return;
  }
  bool last = slot.generated >= spec.maxTokens;
  std::string piece, shown;
  // Without a vocabulary there is no text: the ids are the output.
  if (slot.text && !slot.text->decoder.push(id, piece, error)) {
    release(s, "", "detokenize: " + error);
    return;
  }
  bool stopped = slot.text && slot.text->stops.push(piece, shown);
  if (slot.text && last && !stopped) {
    // What is still held: an unfinished character, a tail that began a
    // stop string that never came.
    slot.text->stops.push(slot.text->decoder.flush(), shown);
    slot.text->stops.finish(shown);
  }
  slot.job->push(id, std::move(shown), std::move(logprobs));
  if (stopped || last) {
    ++metrics_.completed;
    release(s, stopped ? "stop" : "length", "");
    return;
  }
  slot.pending = id;
}

} // namespace strata::tools::serve
