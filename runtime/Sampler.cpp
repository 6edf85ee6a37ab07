//===- Sampler.cpp - the next token from the last position's logits -------===//
//
// Compiled with -ffp-contract=off (runtime/CMakeLists.txt): the draw must
// give the same token on every platform, so no a*b+c may become an FMA on
// one target and not on another.
//
//===----------------------------------------------------------------------===//
#include "runtime/Sampler.h"

#include <algorithm>
#include <cassert>
#include <charconv>
#include <cmath>
#include <fmt/format.h>
#include <limits>
#include <type_traits>

namespace strata::runtime {

namespace {

/// The diagnostic of logit \p i, \p l, NaN or +inf (no token can be drawn
/// from such logits).
std::string badLogitError(size_t i, float l) {
  return fmt::format("sampler: the logit of token {} is {}", i,
                     std::isnan(l) ? "NaN" : "+inf");
}

/// One option's row of SamplerOptions.def, for checks and messages.
struct OptionRange {
  double lo, hi;
  std::string_view bounds; ///< "[]", "[)", "(]" or "()"
};

template <typename T> bool inRange(T value, const OptionRange &r) {
  // Every option's type converts to double exactly, except a uint64_t above
  // 2^53, which only the seed has; its range is the whole type.
  double x = static_cast<double>(value);
  bool loOk = r.bounds[0] == '[' ? x >= r.lo : x > r.lo;
  bool hiOk = r.bounds[1] == ']' ? x <= r.hi : x < r.hi;
  return loOk && hiOk;
}

/// A bound as the option's type prints it (an integer option's bounds are
/// whole numbers; a uint64_t's upper one, 2^64 - 1, is 2^64 as a double).
template <typename T> std::string boundText(double bound) {
  if constexpr (std::is_integral_v<T>) {
    if (bound >= static_cast<double>(std::numeric_limits<T>::max()))
      return fmt::format("{}", std::numeric_limits<T>::max());
    return fmt::format("{}", static_cast<T>(bound));
  } else {
    return fmt::format("{}", bound);
  }
}

template <typename T> std::string rangeText(const OptionRange &r) {
  return fmt::format("{}{}, {}{}", r.bounds[0], boundText<T>(r.lo),
                     boundText<T>(r.hi), r.bounds[1]);
}

template <typename T>
bool checkOption(std::string_view name, T value, const OptionRange &r,
                 std::string &error) {
  if (inRange(value, r))
    return true;
  error = fmt::format("sampler option {} = {} is out of range {}", name, value,
                      rangeText<T>(r));
  return false;
}

/// Parses all of \p text as a T (decimal; floats also "inf", "nan", which
/// the range then refuses).
template <typename T> bool parseNumber(std::string_view text, T &value) {
  const char *end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  return ec == std::errc() && ptr == end && !text.empty();
}

/// The order of the chain: higher logit first, then lower id. A total order,
/// so every sort algorithm on every platform gives the same sequence.
struct Before {
  template <typename C> bool operator()(const C &a, const C &b) const {
    if (a.logit != b.logit)
      return a.logit > b.logit;
    return a.id < b.id;
  }
};

} // namespace

bool validateSamplerOptions(const SamplerOptions &o, std::string &error) {
#define SAMPLER_OPTION(Field, Type, Name, Default, Lo, Hi, Bounds, Help)       \
  if (!checkOption(Name, o.Field, OptionRange{Lo, Hi, Bounds}, error))         \
    return false;
#include "runtime/SamplerOptions.def"
  return true;
}

bool setSamplerOption(SamplerOptions &o, std::string_view assignment,
                      std::string &error) {
  size_t eq = assignment.find('=');
  if (eq == std::string_view::npos) {
    error = fmt::format("sampler option '{}' is not NAME=VALUE", assignment);
    return false;
  }
  std::string_view name = assignment.substr(0, eq);
  std::string_view text = assignment.substr(eq + 1);
#define SAMPLER_OPTION(Field, Type, Name, Default, Lo, Hi, Bounds, Help)       \
  if (name == Name) {                                                          \
    Type value{};                                                              \
    if (!parseNumber(text, value)) {                                           \
      error = fmt::format("sampler option {}: '{}' is not {}", Name, text,     \
                          std::is_floating_point_v<Type> ? "a number"          \
                                                         : "an integer");      \
      return false;                                                            \
    }                                                                          \
    if (!checkOption(Name, value, OptionRange{Lo, Hi, Bounds}, error))         \
      return false;                                                            \
    o.Field = value;                                                           \
    return true;                                                               \
  }
#include "runtime/SamplerOptions.def"
  std::string names;
#define SAMPLER_OPTION(Field, Type, Name, Default, Lo, Hi, Bounds, Help)       \
  names += names.empty() ? Name : ", " Name;
#include "runtime/SamplerOptions.def"
  error = fmt::format("unknown sampler option '{}' (options: {})", name, names);
  return false;
}

std::string describeSamplerOptions() {
  std::string text;
#define SAMPLER_OPTION(Field, Type, Name, Default, Lo, Hi, Bounds, Help)       \
  text += fmt::format("  {:<16} {:<26} default {:<5} {}\n", Name,              \
                      rangeText<Type>(OptionRange{Lo, Hi, Bounds}),            \
                      SamplerOptions{}.Field, Help);
#include "runtime/SamplerOptions.def"
  return text;
}

std::vector<std::string_view> samplerChain() {
  return {
#define SAMPLER_STAGE(Method, Name, Summary) Name,
#include "runtime/SamplerStages.def"
  };
}

double expNonPositive(double x) {
  assert(!std::isnan(x) && x <= 0);
  // Below log(DBL_MIN) the result would be subnormal: flush it to 0, as
  // platforms that flush subnormals would, so that none differs. Such a
  // weight is below 2^-1022 of the most likely candidate's (1).
  if (x < -708.0)
    return 0;
  // x = k ln2 + r with |r| <= ln2 / 2; ln2 split into a high part with
  // trailing zero bits (k * ln2Hi is exact for |k| < 2^11) and the rest
  // (fdlibm's constants).
  constexpr double invLn2 = 1.44269504088896338700e+00;
  constexpr double ln2Hi = 6.93147180369123816490e-01;
  constexpr double ln2Lo = 1.90821492927058770002e-10;
  double k = std::floor(x * invLn2 + 0.5);
  double r = (x - k * ln2Hi) - k * ln2Lo;
  // Taylor series to r^13 / 13!: the next term is below 4e-18 for
  // |r| <= 0.347. Horner's scheme, highest order first.
  double p = 1.0 / 6227020800.0;
  constexpr double inverseFactorials[] = {1.0 / 479001600.0,
                                          1.0 / 39916800.0,
                                          1.0 / 3628800.0,
                                          1.0 / 362880.0,
                                          1.0 / 40320.0,
                                          1.0 / 5040.0,
                                          1.0 / 720.0,
                                          1.0 / 120.0,
                                          1.0 / 24.0,
                                          1.0 / 6.0,
                                          1.0 / 2.0,
                                          1.0,
                                          1.0};
  for (double c : inverseFactorials)
    p = p * r + c;
  // Scaling by a power of two is exact (k >= -1022 after the flush above).
  return std::ldexp(p, static_cast<int>(k));
}

std::optional<Sampler> Sampler::create(const SamplerOptions &options,
                                       std::string &error) {
  if (!validateSamplerOptions(options, error))
    return std::nullopt;
  return Sampler(options);
}

bool Sampler::prepare(std::span<const float> logits,
                      std::span<const int32_t> history, Work &w,
                      std::string &error) const {
  if (logits.empty()) {
    error = "sampler: no logits (a vocabulary of 0 tokens)";
    return false;
  }
  if (logits.size() > static_cast<size_t>(INT32_MAX)) {
    error = fmt::format("sampler: {} logits are more than token ids can name",
                        logits.size());
    return false;
  }
  w.sorted = 0;
  w.weights.clear();
  w.total = 0;
  // Written through a local pointer and count: push_back would store the
  // vector's end back to memory on every token (2.5x slower on 150K).
  w.candidates.resize(logits.size());
  Candidate *out = w.candidates.data();
  size_t kept = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    float l = logits[i];
    if (std::isnan(l) || l == INFINITY) {
      error = badLogitError(i, l);
      return false;
    }
    // -inf masks a token: it can never be drawn, so it is no candidate.
    if (l != -INFINITY)
      out[kept++] = Candidate(static_cast<int32_t>(i), l);
  }
  w.candidates.resize(kept);
  if (w.candidates.empty()) {
    error = "sampler: every logit is -inf, no token can be drawn";
    return false;
  }
  return windowOf(history, logits.size(), w.window, error);
}

