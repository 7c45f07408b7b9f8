#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "log/log_line.hpp"

namespace shim {

// New TCP connections to the target's listening port, sample by sample from t0 (about one a
// second while a drill or a shutdown runs): when traffic actually stopped coming to the node. Pure:
// the samples carry their time. Bounded: the first kMaxPoints samples are kept for the rendering;
// "fell to 0" is followed for every sample.
class connection_series {
 public:
  using clock = std::chrono::steady_clock;
  using duration = std::chrono::nanoseconds;
  static constexpr std::size_t kMaxPoints = 600;

  connection_series(std::uint16_t port, clock::time_point t0) : port_(port), t0_(t0) {}

  // One sample at `at`: `fresh` connections that were not there at the sample before.
  void add(clock::time_point at, std::uint64_t fresh);

  // The kept samples' new connections, in order.
  const std::vector<std::uint64_t>& points() const { return points_; }
  std::size_t samples() const { return samples_; }
  std::uint64_t total() const { return total_; }
  // The first sample of the run of zeros the series ends in: new connections fell to 0 at its
  // offset (the interval before it had some, or it is the first). nullopt: the last sample had
  // some, or there is none.
  std::optional<duration> fell_to_zero() const { return zero_since_; }

  // "new connections to port 6443 per sample: 12 9 4 0 0; fell to 0 at +3.0 s"
  std::string summary() const;
  // lb_port, lb_connection_samples, lb_new_connections (the total), lb_new_connections_series
  // ("12,9,4,0,0", the kept points), lb_connections_zero_ms (when they fell to 0).
  log_fields fields() const;

 private:
  std::uint16_t port_;
  clock::time_point t0_;
  std::vector<std::uint64_t> points_;
  std::size_t samples_ = 0;
  std::uint64_t total_ = 0;
  std::optional<duration> zero_since_;
};

}  // namespace shim
