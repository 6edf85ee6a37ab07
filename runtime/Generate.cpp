//===- Generate.cpp - token generation over an executor -------------------===//
//
// The engine is a Session over slot 0 of the plan's state (Generate.h).
//
//===----------------------------------------------------------------------===//
#include "runtime/Generate.h"

#include "runtime/Executor.h"

#include <fmt/format.h>

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

bool Generator::start(std::span<const int32_t> prompt, std::string &error) {
  auto t0 = Clock::now();
  started_ = finished_ = current_ = false;
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
  if (!current_) {
    // The last token generated is never run, so a sequence may end one
    // token past the context.
    if (static_cast<int64_t>(sequence_.size()) > contextLimit()) {
      error = fmt::format("the context is full: the next step would hold {} "
                          "tokens, more than the plan's max_context {}; "
                          "recompile it with a larger --max-context",
                          sequence_.size(), contextLimit());
      return false;
    }
    if (!evaluate(error))
      return false;
  }
  if (!sampler_.sample(logits_, sequence_, token, error))
    return false;
  sequence_.push_back(token);
  current_ = false;
  finished_ = endOfGeneration_ && endOfGeneration_(token);
  ++timings_.generatedTokens;
  timings_.generateSeconds += secondsSince(t0);
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
