#pragma once

#include <chrono>
#include <string>

namespace shim {

// Hysteresis over the upstream probe's outcomes (--upstream-fall, --upstream-rise): `fall`
// consecutive failures turn the check failed, `rise` consecutive passes turn it passed, so that one
// transient error never moves the node out of the load balancer, nor one lucky answer into it. It
// starts failed: a node joins only once its apiserver has said ready `rise` times.
class upstream_health {
 public:
  using time_point = std::chrono::system_clock::time_point;
  struct outcome {
    bool pass = false;
    std::string error = {};  // one line, when !pass: "status 500", "timeout after 1s", ...
    time_point at{};
  };

  upstream_health(unsigned fall, unsigned rise) : fall_(fall), rise_(rise) {}

  // Counts one probe; true when the check changed state.
  bool record(const outcome& o);

  bool passed() const { return passed_; }
  unsigned consecutive_failures() const { return failures_; }
  unsigned consecutive_passes() const { return passes_; }
  const outcome& last_failure() const { return last_failure_; }
  bool probed() const { return probed_; }

  // One line for /readyz?verbose: why the check fails, or the failures it is riding out.
  std::string detail() const;

 private:
  unsigned fall_;
  unsigned rise_;
  bool passed_ = false;
  bool probed_ = false;
  unsigned failures_ = 0;
  unsigned passes_ = 0;
  outcome last_failure_;
};

}  // namespace shim
