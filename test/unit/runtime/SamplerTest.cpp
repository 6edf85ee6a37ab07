//===- SamplerTest.cpp - the host sampler: stages, order, draws, options --===//
//
// Hand-made logits whose survivors and probabilities are worked out here;
// llama.cpp itself is the oracle in test/golden/sampler_oracle.py.
//
//===----------------------------------------------------------------------===//
#include "runtime/Sampler.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

using namespace strata::runtime;

namespace {

/// Every stage off, temperature 1: the distribution is softmax(logits).
SamplerOptions allOff() {
  SamplerOptions o;
  o.temperature = 1;
  o.topK = 0;
  o.topP = 1;
  o.minP = 0;
  o.penaltyLastN = 0;
  return o;
}

Sampler make(const SamplerOptions &o) {
  std::string error;
  std::optional<Sampler> s = Sampler::create(o, error);
  EXPECT_TRUE(s) << error;
  return s ? *s : *Sampler::create(SamplerOptions{}, error);
}

std::vector<SampleCandidate> dist(const SamplerOptions &o,
                                  const std::vector<float> &logits,
                                  const std::vector<int32_t> &history = {}) {
  std::vector<SampleCandidate> out;
  std::string error;
  EXPECT_TRUE(make(o).distribution(logits, history, out, error)) << error;
  return out;
}

/// Logits whose softmax is \p probs.
std::vector<float> logitsOf(const std::vector<double> &probs) {
  std::vector<float> l;
  for (double p : probs)
    l.push_back(static_cast<float>(std::log(p)));
  return l;
}

struct Want {
  int32_t id;
  double prob;
};

/// \p got has exactly the candidates of \p want, in that order, with those
/// probabilities (the logits are f32: 1e-6).
void expectDist(const std::vector<SampleCandidate> &got,
                const std::vector<Want> &want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].id, want[i].id) << "candidate " << i;
    EXPECT_NEAR(got[i].prob, want[i].prob, 1e-6) << "candidate " << i;
  }
}

std::vector<double> softmax(const std::vector<double> &l) {
  double max = -INFINITY, sum = 0;
  for (double v : l)
    max = std::max(max, v);
  std::vector<double> p;
  for (double v : l)
    sum += std::exp(v - max);
  for (double v : l)
    p.push_back(std::exp(v - max) / sum);
  return p;
}

int32_t draw(Sampler &s, const std::vector<float> &logits,
             const std::vector<int32_t> &history = {}) {
  int32_t token = -1;
  std::string error;
  EXPECT_TRUE(s.sample(logits, history, token, error)) << error;
  return token;
}

// ---------------------------------------------------------------------------
// Greedy
// ---------------------------------------------------------------------------

TEST(Sampler, GreedyIsArgmax) {
  SamplerOptions o;
  o.temperature = 0;
  Sampler s = make(o);
  EXPECT_EQ(draw(s, {0.5f, -1.0f, 3.0f, 2.9f}), 2);
  EXPECT_EQ(draw(s, {-7.0f}), 0);
  expectDist(dist(o, {0.5f, -1.0f, 3.0f, 2.9f}), {{2, 1.0}});
}

TEST(Sampler, GreedyBreaksTiesByLowestId) {
  SamplerOptions o;
  o.temperature = 0;
  Sampler s = make(o);
  std::vector<float> logits = {1.0f, 4.0f, 2.0f, 4.0f, 4.0f};
  EXPECT_EQ(draw(s, logits), 1);
  // The chain orders ties by id, so its first candidate is the same one.
  expectDist(dist(o, logits), {{1, 1.0}});
  std::vector<float> flat(100, 0.25f);
  EXPECT_EQ(draw(s, flat), 0);
}

TEST(Sampler, GreedySeesThePenalties) {
  SamplerOptions o = allOff();
  o.temperature = 0;
  o.penaltyLastN = 4;
  o.penaltyRepeat = 2.0f;
  Sampler s = make(o);
  std::vector<float> logits = {1.0f, 3.0f, 2.0f};
  EXPECT_EQ(draw(s, logits, {}), 1);
  EXPECT_EQ(draw(s, logits, {1}), 2); // 3 / 2 < 2
  expectDist(dist(o, logits, {1}), {{2, 1.0}});
}

TEST(Sampler, GreedyAgreesWithTheChainOnRandomLogits) {
  SamplerOptions o;
  o.temperature = 0;
  o.penaltyRepeat = 1.3f;
  o.penaltyFreq = 0.2f;
  SamplerRng rng(7);
  for (int round = 0; round < 50; ++round) {
    std::vector<float> logits(200);
    for (float &l : logits) // coarse values: many ties
      l = static_cast<float>(rng.next() % 8);
    std::vector<int32_t> history;
    for (int i = 0; i < 30; ++i)
      history.push_back(static_cast<int32_t>(rng.next() % 200));
    Sampler s = make(o);
    std::vector<SampleCandidate> d = dist(o, logits, history);
    ASSERT_EQ(d.size(), 1u);
    EXPECT_EQ(draw(s, logits, history), d[0].id) << "round " << round;
  }
}