bool Sampler::windowOf(std::span<const int32_t> history, size_t vocab,
                       std::span<const int32_t> &window,
                       std::string &error) const {
  size_t n = std::min(history.size(),
                      static_cast<size_t>(std::max(options_.penaltyLastN, 0)));
  window = history.last(n);
  for (size_t i = 0; i < window.size(); ++i) {
    int32_t t = window[i];
    if (t < 0 || static_cast<size_t>(t) >= vocab) {
      error = fmt::format("sampler: history token {} (position {}) is outside "
                          "the vocabulary [0, {})",
                          t, history.size() - n + i, vocab);
      return false;
    }
  }
  return true;
}

bool Sampler::penaltiesOff() const {
  const SamplerOptions &o = options_;
  // llama.cpp's test for a no-op (llama_sampler_penalties::is_disabled).
  return o.penaltyLastN == 0 || (o.penaltyRepeat == 1.0f &&
                                 o.penaltyFreq == 0 && o.penaltyPresent == 0);
}

double Sampler::penalised(double l, double count) const {
  const SamplerOptions &o = options_;
  // Dividing a negative logit would raise it; llama.cpp multiplies those.
  // In double, so no penalty within the options' ranges overflows.
  l = l <= 0 ? l * o.penaltyRepeat : l / o.penaltyRepeat;
  return l - (count * o.penaltyFreq + o.penaltyPresent);
}

