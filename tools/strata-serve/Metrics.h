//===- Metrics.h - counters, gauges and histograms for /metrics -*- C++ -*-===//
//
// The server's figures (Metrics.def), updated by the HTTP threads and the
// scheduler at once and printed in Prometheus' text format (version 0.0.4).
// Counters and gauges are atomics; each histogram has its own lock.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <string>
#include <vector>

namespace strata::tools::serve {

/// A Prometheus histogram: cumulative buckets, a sum and a count.
class Histogram {
public:
  explicit Histogram(std::initializer_list<double> bounds);
  /// Counts \p value into every bucket whose bound is >= it.
  void observe(double value);
  /// Appends the _bucket, _sum and _count lines of \p name to \p out.
  void print(const std::string &name, std::string &out) const;

private:
  std::vector<double> bounds_;
  mutable std::mutex mutex_;
  std::vector<uint64_t> counts_; ///< per bucket, not cumulative; +Inf last
  double sum_ = 0;
  uint64_t count_ = 0;
};

/// Every metric of Metrics.def.
struct Metrics {
#define SERVE_COUNTER(Field, Name, Help) std::atomic<uint64_t> Field{0};
#define SERVE_GAUGE(Field, Name, Help) std::atomic<int64_t> Field{0};
#define SERVE_HISTOGRAM(Field, Name, Help, ...) Histogram Field{__VA_ARGS__};
#include "tools/strata-serve/Metrics.def"

  /// The text /metrics returns.
  std::string render() const;
};

} // namespace strata::tools::serve