TEST(Sampler, GreedyAgreesWithTheChainWithMasksAndEveryPenalty) {
  // sample()'s greedy pass against the chain (distribution(): prepare's
  // candidates, applyPenalties, the first highest): masked tokens in and out
  // of the window, repeated window ids, negative logits, every penalty.
  SamplerRng rng(11);
  for (int round = 0; round < 200; ++round) {
    SamplerOptions o;
    o.temperature = 0;
    o.penaltyLastN = static_cast<int32_t>(rng.next() % 40);
    o.penaltyRepeat = round % 3 == 0 ? 1.0f : 0.5f + (rng.next() % 8) * 0.25f;
    o.penaltyFreq = (rng.next() % 5) * 0.25f - 0.5f;
    o.penaltyPresent = round % 4 == 0 ? 0.0f : (rng.next() % 5) * 0.5f - 1.0f;
    const size_t vocab = 1 + rng.next() % 300;
    std::vector<float> logits(vocab);
    for (float &l : logits) {
      const uint64_t r = rng.next() % 10;
      l = r == 0 ? -INFINITY : static_cast<float>(r) - 4.0f;
    }
    logits[rng.next() % vocab] = 2.0f; // at least one finite logit
    std::vector<int32_t> history;
    for (int i = 0; i < 50; ++i)
      history.push_back(static_cast<int32_t>(rng.next() % vocab));
    Sampler s = make(o);
    std::vector<SampleCandidate> d = dist(o, logits, history);
    ASSERT_EQ(d.size(), 1u);
    EXPECT_EQ(draw(s, logits, history), d[0].id) << "round " << round;
  }
}

// ---------------------------------------------------------------------------
// Each stage alone
// ---------------------------------------------------------------------------

TEST(Sampler, AllOffIsSoftmax) {
  std::vector<float> logits = {0.0f, 1.0f, -2.0f, 1.0f};
  std::vector<double> p = softmax({0, 1, -2, 1});
  // Most likely first, ties by id.
  expectDist(dist(allOff(), logits),
             {{1, p[1]}, {3, p[3]}, {0, p[0]}, {2, p[2]}});
}

TEST(Sampler, TopKAlone) {
  SamplerOptions o = allOff();
  o.topK = 2;
  std::vector<float> logits = {1, 3, 2, 5, 4};
  std::vector<double> p = softmax({5, 4});
  expectDist(dist(o, logits), {{3, p[0]}, {4, p[1]}});
  o.topK = 1;
  expectDist(dist(o, logits), {{3, 1.0}});
  // Ties at the cut: the lower ids stay.
  o.topK = 2;
  expectDist(dist(o, {2, 1, 2, 2}), {{0, 0.5}, {2, 0.5}});
  // k at or above the vocabulary, and 0, keep everything.
  std::vector<double> all = softmax({1, 3, 2, 5, 4});
  for (int32_t k : {5, 6, 1000000, 0}) {
    o.topK = k;
    EXPECT_EQ(dist(o, logits).size(), 5u) << "k " << k;
  }
  o.topK = 0;
  expectDist(dist(o, logits),
             {{3, all[3]}, {4, all[4]}, {1, all[1]}, {2, all[2]}, {0, all[0]}});
}

TEST(Sampler, TopPAlone) {
  SamplerOptions o = allOff();
  std::vector<float> logits = logitsOf({0.15, 0.5, 0.05, 0.3});
  // Cumulative: 0.5, 0.8, 0.95, 1.
  o.topP = 0.4f;
  expectDist(dist(o, logits), {{1, 1.0}});
  o.topP = 0.75f;
  expectDist(dist(o, logits), {{1, 0.5 / 0.8}, {3, 0.3 / 0.8}});
  o.topP = 0.9f;
  expectDist(dist(o, logits),
             {{1, 0.5 / 0.95}, {3, 0.3 / 0.95}, {0, 0.15 / 0.95}});
  o.topP = 0.99f;
  EXPECT_EQ(dist(o, logits).size(), 4u);
  o.topP = 1.0f; // off
  EXPECT_EQ(dist(o, logits).size(), 4u);
}

TEST(Sampler, MinPAlone) {
  SamplerOptions o = allOff();
  std::vector<float> logits = logitsOf({0.15, 0.5, 0.05, 0.3});
  o.minP = 0.25f; // p >= 0.125
  expectDist(dist(o, logits),
             {{1, 0.5 / 0.95}, {3, 0.3 / 0.95}, {0, 0.15 / 0.95}});
  o.minP = 0.5f; // p >= 0.25
  expectDist(dist(o, logits), {{1, 0.5 / 0.8}, {3, 0.3 / 0.8}});
  o.minP = 0.7f;
  expectDist(dist(o, logits), {{1, 1.0}});
  // 1 keeps exactly the ties with the most likely.
  o.minP = 1.0f;
  expectDist(dist(o, {1, 2, 0, 2}), {{1, 0.5}, {3, 0.5}});
}

