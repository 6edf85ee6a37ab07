//===- Generate.h - token generation over an executor -----------*- C++ -*-===//
//
// A Generator turns a prompt's token ids into generated ids, one token at a
// time: start() takes the prompt and makes the logits of the position after
// it; every next() samples a token from the current logits (Sampler.h, with
// the whole sequence as its history), appends it and reports it. The logits
// for the token after it are made at the following next(), so the last
// token generated is never run through the model.
//
// The engine is a Session (Session.h) over slot 0 of the plan's generation
// state (plan v3, strata-compile --max-context): start() appends the prompt
// (in chunks of max_tokens rows) and every step appends one token, a run of
// one row at its position that reads the past from the KV caches and the
// recurrent state, so a sequence of n tokens costs O(n) and the state's
// context bounds it (contextLimit()). A plan without state has no decode
// entry and cannot generate (create() says so).
//
// Tokens, text and stop strings are the caller's: the generator knows ids
// only (the runtime does not depend on the tokenizer), and a predicate says
// which ids end generation.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/Sampler.h"
#include "runtime/Session.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace strata::runtime {

class Executor;

/// Time spent in each phase of a generation.
struct GenerateTimings {
  size_t promptTokens = 0;    ///< tokens of the prompt
  double promptSeconds = 0;   ///< in start()
  size_t generatedTokens = 0; ///< tokens next() returned
  double generateSeconds = 0; ///< in next(): the model and the sampler
  size_t modelRuns = 0;       ///< model evaluations, start()'s included
};

/// Generates one sequence from a prompt over an executor's plan.
class Generator {
public:
  /// A generator over \p executor (which it uses but does not own, and which
  /// must outlive it) that samples with \p sampling; \p endOfGeneration
  /// (may be empty: none) tells the ids that end generation. Returns null
  /// and sets \p error when a sampler option is out of range, the plan has
  /// no generation state (no decode entry) or its output is not logits
  /// ([T, vocab] or [1, vocab]).
  static std::unique_ptr<Generator>
  create(Executor &executor, const SamplerOptions &sampling,
         std::function<bool(int32_t)> endOfGeneration, std::string &error);
  ~Generator();
  Generator(const Generator &) = delete;
  Generator &operator=(const Generator &) = delete;

  /// The longest sequence the engine evaluates: the state's context (the
  /// plan's max_context). A sequence holds at most one token more, as the
  /// last token generated is never evaluated.
  int64_t contextLimit() const;
  /// The size of a logits row: token ids are in [0, vocabSize()).
  int64_t vocabSize() const { return vocab_; }

  /// Starts a sequence with \p prompt (1 to contextLimit() ids in
  /// [0, vocabSize()), forgetting any earlier sequence) and makes the logits
  /// of the position after it. Fails naming the first bad id, a prompt that
  /// is empty or too long, or the model's error.
  bool start(std::span<const int32_t> prompt, std::string &error);

  /// Produces the next token: makes the logits after the sequence so far
  /// (unless start() just did), samples from them, appends the token to the
  /// sequence and sets \p token to it. Fails after an end-of-generation
  /// token, before start(), when the sequence fills the context (the error
  /// says so), or on the model's or the sampler's error.
  bool next(int32_t &token, std::string &error);

  /// True once next() returned an end-of-generation token.
  bool finished() const { return finished_; }
  /// The logits the last token was sampled from, [vocabSize()] (after
  /// start() and before the first next(): those it will be sampled from).
  std::span<const float> logits() const { return logits_; }
  /// The whole sequence: the prompt, then the generated tokens.
  std::span<const int32_t> sequence() const { return sequence_; }
  std::span<const int32_t> prompt() const {
    return std::span<const int32_t>(sequence_).first(promptSize_);
  }
  std::span<const int32_t> generated() const {
    return std::span<const int32_t>(sequence_).subspan(promptSize_);
  }
  const GenerateTimings &timings() const { return timings_; }

private:
  Generator(Executor &executor, Sampler sampler,
            std::function<bool(int32_t)> endOfGeneration, int64_t vocab,
            std::unique_ptr<Session> session);
  /// The engine: makes logits_ for the position after sequence_.
  bool evaluate(std::string &error);

  Executor &executor_;
  /// Slot 0 of the plan's state; it holds sequence_'s first evaluated_
  /// tokens.
  std::unique_ptr<Session> session_;
  size_t evaluated_ = 0;
  Sampler sampler_;
  std::function<bool(int32_t)> endOfGeneration_;
  int64_t vocab_ = 0;
  std::vector<int32_t> sequence_;
  size_t promptSize_ = 0;
  std::vector<float> logits_;
  /// The logits are those of the position after sequence_ (false once a
  /// token was appended and not yet run).
  bool current_ = false;
  bool started_ = false;
  bool finished_ = false;
  GenerateTimings timings_;
};

} // namespace strata::runtime
