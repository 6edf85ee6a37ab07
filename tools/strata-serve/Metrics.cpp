//===- Metrics.cpp - counters, gauges and histograms for /metrics ---------===//
#include "tools/strata-serve/Metrics.h"

#include <fmt/format.h>

namespace strata::tools::serve {

Histogram::Histogram(std::initializer_list<double> bounds)
    : bounds_(bounds), counts_(bounds.size() + 1, 0) {}

void Histogram::observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i])
    ++i;
  std::lock_guard<std::mutex> lock(mutex_);
  ++counts_[i];
  sum_ += value;
  ++count_;
}

void Histogram::print(const std::string &name, std::string &out) const {
  std::lock_guard<std::mutex> lock(mutex_);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i],
                       cumulative);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n", name, count_);
  out += fmt::format("{}_sum {}\n{}_count {}\n", name, sum_, name, count_);
}

std::string Metrics::render() const {
  std::string out;
#define SERVE_COUNTER(Field, Name, Help)                                       \
  out += fmt::format("# HELP {0} {1}\n# TYPE {0} counter\n{0} {2}\n", Name,    \
                     Help, Field.load());
#define SERVE_GAUGE(Field, Name, Help)                                         \
  out += fmt::format("# HELP {0} {1}\n# TYPE {0} gauge\n{0} {2}\n", Name,      \
                     Help, Field.load());
#define SERVE_HISTOGRAM(Field, Name, Help, ...)                                \
  out += fmt::format("# HELP {0} {1}\n# TYPE {0} histogram\n", Name, Help);    \
  Field.print(Name, out);
#include "tools/strata-serve/Metrics.def"
  return out;
}

} // namespace strata::tools::serve