TEST(Sampler, TemperatureAlone) {
  SamplerOptions o = allOff();
  std::vector<float> logits = {0, 1, 2};
  o.temperature = 2.0f;
  std::vector<double> p = softmax({0, 0.5, 1});
  expectDist(dist(o, logits), {{2, p[2]}, {1, p[1]}, {0, p[0]}});
  o.temperature = 0.5f;
  p = softmax({0, 2, 4});
  expectDist(dist(o, logits), {{2, p[2]}, {1, p[1]}, {0, p[0]}});
  // A tiny temperature is greedy with the ties kept, without overflow.
  o.temperature = 1e-30f;
  expectDist(dist(o, {2, 1, 2}), {{0, 0.5}, {2, 0.5}});
  // A huge one is uniform.
  o.temperature = 3e38f;
  expectDist(dist(o, {0, 5, 10}), {{2, 1 / 3.0}, {1, 1 / 3.0}, {0, 1 / 3.0}});
}

/// The chain without penalties, brute force: every candidate sorted, then
/// top_k, top_p, min_p, temperature as Sampler.h states them, in double with
/// libm's exp.
std::vector<Want> bruteForce(const SamplerOptions &o,
                             const std::vector<float> &logits) {
  std::vector<std::pair<double, int32_t>> c;
  for (size_t i = 0; i < logits.size(); ++i)
    c.push_back({logits[i], static_cast<int32_t>(i)});
  std::sort(c.begin(), c.end(), [](auto &a, auto &b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  if (o.topK > 0 && static_cast<size_t>(o.topK) < c.size())
    c.resize(static_cast<size_t>(o.topK));
  if (o.topP < 1) {
    double sum = 0, cum = 0;
    for (auto &x : c)
      sum += std::exp(x.first - c[0].first);
    for (size_t i = 0; i < c.size(); ++i)
      if ((cum += std::exp(c[i].first - c[0].first) / sum) >= o.topP) {
        c.resize(i + 1);
        break;
      }
  }
  size_t n = 1;
  while (n < c.size() && std::exp(c[n].first - c[0].first) >= o.minP)
    ++n;
  c.resize(n);
  std::vector<double> l;
  for (auto &x : c)
    l.push_back(x.first / o.temperature);
  std::vector<double> p = softmax(l);
  std::vector<Want> want;
  for (size_t i = 0; i < c.size(); ++i)
    want.push_back({c[i].second, p[i]});
  return want;
}

TEST(Sampler, LargeVocabularyMatchesBruteForce) {
  // 50,000 tokens: top_p 0.9 keeps about 9,600, so its walk passes the
  // sampler's ordering chunks (1,024, then 4x); top_k takes both of its
  // ordering paths (a heap for a few, selection and sort for thousands).
  SamplerRng rng(11);
  std::vector<float> logits(50000);
  for (float &l : logits) // uniform in [-6, 6): a long flat head
    l = static_cast<float>(rng.uniform() * 12.0 - 6.0);
  struct Case {
    int32_t k;
    float p, minP, t;
  };
  for (Case c : {Case{0, 0.9f, 0.0f, 1.0f}, Case{0, 0.5f, 0.0f, 0.7f},
                 Case{3000, 0.95f, 0.0f, 1.0f}, Case{40, 1.0f, 0.0f, 1.0f},
                 Case{0, 1.0f, 0.05f, 1.3f}, Case{0, 0.99f, 0.3f, 1.0f},
                 Case{20000, 1.0f, 0.0f, 2.0f}, Case{0, 1.0f, 0.0f, 1.0f}}) {
    SCOPED_TRACE(fmt::format("top_k {} top_p {} min_p {} temperature {}", c.k,
                             c.p, c.minP, c.t));
    SamplerOptions o = allOff();
    o.topK = c.k;
    o.topP = c.p;
    o.minP = c.minP;
    o.temperature = c.t;
    std::vector<SampleCandidate> got = dist(o, logits);
    std::vector<Want> want = bruteForce(o, logits);
    ASSERT_EQ(got.size(), want.size());
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(got[i].id, want[i].id) << "candidate " << i;
      worst =
          std::max(worst, std::fabs(got[i].prob - want[i].prob) / want[i].prob);
    }
    EXPECT_LT(worst, 1e-12);
  }
}

// ---------------------------------------------------------------------------
// Penalties over the window
// ---------------------------------------------------------------------------

double logitOf(const std::vector<SampleCandidate> &d, int32_t id) {
  for (const SampleCandidate &c : d)
    if (c.id == id)
      return c.logit;
  ADD_FAILURE() << "no candidate " << id;
  return NAN;
}

TEST(Sampler, RepeatPenaltyDividesPositiveAndMultipliesNegative) {
  SamplerOptions o = allOff();
  o.penaltyLastN = 8;
  o.penaltyRepeat = 1.5f;
  std::vector<float> logits = {2.0f, -1.0f, 0.0f, 4.0f};
  std::vector<SampleCandidate> d = dist(o, logits, {0, 1, 2, 0});
  EXPECT_DOUBLE_EQ(logitOf(d, 0), 2.0 / 1.5); // once, whatever the count
  EXPECT_DOUBLE_EQ(logitOf(d, 1), -1.5);
  EXPECT_DOUBLE_EQ(logitOf(d, 2), 0.0); // 0 <= 0: multiplied
  EXPECT_DOUBLE_EQ(logitOf(d, 3), 4.0); // not in the history
  std::vector<double> p = softmax({2.0 / 1.5, -1.5, 0, 4});
  expectDist(d, {{3, p[3]}, {0, p[0]}, {2, p[2]}, {1, p[1]}});
}

TEST(Sampler, FrequencyAndPresencePenaltiesCount) {
  SamplerOptions o = allOff();
  o.penaltyLastN = 16;
  o.penaltyFreq = 0.5f;
  o.penaltyPresent = 0.25f;
  std::vector<float> logits = {1, 1, 1, 1};
  std::vector<SampleCandidate> d = dist(o, logits, {2, 0, 2, 2, 1});
  EXPECT_DOUBLE_EQ(logitOf(d, 0), 1 - 0.5 - 0.25);
  EXPECT_DOUBLE_EQ(logitOf(d, 1), 1 - 0.5 - 0.25);
  EXPECT_DOUBLE_EQ(logitOf(d, 2), 1 - 3 * 0.5 - 0.25);
  EXPECT_DOUBLE_EQ(logitOf(d, 3), 1);
  // Negative values reward repeats.
  o.penaltyFreq = -1.0f;
  o.penaltyPresent = 0;
  EXPECT_DOUBLE_EQ(logitOf(dist(o, logits, {2, 2}), 2), 3.0);
  // All three at once: the repeat penalty first, then the subtraction.
  o.penaltyRepeat = 2.0f;
  o.penaltyFreq = 0.5f;
  o.penaltyPresent = 1.0f;
  EXPECT_DOUBLE_EQ(logitOf(dist(o, {3, -3}, {0, 1, 1}), 0), 3 / 2.0 - 1.5);
  EXPECT_DOUBLE_EQ(logitOf(dist(o, {3, -3}, {0, 1, 1}), 1), -3 * 2.0 - 2.0);
}

TEST(Sampler, PenaltiesReadOnlyTheWindow) {
  SamplerOptions o = allOff();
  o.penaltyRepeat = 2.0f;
  o.penaltyFreq = 0.25f;
  std::vector<float> logits = {4, 4, 4, 4, 4};
  // Oldest first: only the last 3 (3, 4, 3) count.
  std::vector<int32_t> history = {0, 1, 1, 3, 4, 3};
  o.penaltyLastN = 3;
  std::vector<SampleCandidate> d = dist(o, logits, history);
  EXPECT_DOUBLE_EQ(logitOf(d, 0), 4);
  EXPECT_DOUBLE_EQ(logitOf(d, 1), 4);
  EXPECT_DOUBLE_EQ(logitOf(d, 2), 4);
  EXPECT_DOUBLE_EQ(logitOf(d, 3), 2 - 2 * 0.25);
  EXPECT_DOUBLE_EQ(logitOf(d, 4), 2 - 0.25);
  // A window longer than the history reads all of it.
  o.penaltyLastN = 64;
  d = dist(o, logits, history);
  EXPECT_DOUBLE_EQ(logitOf(d, 0), 2 - 0.25);
  EXPECT_DOUBLE_EQ(logitOf(d, 1), 2 - 0.5);
  EXPECT_DOUBLE_EQ(logitOf(d, 2), 4);
  // Window 0, or neutral values, change nothing.
  o.penaltyLastN = 0;
  d = dist(o, logits, history);
  for (int32_t id = 0; id < 5; ++id)
    EXPECT_DOUBLE_EQ(logitOf(d, id), 4);
  o.penaltyLastN = 64;
  o.penaltyRepeat = 1;
  o.penaltyFreq = 0;
  d = dist(o, logits, history);
  for (int32_t id = 0; id < 5; ++id)
    EXPECT_DOUBLE_EQ(logitOf(d, id), 4);
}

// ---------------------------------------------------------------------------
// The order of the chain
// ---------------------------------------------------------------------------

TEST(SamplerChain, IsLlamaCppsDefaultOrder) {
  std::vector<std::string_view> want = {"penalties", "top_k", "top_p", "min_p",
                                        "temperature"};
  EXPECT_EQ(samplerChain(), want);
}

TEST(SamplerChain, PenaltiesBeforeTopK) {
  SamplerOptions o = allOff();
  o.topK = 1;
  o.penaltyLastN = 4;
  o.penaltyRepeat = 4.0f;
  // Token 0 leads before the penalty (3 > 2), not after (0.75 < 2).
  expectDist(dist(o, {3, 2, 1}, {0}), {{1, 1.0}});
}

TEST(SamplerChain, TopKBeforeTopP) {
  SamplerOptions o = allOff();
  std::vector<float> logits = logitsOf({0.4, 0.3, 0.2, 0.1});
  o.topP = 0.5f;
  // top_p over all four keeps two (0.4 + 0.3 >= 0.5)...
  EXPECT_EQ(dist(o, logits).size(), 2u);
  // ...but top_k = 2 runs first and top_p renormalises over the two left:
  // 0.4 / 0.7 = 0.571 >= 0.5 keeps one.
  o.topK = 2;
  expectDist(dist(o, logits), {{0, 1.0}});
}

TEST(SamplerChain, TopPBeforeMinP) {
  SamplerOptions o = allOff();
  std::vector<float> logits = logitsOf({0.4, 0.3, 0.2, 0.1});
  o.topP = 0.5f;
  o.minP = 0.6f;
  // top_p first keeps {0, 1} (0.4 + 0.3 >= 0.5); min_p (p >= 0.24) keeps
  // both. Were min_p first, top_p over {0.571, 0.429} would keep one.
  expectDist(dist(o, logits), {{0, 0.4 / 0.7}, {1, 0.3 / 0.7}});
}

TEST(SamplerChain, TemperatureAfterTheFilters) {
  SamplerOptions o = allOff();
  std::vector<float> logits = logitsOf({0.4, 0.3, 0.2, 0.1});
  o.topP = 0.65f;
  o.temperature = 0.1f;
  // The filters see the untempered 0.4, 0.3 (cumulative 0.7 >= 0.65): two
  // survive, then sharpened by 1/T = 10. (Tempered first, p_0 would be 0.94
  // and top_p would keep one.)
  double p0 = 1 / (1 + std::pow(0.75, 10));
  expectDist(dist(o, logits), {{0, p0}, {1, 1 - p0}});
  // min_p too sees the untempered ratio 0.75 >= 0.7.
  o.topP = 1;
  o.minP = 0.7f;
  expectDist(dist(o, logits), {{0, p0}, {1, 1 - p0}});
}

TEST(SamplerChain, DefaultsRunTheWholeChain) {
  // llama.cpp's defaults: top_k 40, top_p 0.95, min_p 0.05, temperature 0.8,
  // penalties off (penalty_repeat 1).
  SamplerOptions o;
  std::vector<float> logits(100);
  for (size_t i = 0; i < logits.size(); ++i)
    logits[i] = static_cast<float>(-0.05 * static_cast<double>(i));
  // top_k keeps 0..39; over those p_i ~ exp(-0.05 i) sums past 0.95 only at
  // the end, so top_p keeps all 40 but the last few; min_p 0.05 keeps
  // exp(-0.05 i) >= 0.05, i.e. i <= 59: no cut. Worked out in double:
  std::vector<double> top40;
  for (int i = 0; i < 40; ++i)
    top40.push_back(-0.05 * i);
  std::vector<double> p = softmax(top40);
  double cum = 0;
  size_t keep = 0;
  while (keep < p.size() && (cum += p[keep]) < 0.95f)
    ++keep;
  ++keep;
  std::vector<double> tempered;
  for (size_t i = 0; i < keep; ++i)
    tempered.push_back(top40[i] / 0.8);
  std::vector<double> q = softmax(tempered);
  std::vector<Want> want;
  for (size_t i = 0; i < keep; ++i)
    want.push_back({static_cast<int32_t>(i), q[i]});
  EXPECT_LT(keep, 40u);
  expectDist(dist(o, logits), want);
}

// ---------------------------------------------------------------------------
// Determinism and the draw
// ---------------------------------------------------------------------------

TEST(SamplerRng, KnownAnswers) {
  // SplitMix64 from 0 (the reference C code's first output; the same from an
  // independent Python transcription), and xoshiro256** seeded by it (from
  // the Python transcription of the reference code): a platform whose
  // integer arithmetic differed would fail here.
  uint64_t state = 0;
  EXPECT_EQ(SamplerRng::splitMix64(state), 0xe220a8397b1dcdafull);
  SamplerRng r0(0);
  EXPECT_EQ(r0.next(), 0x99ec5f36cb75f2b4ull);
  EXPECT_EQ(r0.next(), 0xbf6e1f784956452aull);
  EXPECT_EQ(r0.next(), 0x1a5f849d4933e6e0ull);
  SamplerRng r42(42);
  EXPECT_EQ(r42.next(), 0x15780b2e0c2ec716ull);
  EXPECT_EQ(r42.next(), 0x6104d9866d113a7eull);
  EXPECT_EQ(r42.next(), 0xae17533239e499a1ull);
  SamplerRng u(1);
  for (int i = 0; i < 1000; ++i) {
    double x = u.uniform();
    ASSERT_GE(x, 0.0);
    ASSERT_LT(x, 1.0);
  }
}

TEST(SamplerRng, ExpMatchesLibm) {
  EXPECT_EQ(expNonPositive(0.0), 1.0);
  EXPECT_EQ(expNonPositive(-INFINITY), 0.0);
  EXPECT_EQ(expNonPositive(-800.0), 0.0);
  double worst = 0;
  for (int i = 0; i <= 200000; ++i) {
    double x = -708.0 * i / 200000.0;
    double want = std::exp(x);
    worst = std::max(worst, std::fabs(expNonPositive(x) - want) / want);
  }
  for (double x = -1e-300; x > -700; x *= 1.37)
    worst = std::max(worst,
                     std::fabs(expNonPositive(x) - std::exp(x)) / std::exp(x));
  EXPECT_LT(worst, 1e-15);
}

/// 64 logits in [-2, 2), exact in f32 and computed without libm (the known
/// tokens below must not depend on a platform's sin or exp).
std::vector<float> broadLogits() {
  std::vector<float> logits(64);
  for (size_t i = 0; i < logits.size(); ++i)
    logits[i] = static_cast<float>((i * 37 % 64) / 16.0 - 2.0);
  return logits;
}

std::vector<int32_t> drawMany(uint64_t seed, int n) {
  SamplerOptions o = allOff();
  o.seed = seed;
  Sampler s = make(o);
  std::vector<float> logits = broadLogits();
  std::vector<int32_t> tokens;
  for (int i = 0; i < n; ++i)
    tokens.push_back(draw(s, logits));
  return tokens;
}

TEST(SamplerDraw, SameSeedSameTokens) {
  EXPECT_EQ(drawMany(123, 200), drawMany(123, 200));
  EXPECT_EQ(drawMany(0, 200), drawMany(0, 200));
}

TEST(SamplerDraw, DifferentSeedDifferentTokens) {
  EXPECT_NE(drawMany(123, 200), drawMany(124, 200));
  EXPECT_NE(drawMany(0, 200), drawMany(1ull << 63, 200));
}

TEST(SamplerDraw, KnownTokensForASeed) {
  // The first tokens of seed 2024 over broadLogits(), with llama.cpp's
  // defaults (33 candidates survive): every platform must draw exactly these
  // (they follow from the known PRNG outputs, expNonPositive and the total
  // order alone). An independent Python transcription of the chain and the
  // draw gives the same 16 tokens.
  SamplerOptions o;
  o.seed = 2024;
  Sampler s = make(o);
  std::vector<int32_t> got;
  for (int i = 0; i < 16; ++i)
    got.push_back(draw(s, broadLogits()));
  std::vector<int32_t> want = {19, 3,  19, 57, 3,  12, 50, 12,
                               62, 19, 29, 46, 34, 50, 3,  57};
  EXPECT_EQ(got, want) << fmt::format("{}", fmt::join(got, ", "));
}

TEST(SamplerDraw, EachSampleTakesOneDraw) {
  // A single survivor still takes its draw, so the next token of a sequence
  // does not depend on how many candidates the previous one had.
  SamplerOptions o = allOff();
  o.seed = 9;
  Sampler a = make(o), b = make(o);
  std::vector<float> logits = broadLogits();
  draw(a, {1.0f});
  draw(b, logits);
  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(draw(a, logits), draw(b, logits));
}

/// Pearson's chi-square of \p draws tokens drawn by a sampler with \p o
/// against Sampler::distribution; \p dof gets its degrees of freedom.
double chiSquare(const SamplerOptions &o, const std::vector<float> &logits,
                 const std::vector<int32_t> &history, int draws, size_t &dof) {
  Sampler s = make(o);
  std::vector<SampleCandidate> d;
  std::string error;
  EXPECT_TRUE(s.distribution(logits, history, d, error)) << error;
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < draws; ++i)
    ++counts[static_cast<size_t>(draw(s, logits, history))];
  double chi2 = 0;
  int inDist = 0;
  for (const SampleCandidate &c : d) {
    double expected = c.prob * draws;
    EXPECT_GE(expected, 5.0) << "token " << c.id;
    double diff = counts[static_cast<size_t>(c.id)] - expected;
    chi2 += diff * diff / expected;
    inDist += counts[static_cast<size_t>(c.id)];
  }
  EXPECT_EQ(inDist, draws) << "a token outside the distribution was drawn";
  dof = d.size() - 1;
  return chi2;
}