bool Sampler::sampleGreedy(std::span<const float> logits,
                           std::span<const int32_t> history, int32_t &token,
                           std::string &error) const {
  // The checks prepare() makes, in its order and words; its candidate list
  // is what greedy decoding must not pay for. A vocabulary that is empty or
  // too large for token ids fails prepare() before it writes any.
  if (logits.empty() || logits.size() > static_cast<size_t>(INT32_MAX)) {
    Work w;
    return prepare(logits, history, w, error);
  }
  // The highest logit and whether any is NaN or +inf, in one pass the
  // compiler vectorises; the first token holding it, and the first bad one
  // for the diagnostic, after. 16 rows of 248,320 logits on the 2-core
  // development machine: 6.5 ms through prepare()'s candidates, 3.0 with a
  // branch a token, 1.38 in eight lanes.
  const float *x = logits.data();
  const size_t v = logits.size();
  // Eight lanes of maxima and flags (a NaN compares false both ways, so a
  // lane's max skips it; its flag catches it).
  constexpr size_t kLanes = 8;
  float lane[kLanes];
  int flag[kLanes] = {};
  for (size_t j = 0; j < kLanes; ++j)
    lane[j] = -INFINITY;
  size_t i = 0;
  for (; i + kLanes <= v; i += kLanes)
    for (size_t j = 0; j < kLanes; ++j) {
      const float l = x[i + j];
      flag[j] |= !(l < INFINITY); // NaN or +inf
      lane[j] = l > lane[j] ? l : lane[j];
    }
  float max = -INFINITY;
  bool bad = false;
  for (; i < v; ++i) {
    bad |= !(x[i] < INFINITY);
    max = x[i] > max ? x[i] : max;
  }
  for (size_t j = 0; j < kLanes; ++j) {
    bad |= flag[j] != 0;
    max = lane[j] > max ? lane[j] : max;
  }
  if (bad)
    for (size_t k = 0; k < v; ++k)
      if (!(x[k] < INFINITY)) {
        error = badLogitError(k, x[k]);
        return false;
      }
  if (max == -INFINITY) {
    error = "sampler: every logit is -inf, no token can be drawn";
    return false;
  }
  const int64_t best = std::find(x, x + v, max) - x;
  std::span<const int32_t> window;
  if (!windowOf(history, v, window, error))
    return false;
  if (window.empty() || penaltiesOff()) {
    token = static_cast<int32_t>(best);
    return true;
  }
  // With penalties: each distinct window id's penalised logit (as
  // applyPenalties computes it), and the best of the ids outside the
  // window, found between the window's sorted ids.
  std::vector<int32_t> ids(window.begin(), window.end());
  std::sort(ids.begin(), ids.end());
  int64_t pick = -1;
  double pickLogit = -INFINITY;
  // Ids in increasing order reach here: a later id wins only when higher.
  auto offer = [&](int64_t id, double l) {
    if (l == -INFINITY)
      return;
    if (pick < 0 || l > pickLogit || (l == pickLogit && id < pick)) {
      pick = id;
      pickLogit = l;
    }
  };
  int64_t from = 0; // the first id not yet offered
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j < ids.size() && ids[j] == ids[i])
      ++j;
    const int32_t id = ids[i];
    for (int64_t t = from; t < id; ++t)
      offer(t, logits[static_cast<size_t>(t)]);
    const double l = logits[static_cast<size_t>(id)];
    offer(id, l == -INFINITY ? l : penalised(l, static_cast<double>(j - i)));
    from = int64_t(id) + 1;
    i = j;
  }
  for (int64_t t = from; t < static_cast<int64_t>(logits.size()); ++t)
    offer(t, logits[static_cast<size_t>(t)]);
  token = static_cast<int32_t>(pick);
  return true;
}

