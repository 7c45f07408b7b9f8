#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shim {

// Why a probe failed, as a bounded set (a metric label) and one line of text. oversize: the
// answer's header block, or the body it announces or sends, is beyond the probe's bounds.
enum class probe_failure {
  none,
  timeout,
  refused,
  connect,
  tls,
  status,
  protocol,
  oversize,
  config
};
std::string_view to_string(probe_failure f);
// Every reason a probe can fail for (all but none), in the enum's order: the metric's labels.
std::span<const std::string_view> probe_failure_reasons();

struct probe_outcome {
  probe_failure failure = probe_failure::none;
  // One line: "status 500", "timeout after 1s", "certificate verify failed: ..."
  std::string error = {};
  unsigned status = 0;
  std::chrono::nanoseconds duration{0};
  bool pass() const { return failure == probe_failure::none; }
};

// The upstream check as /readyz, /metrics and STATUS= show it: the hysteresis over the probes'
// outcomes, and the probes' statistics. The daemon writes it from each probe's outcome; it has no
// I/O of its own.
//
// The hysteresis (--upstream-fall, --upstream-rise): `fall` consecutive failures turn the check
// failed, `rise` consecutive passes turn it passed, so that one transient error never moves the
// node out of the load balancer, nor one lucky answer into it. It starts failed: a node joins only
// once its apiserver has said ready `rise` times.
class upstream_status {
 public:
  using time_point = std::chrono::system_clock::time_point;

  // Every failure reason is a label from the start, at 0, as Prometheus' guidelines ask of labels
  // known in advance.
  upstream_status(std::string url, unsigned fall, unsigned rise, std::chrono::nanoseconds timeout);

  // Counts one probe, delivered at `at`; true when the check changed state.
  bool record(const probe_outcome& o, time_point at);

  // Probing stops for a drain; after a cancel it starts again from failed (see shutdown_shim).
  void pause() { paused_ = true; }
  void restart();

  const std::string& url() const { return url_; }
  bool passed() const { return verdict_.passed; }
  unsigned consecutive_failures() const { return verdict_.failures; }
  unsigned consecutive_passes() const { return verdict_.passes; }
  bool paused() const { return paused_; }
  // One line for /readyz?verbose: why the check fails, or the failures it is riding out.
  std::string detail() const;

  // The probe-duration histogram: upper bounds in seconds (the last is the timeout; +Inf is
  // implicit) and the cumulative count at each.
  const std::vector<double>& bucket_bounds() const { return bounds_; }
  std::vector<std::uint64_t> cumulative_buckets() const;
  double duration_sum_seconds() const { return duration_sum_; }
  std::uint64_t probes() const { return probes_; }
  const std::vector<std::pair<std::string, std::uint64_t>>& failures() const { return failures_; }

 private:
  // What restart() forgets.
  struct verdict {
    bool passed = false;
    bool probed = false;
    unsigned failures = 0;
    unsigned passes = 0;
    std::string last_error;
    time_point last_failure_at{};
  };

  std::string url_;
  unsigned fall_;
  unsigned rise_;
  verdict verdict_;
  bool paused_ = false;
  std::vector<double> bounds_;
  std::vector<std::uint64_t> in_bucket_;  // per bucket, not cumulative; one more for +Inf
  double duration_sum_ = 0;
  std::uint64_t probes_ = 0;
  std::vector<std::pair<std::string, std::uint64_t>> failures_;
};

}  // namespace shim