TEST(SamplerDraw, MatchesTheDistribution) {
  // 200,000 draws with a fixed seed against the chain's probabilities:
  // Pearson's chi-square must stay below its 0.999 quantile for k - 1
  // degrees of freedom (the seed is fixed, so this is deterministic; a
  // biased draw would exceed it by far). Two paths: survivors ordered by a
  // top_k cut (llama.cpp's defaults with a repeat penalty and temperature
  // 1.3), and survivors left in token order (every filter off, temperature
  // 0.7, 7 tokens).
  const double q999[] = {10.83, 13.82, 16.27, 18.47, 20.52,
                         22.46, 24.32, 26.12, 27.88};
  struct Case {
    const char *name;
    SamplerOptions o;
    std::vector<float> logits;
    std::vector<int32_t> history;
  };
  SamplerOptions ordered;
  ordered.seed = 77;
  ordered.temperature = 1.3f;
  ordered.topK = 8;
  ordered.penaltyRepeat = 1.2f;
  SamplerOptions tokenOrder = allOff();
  tokenOrder.seed = 78;
  tokenOrder.temperature = 0.7f;
  for (const Case &c :
       {Case{"ordered", ordered, broadLogits(), {1, 7, 7, 20}},
        Case{
            "token order", tokenOrder, {0.5f, -1, 1, 0, 2, -0.5f, 1.5f}, {}}}) {
    size_t dof = 0;
    double chi2 = chiSquare(c.o, c.logits, c.history, 200000, dof);
    ASSERT_GE(dof, 3u);
    ASSERT_LE(dof, 9u);
    RecordProperty(std::string(c.name) + "_dof", static_cast<int>(dof));
    RecordProperty(std::string(c.name) + "_chi_square",
                   fmt::format("{:.3f}", chi2));
    EXPECT_LT(chi2, q999[dof - 1])
        << c.name << ": " << dof << " degrees of freedom, chi-square " << chi2;
  }
}

