//===- Sampler.h - the next token from the last logits ----------*- C++ -*-===//
//
// The sampler runs on the host over one row of logits (the last position's,
// [vocab] f32) and the sequence's token history (prompt and generated tokens,
// oldest first). It runs a chain of stages over the candidates (every token
// whose logit is not -inf), then draws one token from what is left.
//
// The stages and their order are llama.cpp's default chain, as in
// llama-cpp-python 0.3.36's vendor/llama.cpp: `common_params_sampling::
// samplers` in common/common.h lists
//
//   penalties, dry, top_n_sigma, top_k, typical_p, top_p, min_p, xtc,
//   temperature
//
// and common_sampler_init (common/sampling.cpp) appends `dist` (the draw);
// each stage is in src/llama-sampler.cpp. At llama.cpp's defaults dry
// (dry_multiplier 0), top_n_sigma (-1), typical_p (1) and xtc (probability 0)
// do nothing, and strata leaves them out. So strata's chain
// (SamplerStages.def) is
//
//   penalties -> top_k -> top_p -> min_p -> temperature -> draw
//
// with llama.cpp's semantics (min_keep fixed at its default 0: every filter
// keeps at least the most likely candidate):
// - penalties: for every token that occurs c > 0 times in the last
//   penalty_last_n tokens of the history, logit = logit <= 0 ?
//   logit * penalty_repeat : logit / penalty_repeat, then logit -= c *
//   penalty_freq + penalty_present.
// - top_k: keeps the top_k candidates with the highest penalised logits;
//   among equal logits the lowest ids (llama.cpp leaves that unspecified).
// - top_p: p_i = softmax over the candidates left, most likely first (equal
//   logits by lowest id); keeps the first i + 1 where p_0 + ... + p_i >=
//   top_p first holds.
// - min_p: keeps the candidates with p_i >= min_p * p_max, i.e.
//   exp(logit_i - logit_max) >= min_p.
// - temperature: the draw's distribution is softmax(logit / temperature) over
//   what is left. The filters above see the untempered logits.
// - temperature 0 is greedy: the argmax of the penalised logits, ties broken
//   by the lowest id. (Every filter keeps that candidate, so the filters do
//   not change it.) It draws nothing from the PRNG.
//
// Candidates are ordered only as far as a stage needs (a full sort of a 150K
// vocabulary would cost more than the rest): top_k selects its few, top_p
// orders from the most likely in growing chunks until its cut. The draw walks
// the survivors in the order the stages left them: most likely first after a
// top_k or top_p cut, else token order.
//
// Determinism: a given seed, options, logits and history give the same tokens
// on every platform. The PRNG is the sampler's own (SamplerRng: xoshiro256**
// seeded through SplitMix64); the draw is its own (not
// std::discrete_distribution, whose results are implementation-defined);
// candidates are ordered by a total order (logit, then id) and every sum runs
// in an order that follows from it or from the token ids; exp is the
// sampler's own (expNonPositive, not libm's, whose last bits differ between
// libraries); and Sampler.cpp is compiled with -ffp-contract=off, so no
// platform fuses a*b+c differently. Every non-greedy sample() takes exactly
// one 64-bit draw, even when one candidate is left, so the n-th token's draw
// is the PRNG's n-th output whatever the earlier logits were.
//
// Logits: NaN or +inf is an error (a broken model, not a token to pick); -inf
// masks a token (never a candidate); all -inf is an error.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/format/Xoshiro.h"

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace strata::runtime {

/// The sampler's options, one member per row of SamplerOptions.def (name,
/// range, default and meaning are there); the defaults are llama.cpp's.
struct SamplerOptions {
#define SAMPLER_OPTION(Field, Type, Name, Default, Lo, Hi, Bounds, Help)       \
  Type Field = Default;
#include "runtime/SamplerOptions.def"
};

/// Checks every option against its range (SamplerOptions.def). On failure
/// returns false and sets \p error to one line naming the first bad option,
/// its value and its range, e.g. "sampler option top_p = 0 is out of range
/// (0, 1]".
bool validateSamplerOptions(const SamplerOptions &options, std::string &error);

/// Sets one option from "NAME=VALUE" text (NAME from SamplerOptions.def, VALUE
/// a decimal number; the range is checked too). Returns false and sets
/// \p error on an unknown name, a value that is not a number of the option's
/// type, or one out of range.
bool setSamplerOption(SamplerOptions &options, std::string_view assignment,
                      std::string &error);

/// One line per option: name, range, default and meaning (for --help).
std::string describeSamplerOptions();

/// The chain's stage names in the order they run (SamplerStages.def).
std::vector<std::string_view> samplerChain();

/// exp(x) for x <= 0 (and -inf), in plain double arithmetic (Cody-Waite
/// reduction by ln 2, a degree-13 Taylor polynomial, an exact power-of-two
/// scaling): the same bits on every IEEE-754 platform, unlike libm's exp.
/// Relative error below 1e-15.
double expNonPositive(double x);

/// The sampler's PRNG: xoshiro256** 1.0 (Blackman and Vigna), its 256-bit
/// state filled by four outputs of SplitMix64 from the seed, as the authors
/// recommend.
/// The sampler's generator: the project's xoshiro256** (Xoshiro.h).
using SamplerRng = format::Xoshiro256;

/// A candidate that survived the chain.
struct SampleCandidate {
  int32_t id = 0;
  /// Its logit after the penalties (before the temperature).
  double logit = 0;
  /// Its probability in the draw's distribution.
  double prob = 0;
};

/// Chooses tokens from logits: the chain of stages above, then a draw from
/// the sampler's own PRNG. One sampler serves one sequence (its PRNG state
/// advances with every sample()).
class Sampler {
public:
  /// A sampler with \p options and its PRNG seeded with options.seed, or
  /// nothing with \p error set when an option is out of range.
  static std::optional<Sampler> create(const SamplerOptions &options,
                                       std::string &error);

  /// Runs the chain over \p logits ([vocab]) with \p history (the sequence so
  /// far, oldest first; only the last penalty_last_n tokens are read, each
  /// must be in [0, vocab)) and draws a token into \p token. Returns false
  /// with \p error set on bad logits (NaN, +inf, all -inf, empty) or history.
  bool sample(std::span<const float> logits, std::span<const int32_t> history,
              int32_t &token, std::string &error);

  /// The chain without the draw: the candidates left, most likely first
  /// (equal probabilities by lowest id), with the draw's probabilities (one
  /// whose probability underflows to 0 is left out: it cannot be drawn).
  /// sample() draws from exactly this distribution. Errors as sample().
  bool distribution(std::span<const float> logits,
                    std::span<const int32_t> history,
                    std::vector<SampleCandidate> &out,
                    std::string &error) const;

  const SamplerOptions &options() const { return options_; }
  /// True if sample() takes the first highest logit whatever the history
  /// (temperature 0, no penalty): what a plan's greedy ids compute.
  bool plainGreedy() const {
    return options_.temperature == 0 && penaltiesOff();
  }

private:
  /// A candidate during the chain.
  struct Candidate {
    int32_t id;
    double logit; ///< after the penalties
    // Left uninitialised by resize: prepare() writes a vocabulary's worth
    // per token, and a zero fill first would cost as much again.
    Candidate() {}
    Candidate(int32_t id, double logit) : id(id), logit(logit) {}
  };
  /// The chain's working set: the candidates, the history window, and, after
  /// the temperature, each candidate's unnormalised weight and their sum.
  struct Work {
    std::vector<Candidate> candidates;
    /// The first `sorted` candidates are the most likely, in chain order
    /// (logit, then id); the rest are in token order while sorted is 0.
    size_t sorted = 0;
    std::span<const int32_t> window;
    std::vector<double> weights;
    double total = 0;
  };

  explicit Sampler(const SamplerOptions &options)
      : options_(options), rng_(options.seed) {}

  /// Every token with a logit above -inf as a candidate, in id order, and
  /// the history's window; errors as sample().
  bool prepare(std::span<const float> logits, std::span<const int32_t> history,
               Work &w, std::string &error) const;
  /// The last penalty_last_n tokens of \p history into \p window, each
  /// checked to be in [0, vocab) (the diagnostic names the first that is
  /// not).
  bool windowOf(std::span<const int32_t> history, size_t vocab,
                std::span<const int32_t> &window, std::string &error) const;
  /// Whether the penalties change nothing (llama.cpp's test).
  bool penaltiesOff() const;
  /// Logit \p l of a token seen \p count times in the window, penalised.
  double penalised(double l, double count) const;
  /// sample() at temperature 0: the first highest penalised logit in id
  /// order, what the chain's first candidate is, found in one pass over the
  /// logits (no candidate list: a vocabulary's worth of writes and reads a
  /// token, 4 MB at 248K, paid by every greedy row of a batch); the
  /// penalties touch only the window's ids. Errors as prepare().
  bool sampleGreedy(std::span<const float> logits,
                    std::span<const int32_t> history, int32_t &token,
                    std::string &error) const;
  /// Runs every stage of SamplerStages.def in order.
  void runChain(Work &w) const;
  /// Extends the ordered prefix of the candidates to the first \p m.
  void sortPrefix(Work &w, size_t m) const;
  /// The highest logit among the candidates.
  double maxLogit(const Work &w) const;
#define SAMPLER_STAGE(Method, Name, Summary) void Method(Work &w) const;
#include "runtime/SamplerStages.def"

  SamplerOptions options_;
  SamplerRng rng_;
  /// sample()'s working set, kept so that its buffers (a vocabulary's worth)
  /// are allocated once per sequence, not once per token.
  Work work_;
};

} // namespace strata::runtime
