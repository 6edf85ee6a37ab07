//===- Generate.cpp - token generation over an executor -------------------===//
//
// The engine is a Session over slot 0 of the plan's state (Generate.h);
// speculative steps verify prompt-lookup drafts with the sampler itself.
//
//===----------------------------------------------------------------------===//
#include "runtime/Generate.h"

#include "runtime/Executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

namespace strata::runtime {

namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

} // namespace

std::unique_ptr<Generator>
Generator::create(Executor &executor, const SamplerOptions &sampling,
                  std::function<bool(int32_t)> endOfGeneration,
                  std::string &error) {
  std::optional<Sampler> sampler = Sampler::create(sampling, error);
  if (!sampler)
    return nullptr;
  // Logits: [T, vocab] (every position) or [1, vocab] (strata-compile
  // --logits last); the vocabulary does not depend on T.
  const format::Plan &plan = executor.plan();
  const format::PlanBuffer &out = plan.buffers[plan.outputs.at(0)];
  if (out.shape.size() != 2 || out.shape[1].coef != 0 ||
      out.shape[1].constant <= 0 || out.dtype != format::PlanDType::F32) {
    error = fmt::format("the plan's output '{}' is not logits [T, vocab] in "
                        "f32, so it cannot generate",
                        out.name);
    return nullptr;
  }
  // No decode entry, no generation: re-running a growing prefix would cost
  // O(n^2) and hide the missing state.
  std::unique_ptr<Session> session = Session::create(executor, error);
  if (!session)
    return nullptr;
  return std::unique_ptr<Generator>(
      new Generator(executor, std::move(*sampler), std::move(endOfGeneration),
                    out.shape[1].constant, std::move(session)));
}

Generator::Generator(Executor &executor, Sampler sampler,
                     std::function<bool(int32_t)> endOfGeneration,
                     int64_t vocab, std::unique_ptr<Session> session)
    : executor_(executor), session_(std::move(session)),
      sampler_(std::move(sampler)),
      endOfGeneration_(std::move(endOfGeneration)), vocab_(vocab) {}

Generator::~Generator() = default;

int64_t Generator::contextLimit() const { return session_->context(); }

bool Generator::setSpeculation(int64_t drafts, std::string &error) {
  if (drafts < 0) {
    error = fmt::format("speculative decoding needs 0 or more draft tokens a "
                        "run, not {}",
                        drafts);
    return false;
  }
  if (drafts > 0 && !session_->everyRowLogits()) {
    error = "speculative decoding checks each draft against the logits of "
            "its own row, but the plan returns a run's last row only (it was "
            "compiled with --logits last); recompile it with strata-compile "
            "--logits all";
    return false;
  }
  if (drafts > 0 && session_->chunk() < 2) {
    error = "speculative decoding runs a token and its drafts together, but "
            "the plan's runs hold one row (max_tokens 1); recompile it with "
            "strata-compile --max-tokens 2 or more";
    return false;
  }
  drafts_ = draftLimit_ = drafts;
  return true;
}

bool Generator::start(std::span<const int32_t> prompt, std::string &error) {
  auto t0 = Clock::now();
  started_ = finished_ = current_ = false;
  ready_.clear();
  draftLimit_ = drafts_;
  rollbacksInRow_ = 0;
  sequence_.clear();
  promptSize_ = 0;
  evaluated_ = 0;
  session_->reset(0);
  timings_ = GenerateTimings{};
  if (prompt.empty()) {
    error = "the prompt is empty; it needs at least one token";
    return false;
  }
  if (static_cast<int64_t>(prompt.size()) > contextLimit()) {
    error = fmt::format("the prompt has {} tokens, more than the plan's "
                        "max_context {}; recompile it with a larger "
                        "--max-context",
                        prompt.size(), contextLimit());
    return false;
  }
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= vocab_) {
      error = fmt::format("prompt token {} (id {}) is out of range "
                          "(vocabulary of {} tokens)",
                          i, prompt[i], vocab_);
      return false;
    }
  sequence_.assign(prompt.begin(), prompt.end());
  promptSize_ = prompt.size();
  if (!evaluate(error))
    return false;
  started_ = true;
  timings_.promptTokens = prompt.size();
  timings_.promptSeconds = secondsSince(t0);
  return true;
}

bool Generator::next(int32_t &token, std::string &error) {
  if (!started_) {
    error = "no sequence: start() it with a prompt first";
    return false;
  }
  if (finished_) {
    error = "the sequence has ended (an end-of-generation token)";
    return false;
  }
  auto t0 = Clock::now();
  if (ready_.empty() && !current_) {
    // The last token generated is never run, so a sequence may end one
    // token past the context.
    if (static_cast<int64_t>(sequence_.size()) > contextLimit()) {
      error = fmt::format("the context is full: the next step would hold {} "
                          "tokens, more than the plan's max_context {}; "
                          "recompile it with a larger --max-context",
                          sequence_.size(), contextLimit());
      return false;
    }
    if (drafts_ > 0 ? !speculate(error)
        : idsOnly() ? !evaluateGreedy(error)
                    : !evaluate(error))
      return false;
  }
  if (!ready_.empty()) {
    // Decided by a speculative step.
    token = ready_.front().token;
    logits_ = std::move(ready_.front().logits);
    ready_.pop_front();
  } else if (!sampler_.sample(logits_, sequence_, token, error)) {
    return false;
  }
  sequence_.push_back(token);
  current_ = false;
  finished_ = ends(token);
  ++timings_.generatedTokens;
  timings_.generateSeconds += secondsSince(t0);
  return true;
}