TEST(SamplerDraw, MaskedTokensAreNeverDrawn) {
  SamplerOptions o = allOff();
  o.seed = 5;
  Sampler s = make(o);
  float ninf = -std::numeric_limits<float>::infinity();
  std::vector<float> logits = {ninf, 0.0f, ninf, 0.0f, ninf};
  for (int i = 0; i < 200; ++i) {
    int32_t t = draw(s, logits);
    EXPECT_TRUE(t == 1 || t == 3) << t;
  }
  expectDist(dist(o, logits), {{1, 0.5}, {3, 0.5}});
  // Penalising a masked token leaves it out.
  o.penaltyLastN = 4;
  o.penaltyRepeat = 0.5f;
  expectDist(dist(o, logits, {0, 2}), {{1, 0.5}, {3, 0.5}});
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

std::string sampleError(const std::vector<float> &logits,
                        const std::vector<int32_t> &history = {},
                        SamplerOptions o = SamplerOptions{}) {
  Sampler s = make(o);
  int32_t token = -1;
  std::string error;
  EXPECT_FALSE(s.sample(logits, history, token, error));
  std::vector<SampleCandidate> d;
  std::string error2;
  EXPECT_FALSE(s.distribution(logits, history, d, error2));
  EXPECT_EQ(error, error2);
  return error;
}

TEST(SamplerErrors, BadLogits) {
  float nan = std::numeric_limits<float>::quiet_NaN();
  float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(sampleError({0, 1, nan, 2}),
            "sampler: the logit of token 2 is NaN");
  SamplerOptions greedy;
  greedy.temperature = 0;
  EXPECT_EQ(sampleError({nan}, {}, greedy),
            "sampler: the logit of token 0 is NaN");
  EXPECT_EQ(sampleError({0, inf}), "sampler: the logit of token 1 is +inf");
  EXPECT_EQ(sampleError({-inf, -inf}),
            "sampler: every logit is -inf, no token can be drawn");
  EXPECT_EQ(sampleError({}), "sampler: no logits (a vocabulary of 0 tokens)");
}

TEST(SamplerErrors, HistoryOutsideTheVocabulary) {
  SamplerOptions o;
  o.penaltyLastN = 2;
  EXPECT_EQ(sampleError({0, 1, 2}, {0, 1, 3}, o),
            "sampler: history token 3 (position 2) is outside the "
            "vocabulary [0, 3)");
  EXPECT_EQ(sampleError({0, 1, 2}, {0, -1, 2}, o),
            "sampler: history token -1 (position 1) is outside the "
            "vocabulary [0, 3)");
  // Outside the window the history is not read.
  Sampler s = make(o);
  int32_t token;
  std::string error;
  EXPECT_TRUE(s.sample(std::vector<float>{0, 1, 2},
                       std::vector<int32_t>{99, 0, 1}, token, error))
      << error;
}

std::string optionError(void (*set)(SamplerOptions &)) {
  SamplerOptions o;
  set(o);
  std::string error;
  EXPECT_FALSE(validateSamplerOptions(o, error));
  std::string error2;
  EXPECT_FALSE(Sampler::create(o, error2));
  EXPECT_EQ(error, error2);
  return error;
}

TEST(SamplerErrors, EveryInvalidOptionIsRefused) {
  struct Case {
    void (*set)(SamplerOptions &);
    const char *message;
  };
  // Captureless lambdas name these without capturing them.
  static constexpr float kInf = std::numeric_limits<float>::infinity();
  static constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
  const Case cases[] = {
      {[](SamplerOptions &o) { o.temperature = -0.5f; },
       "sampler option temperature = -0.5 is out of range [0, inf)"},
      {[](SamplerOptions &o) { o.temperature = kInf; },
       "sampler option temperature = inf is out of range [0, inf)"},
      {[](SamplerOptions &o) { o.temperature = kNan; },
       "sampler option temperature = nan is out of range [0, inf)"},
      {[](SamplerOptions &o) { o.topK = -1; },
       "sampler option top_k = -1 is out of range [0, 2147483647]"},
      {[](SamplerOptions &o) { o.topP = 0; },
       "sampler option top_p = 0 is out of range (0, 1]"},
      {[](SamplerOptions &o) { o.topP = 1.5f; },
       "sampler option top_p = 1.5 is out of range (0, 1]"},
      {[](SamplerOptions &o) { o.topP = kNan; },
       "sampler option top_p = nan is out of range (0, 1]"},
      {[](SamplerOptions &o) { o.minP = -0.1f; },
       "sampler option min_p = -0.1 is out of range [0, 1]"},
      {[](SamplerOptions &o) { o.minP = 1.01f; },
       "sampler option min_p = 1.01 is out of range [0, 1]"},
      {[](SamplerOptions &o) { o.penaltyLastN = -1; },
       "sampler option penalty_last_n = -1 is out of range [0, 2147483647]"},
      {[](SamplerOptions &o) { o.penaltyRepeat = 0; },
       "sampler option penalty_repeat = 0 is out of range (0, inf)"},
      {[](SamplerOptions &o) { o.penaltyRepeat = -1; },
       "sampler option penalty_repeat = -1 is out of range (0, inf)"},
      {[](SamplerOptions &o) { o.penaltyRepeat = kInf; },
       "sampler option penalty_repeat = inf is out of range (0, inf)"},
      {[](SamplerOptions &o) { o.penaltyFreq = kNan; },
       "sampler option penalty_freq = nan is out of range (-inf, inf)"},
      {[](SamplerOptions &o) { o.penaltyFreq = -kInf; },
       "sampler option penalty_freq = -inf is out of range (-inf, inf)"},
      {[](SamplerOptions &o) { o.penaltyPresent = kInf; },
       "sampler option penalty_present = inf is out of range (-inf, inf)"},
  };
  for (const Case &c : cases)
    EXPECT_EQ(optionError(c.set), c.message);
}

TEST(SamplerErrors, EdgesOfTheRangesAreValid) {
  std::string error;
  SamplerOptions o;
  EXPECT_TRUE(validateSamplerOptions(o, error)) << error; // the defaults
  o.temperature = 0;
  o.topK = 0;
  o.topP = 1;
  o.minP = 1;
  o.penaltyLastN = 0;
  o.penaltyRepeat = 1e-30f;
  o.penaltyFreq = -1e30f;
  o.seed = ~0ull;
  EXPECT_TRUE(validateSamplerOptions(o, error)) << error;
  o.topP = 1e-30f;
  o.minP = 0;
  o.topK = std::numeric_limits<int32_t>::max();
  o.penaltyLastN = std::numeric_limits<int32_t>::max();
  EXPECT_TRUE(validateSamplerOptions(o, error)) << error;
}

TEST(SamplerOptionText, SetsAndRefuses) {
  SamplerOptions o;
  std::string error;
  EXPECT_TRUE(setSamplerOption(o, "temperature=0.25", error)) << error;
  EXPECT_EQ(o.temperature, 0.25f);
  EXPECT_TRUE(setSamplerOption(o, "top_k=7", error)) << error;
  EXPECT_EQ(o.topK, 7);
  EXPECT_TRUE(setSamplerOption(o, "seed=18446744073709551615", error));
  EXPECT_EQ(o.seed, ~0ull);
  EXPECT_TRUE(setSamplerOption(o, "penalty_freq=-1e3", error));
  EXPECT_EQ(o.penaltyFreq, -1000.0f);

  EXPECT_FALSE(setSamplerOption(o, "top_p=0", error));
  EXPECT_EQ(error, "sampler option top_p = 0 is out of range (0, 1]");
  EXPECT_EQ(o.topP, SamplerOptions{}.topP); // unchanged
  EXPECT_FALSE(setSamplerOption(o, "top_k=4.5", error));
  EXPECT_EQ(error, "sampler option top_k: '4.5' is not an integer");
  EXPECT_FALSE(setSamplerOption(o, "min_p=", error));
  EXPECT_EQ(error, "sampler option min_p: '' is not a number");
  EXPECT_FALSE(setSamplerOption(o, "temperature=nan", error));
  EXPECT_EQ(error, "sampler option temperature = nan is out of range [0, inf)");
  EXPECT_FALSE(setSamplerOption(o, "top_k", error));
  EXPECT_EQ(error, "sampler option 'top_k' is not NAME=VALUE");
  EXPECT_FALSE(setSamplerOption(o, "temp=1", error));
  EXPECT_EQ(error, "unknown sampler option 'temp' (options: temperature, "
                   "top_k, top_p, min_p, penalty_last_n, penalty_repeat, "
                   "penalty_freq, penalty_present, seed)");
}

TEST(SamplerOptionText, DescribesEveryOption) {
  std::string text = describeSamplerOptions();
  for (const char *name :
       {"temperature", "top_k", "top_p", "min_p", "penalty_last_n",
        "penalty_repeat", "penalty_freq", "penalty_present", "seed"})
    EXPECT_NE(text.find(name), std::string::npos) << name;
  EXPECT_NE(text.find("(0, 1]"), std::string::npos) << text;
}

} // namespace
