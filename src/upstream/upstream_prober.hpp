#pragma once

#include <chrono>
#include <span>
#include <string>
#include <string_view>

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
  std::string
      error;  // one line: "status 500", "timeout after 1s", "certificate verify failed: ..."
  unsigned status = 0;
  std::chrono::nanoseconds duration{0};
  bool pass() const { return failure == probe_failure::none; }
};

// What upstream_check drives: the probe below on the loop, a fake in the tests.
class upstream_prober {
 public:
  virtual ~upstream_prober() = default;
  // The first probe starts at once; outcomes go to the handler the prober was made with, never
  // from inside start().
  virtual void start() = 0;
  virtual void stop() = 0;
};

}  // namespace shim