void Sampler::runChain(Work &w) const {
#define SAMPLER_STAGE(Method, Name, Summary) Method(w);
#include "runtime/SamplerStages.def"
}

void Sampler::applyPenalties(Work &w) const {
  if (penaltiesOff())
    return;
  std::vector<Candidate> &c = w.candidates;
  // The first stage: the candidates are still in id order.
  assert(std::is_sorted(c.begin(), c.end(),
                        [](auto &a, auto &b) { return a.id < b.id; }));
  std::vector<int32_t> window(w.window.begin(), w.window.end());
  std::sort(window.begin(), window.end());
  for (size_t i = 0; i < window.size();) {
    size_t j = i;
    while (j < window.size() && window[j] == window[i])
      ++j;
    int32_t id = window[i];
    double count = static_cast<double>(j - i);
    i = j;
    auto it = std::lower_bound(
        c.begin(), c.end(), id,
        [](const Candidate &a, int32_t v) { return a.id < v; });
    if (it == c.end() || it->id != id)
      continue; // masked (-inf): stays out
    it->logit = penalised(it->logit, count);
  }
}

void Sampler::sortPrefix(Work &w, size_t m) const {
  std::vector<Candidate> &c = w.candidates;
  m = std::min(m, c.size());
  if (m <= w.sorted)
    return;
  // The first w.sorted are the largest in order and the rest no larger, so
  // selecting the next ones from the rest and sorting them keeps that.
  // std::partial_sort's heap is fastest for a few (top_k 40 of 150K: most
  // candidates fail one comparison); for the thousands top_p may need,
  // selection and a sort are several times faster. The order the rest is
  // left in is the library's; nothing reads it before it is sorted or cut
  // off.
  auto first = c.begin() + static_cast<ptrdiff_t>(w.sorted);
  auto middle = c.begin() + static_cast<ptrdiff_t>(m);
  if (m - w.sorted <= 1024) {
    std::partial_sort(first, middle, c.end(), Before());
  } else {
    std::nth_element(first, middle, c.end(), Before());
    std::sort(first, middle, Before());
  }
  w.sorted = m;
}

double Sampler::maxLogit(const Work &w) const {
  if (w.sorted > 0)
    return w.candidates[0].logit;
  double max = -INFINITY;
  for (const Candidate &c : w.candidates)
    max = std::max(max, c.logit);
  return max;
}

void Sampler::applyTopK(Work &w) const {
  std::vector<Candidate> &c = w.candidates;
  size_t k = static_cast<size_t>(options_.topK);
  // Off, or nothing to cut: the order is left for the stages that need it
  // (a full sort of a large vocabulary costs more than the rest together).
  if (k == 0 || k >= c.size())
    return;
  sortPrefix(w, k);
  c.resize(k);
}