bool Generator::speculate(std::string &error) {
  // The tokens not yet in the state: the last one chosen and, after a
  // rollback, those the rejected run had made valid.
  const int64_t pending = static_cast<int64_t>(sequence_.size() - evaluated_);
  // All but the last were run before, by a run a rollback took back.
  timings_.rowsRerun += static_cast<size_t>(pending - 1);
  // Drafts up to the current limit while the run stays within the plan's
  // rows and the context, and no further than the tokens still wanted (a
  // run of d drafts makes at most d + 1); none after two rollbacks in a
  // row (see the file comment).
  int64_t room =
      std::min({draftLimit_, session_->chunk() - pending,
                contextLimit() - static_cast<int64_t>(sequence_.size())});
  if (maxTokens_ >= 0)
    room = std::min(
        room,
        maxTokens_ - static_cast<int64_t>(sequence_.size() - promptSize_) - 1);
  if (rollbacksInRow_ >= 2)
    room = 0;
  std::vector<int32_t> draft =
      lookup_.draft(sequence_, static_cast<size_t>(std::max<int64_t>(room, 0)));
  if (draft.empty()) {
    // A plain step: next() samples from logits_.
    rollbacksInRow_ = 0;
    return evaluate(error);
  }

  const int64_t d = static_cast<int64_t>(draft.size());
  const uint64_t copied = session_->stateBytesCopied();
  if (!session_->checkpoint(0, error))
    return false;
  std::vector<int32_t> rows(sequence_.begin() + evaluated_, sequence_.end());
  rows.insert(rows.end(), draft.begin(), draft.end());
  std::vector<float> all;
  size_t before = session_->runs();
  if (!session_->appendEach(0, rows, all, error))
    return false;
  timings_.modelRuns += session_->runs() - before;
  ++timings_.verifyRuns;
  timings_.draftsProposed += draft.size();

  // The sampler on rows pending-1, pending, ...: the token after the last
  // pending one, then after each draft, while the drafts are its choices.
  std::vector<int32_t> history = sequence_;
  int64_t accepted = 0;
  for (int64_t i = 0; i <= d; ++i) {
    std::span<const float> row(all.data() + (pending - 1 + i) * vocab_,
                               static_cast<size_t>(vocab_));
    int32_t token = 0;
    if (!sampler_.sample(row, history, token, error)) {
      ready_.clear(); // no token of a step that failed
      return false;
    }
    ready_.push_back({token, std::vector<float>(row.begin(), row.end())});
    history.push_back(token);
    bool match = i < d && token == draft[i];
    accepted += match;
    if (!match || ends(token))
      break;
  }
  timings_.draftsAccepted += static_cast<size_t>(accepted);
  timings_.rejectedMidway += accepted > 0 && accepted < d;
  // The next step's drafts: more after a step that took them all, fewer
  // after one that did not (HF transformers' "heuristic" schedule).
  draftLimit_ = accepted == d ? std::min(drafts_, draftLimit_ + 2)
                              : std::max<int64_t>(1, draftLimit_ - 1);

  // The state holds pending + d rows; pending + accepted of them are valid.
  if (accepted == d) {
    evaluated_ += static_cast<size_t>(pending + d);
    rollbacksInRow_ = 0;
  } else if (!session_->recurrent()) {
    evaluated_ += static_cast<size_t>(pending + accepted);
    if (!session_->rewind(0, static_cast<int64_t>(evaluated_), error))
      return false;
  } else {
    // Back to the checkpoint (evaluated_ tokens): the valid rows run again
    // at the head of the next step.
    if (!session_->rewind(0, static_cast<int64_t>(evaluated_), error))
      return false;
    ++timings_.rollbacks;
    ++rollbacksInRow_;
  }
  timings_.stateBytesCopied += session_->stateBytesCopied() - copied;
  current_ = false;
  return true;
}

bool Generator::idsOnly() const {
  return !logitsWanted_ && sampler_.plainGreedy() && session_->hasGreedyIds() &&
         sequence_.size() == evaluated_ + 1;
}

bool Generator::evaluateGreedy(std::string &error) {
  const SessionStep step{0, sequence_.back()};
  std::vector<int32_t> ids;
  size_t before = session_->runs();
  if (!session_->decodeGreedy(std::span<const SessionStep>(&step, 1), ids,
                              error))
    return false;
  timings_.modelRuns += session_->runs() - before;
  evaluated_ = sequence_.size();
  ready_.push_back({ids.at(0), {}});
  return true;
}

bool Generator::evaluate(std::string &error) {
  // The tokens not yet in the state: the prompt (in chunks), then one.
  size_t before = session_->runs();
  if (!session_->append(0,
                        std::span<const int32_t>(sequence_).subspan(evaluated_),
                        logits_, error))
    return false;
  timings_.modelRuns += session_->runs() - before;
  evaluated_ = sequence_.size();
  current_ = true;
  return true;
}

} // namespace strata::runtime
