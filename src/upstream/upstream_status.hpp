#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "upstream/upstream_health.hpp"

namespace shim {

// The upstream check as /readyz, /metrics and STATUS= show it: the hysteresis over the probes'
// outcomes, and the probes' statistics. The daemon writes it from each probe's outcome; it has no
// I/O of its own.
class upstream_status {
 public:
  // reasons: every failure reason a probe can give (the metric's labels, shown from the start at
  // 0, as Prometheus' guidelines ask of labels known in advance).
  upstream_status(std::string url, unsigned fall, unsigned rise, std::chrono::nanoseconds timeout,
                  std::span<const std::string_view> reasons);

  // Counts one probe; true when the check changed state. reason: one of `reasons`, ignored for a
  // pass.
  bool record(const upstream_health::outcome& o, std::string_view reason,
              std::chrono::nanoseconds duration);

  // Probing stops for a drain; after a cancel it starts again from failed (see shutdown_shim).
  void pause() { paused_ = true; }
  void restart();

  const std::string& url() const { return url_; }
  const upstream_health& health() const { return health_; }
  bool passed() const { return health_.passed(); }
  bool paused() const { return paused_; }
  // One line for /readyz?verbose.
  std::string detail() const;

  // The probe-duration histogram: upper bounds in seconds (the last is the timeout; +Inf is
  // implicit) and the cumulative count at each.
  const std::vector<double>& bucket_bounds() const { return bounds_; }
  std::vector<std::uint64_t> cumulative_buckets() const;
  double duration_sum_seconds() const { return duration_sum_; }
  std::uint64_t probes() const { return probes_; }
  const std::vector<std::pair<std::string, std::uint64_t>>& failures() const { return failures_; }

 private:
  std::string url_;
  unsigned fall_;
  unsigned rise_;
  upstream_health health_;
  bool paused_ = false;
  std::vector<double> bounds_;
  std::vector<std::uint64_t> in_bucket_;  // per bucket, not cumulative; one more for +Inf
  double duration_sum_ = 0;
  std::uint64_t probes_ = 0;
  std::vector<std::pair<std::string, std::uint64_t>> failures_;
};

}  // namespace shim