void Sampler::applyTopP(Work &w) const {
  if (options_.topP >= 1.0f)
    return;
  std::vector<Candidate> &c = w.candidates;
  // The softmax denominator, summed in the candidates' present order: token
  // order, or chain order after a top_k cut, the same on every platform.
  double max = maxLogit(w);
  double sum = 0;
  for (const Candidate &x : c)
    sum += expNonPositive(x.logit - max);
  // Walk the candidates most likely first, ordering them in growing chunks
  // (1024, then 4x) as the walk reaches them: a cut usually comes long
  // before the end (0.95 of a 150K vocabulary: some thousands).
  double cum = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    if (i == w.sorted)
      sortPrefix(w, std::max<size_t>(1024, 4 * w.sorted));
    cum += expNonPositive(c[i].logit - max) / sum;
    if (cum >= options_.topP) {
      c.resize(i + 1);
      return;
    }
  }
}

void Sampler::applyMinP(Work &w) const {
  if (options_.minP <= 0.0f)
    return;
  std::vector<Candidate> &c = w.candidates;
  // p_i / p_max = exp(logit_i - max); the most likely passes (1 >= min_p).
  // Kept in their order: an ordered set stays ordered.
  double max = maxLogit(w);
  bool ordered = w.sorted == c.size();
  std::erase_if(c, [&](const Candidate &x) {
    return !(expNonPositive(x.logit - max) >= options_.minP);
  });
  w.sorted = ordered ? c.size() : 0;
}

void Sampler::applyTemperature(Work &w) const {
  std::vector<Candidate> &c = w.candidates;
  if (options_.temperature == 0) {
    // Greedy: the chain's first candidate, wherever it is.
    Candidate best = *std::min_element(c.begin(), c.end(), Before());
    c.assign(1, best);
    w.sorted = 1;
    w.weights.assign(1, 1.0);
    w.total = 1;
    return;
  }
  double max = maxLogit(w);
  w.weights.resize(c.size());
  w.total = 0;
  size_t kept = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    // (logit - max) / T rather than logit / T - max / T: never overflows,
    // even for a tiny temperature.
    double weight = expNonPositive((c[i].logit - max) / options_.temperature);
    // A weight that underflowed to 0 can never be drawn: no candidate (the
    // most likely one's is 1). Dropping some keeps an ordered prefix ordered.
    if (weight == 0)
      continue;
    c[kept] = c[i];
    w.weights[kept++] = weight;
    w.total += weight;
  }
  c.resize(kept);
  w.weights.resize(kept);
  w.sorted = std::min(w.sorted, kept);
}

bool Sampler::distribution(std::span<const float> logits,
                           std::span<const int32_t> history,
                           std::vector<SampleCandidate> &out,
                           std::string &error) const {
  Work w;
  if (!prepare(logits, history, w, error))
    return false;
  runChain(w);
  out.clear();
  for (size_t i = 0; i < w.candidates.size(); ++i)
    out.push_back(
        {w.candidates[i].id, w.candidates[i].logit, w.weights[i] / w.total});
  // Most likely first, whatever order the stages left (probability follows
  // the logit, so the chain's order).
  if (w.sorted < out.size())
    std::sort(out.begin(), out.end(), Before());
  return true;
}

bool Sampler::sample(std::span<const float> logits,
                     std::span<const int32_t> history, int32_t &token,
                     std::string &error) {
  if (options_.temperature == 0)
    return sampleGreedy(logits, history, token, error);
  Work &w = work_;
  if (!prepare(logits, history, w, error))
    return false;
  runChain(w);
  // The first candidate whose running weight passes u * total, u in [0, 1),
  // walking the survivors in the order the stages left them (most likely
  // first after a cut by top_k or top_p, else token order: the same on every
  // platform, and no sort that nothing needs). The running sum adds the
  // weights in the order the total did, so it ends at exactly the total;
  // only u * total rounding up to the total can leave no candidate, and then
  // the last one is taken.
  double target = rng_.uniform() * w.total;
  double cum = 0;
  size_t pick = w.weights.size() - 1;
  for (size_t i = 0; i < w.weights.size(); ++i) {
    cum += w.weights[i];
    if (cum > target) {
      pick = i;
      break;
    }
  }
  token = w.candidates[pick].id;
  return true;
}

} // namespace strata::runtime
