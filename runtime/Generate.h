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
// Speculative decoding (setSpeculation(K), strata-run --spec K): instead of
// one row a step, a step runs the tokens not yet in the state followed by up
// to K draft tokens guessed by prompt lookup (PromptLookup.h), as one run of
// a plan that returns every row's logits (--logits all). How many: a limit
// that starts at K, grows by 2 (up to K) after a step that accepted all its
// drafts and shrinks by 1 (down to 1) after one that did not (HF
// transformers' "heuristic" schedule): where drafts keep failing, a step
// wastes one row instead of K (rows cost compute on the cpu, and on a GPU
// they route to more experts in MoE layers). Row i's logits are
// what the token after row i is chosen from, so the sampler, called on them
// in order exactly as plain generation calls it (the same history, the same
// PRNG state), makes the same tokens: a draft is accepted while it is the
// sampler's own choice, and the first choice that differs ends the step (it
// is generated too, so a run makes at least one token). Each token is the
// sampler's output on the logits of its own prefix, so the sequence equals
// plain generation's for every sampler setting, greedy or seeded sampling;
// greedy accepts the most drafts.
//
// Rows of rejected drafts ran and must be taken back. Caches indexed by
// position need nothing: the session forgets the rows and the next rows at
// those positions rewrite them. Recurrent state (conv windows, delta-rule
// states, token histories) has folded them in, so where the plan has some,
// the session checkpoints the slot (a device copy of its recurrent state)
// before every run with drafts and restores it when a draft is rejected;
// the tokens that run made valid (the step's first rows, the accepted
// drafts, the token chosen instead) are then not in the state, and run
// again at the head of the next step's run, before its drafts: no extra
// run, a few more rows. After a second rollback in a row the waiting tokens
// run alone, as a plain step (no drafts), so no row runs more than three
// times and a run holds at most 2K + 1 rows. (Always a plain step after a
// rollback ran 3 to 10 % more runs on the tiny models; never one, so that
// rejections in a row re-run a growing head, 2 to 6 times the rows run
// again.)
//
// Tokens, text and stop strings are the caller's: the generator knows ids
// only (the runtime does not depend on the tokenizer), and a predicate says
// which ids end generation.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/PromptLookup.h"
#include "runtime/Sampler.h"
#include "runtime/Session.h"

#include <cstdint>
#include <deque>
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
  // Speculative decoding (zero without it).
  size_t verifyRuns = 0;     ///< model runs that carried drafts
  size_t draftsProposed = 0; ///< draft tokens run
  size_t draftsAccepted = 0; ///< of those, the sampler's own choices
  size_t rejectedMidway = 0; ///< runs that accepted a draft, then not one
  size_t rollbacks = 0;      ///< recurrent states restored after a rejection
  size_t rowsRerun = 0;      ///< rows run again because a rollback undid them
  uint64_t stateBytesCopied = 0; ///< recurrent state saved and restored
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

  /// Turns speculative decoding on with at most \p drafts draft tokens a
  /// run (see the file comment), or off with 0. Fails, changing nothing,
  /// when \p drafts is negative, the plan returns only a run's last row of
  /// logits (--logits last) or its runs hold one row (max_tokens 1).
  bool setSpeculation(int64_t drafts, std::string &error);
  /// Whether logits() must hold each token's logits (true, the default).
  /// With false, a plan that returns greedy ids (Session::decodeGreedy) and
  /// a sampler that only takes the highest logit (Sampler::plainGreedy),
  /// decode steps without speculation read the next token's id from the
  /// device and no logits: logits() is then empty after such a step.
  void setLogitsWanted(bool wanted) { logitsWanted_ = wanted; }
  /// Tells that at most \p tokens will be asked of next() after start()
  /// (-1: no bound, the default): speculation drafts no token past them.
  void setMaxTokens(int64_t tokens) { maxTokens_ = tokens; }

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
  /// The rows of the latest model run (0 before any).
  int64_t lastRunRows() const { return session_->lastRunRows(); }

private:
  Generator(Executor &executor, Sampler sampler,
            std::function<bool(int32_t)> endOfGeneration, int64_t vocab,
            std::unique_ptr<Session> session);
  /// The engine: makes logits_ for the position after sequence_.
  bool evaluate(std::string &error);
  /// True if the next step may take the plan's greedy id, no logits.
  bool idsOnly() const;
  /// A decode step of the one token not yet in the state, its next token
  /// (the plan's greedy id) put in ready_ with no logits.
  bool evaluateGreedy(std::string &error);
  /// One speculative step: runs the tokens not yet in the state and the
  /// drafts, and puts the tokens it decides (at least one) in ready_.
  bool speculate(std::string &error);
  /// True if \p token ends generation.
  bool ends(int32_t token) const {
    return endOfGeneration_ && endOfGeneration_(token);
  }

  Executor &executor_;
  /// Slot 0 of the plan's state; it holds the first evaluated_ tokens of
  /// sequence_ followed by ready_'s tokens.
  std::unique_ptr<Session> session_;
  size_t evaluated_ = 0;
  /// A token a speculative step decided, not yet returned by next(), and
  /// the logits it was chosen from.
  struct Ready {
    int32_t token = 0;
    std::vector<float> logits;
  };
  std::deque<Ready> ready_;
  /// Draft tokens a run at most (0: no speculation), and the next step's
  /// limit, 1 to drafts_ (see the file comment).
  int64_t drafts_ = 0, draftLimit_ = 0;
  PromptLookup lookup_;
  int64_t maxTokens_ = -1;
  /// Speculative steps in a row, up to now, that ended in a rollback.
  int rollbacksInRow_ = 0;
  Sampler sampler_;
  std::function<bool(int32_t)> endOfGeneration_;
  int64_t vocab_ = 0;
  std::vector<int32_t> sequence_;
  size_t promptSize_ = 0;
  std::vector<float> logits_;
  bool logitsWanted_ = true;
  /// The logits are those of the position after sequence_ (false once a
  /// token was appended and not yet run).
  bool current_ = false;
  bool started_ = false;
  bool finished_ = false;
  GenerateTimings timings_;
};

} // namespace strata::runtime
