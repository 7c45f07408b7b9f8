#include "upstream/upstream_status.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <numeric>

#include "log/log_line.hpp"

namespace shim {

namespace {

// A loopback /readyz answers in about a millisecond; the buckets tell that from a slow TLS
// handshake and from a probe that ran into the timeout, which is always the last bound.
constexpr std::array<double, 9> kBounds{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};

constexpr std::array<std::string_view, 9> kFailureNames{
    "none", "timeout", "refused", "connect", "tls", "status", "protocol", "oversize", "config"};
static_assert(kFailureNames.size() == static_cast<std::size_t>(probe_failure::config) + 1,
              "one name per probe_failure, in the same order");

}  // namespace

std::string_view to_string(probe_failure f) { return kFailureNames[static_cast<std::size_t>(f)]; }

std::span<const std::string_view> probe_failure_reasons() {
  return std::span(kFailureNames).subspan(1);
}

upstream_status::upstream_status(std::string url, unsigned fall, unsigned rise,
                                 std::chrono::nanoseconds timeout)
    : url_(std::move(url)), fall_(fall), rise_(rise) {
  const double limit = std::chrono::duration<double>(timeout).count();
  for (double b : kBounds) {
    if (b < limit) bounds_.push_back(b);
  }
  bounds_.push_back(limit);
  in_bucket_.assign(bounds_.size() + 1, 0);
  for (auto reason : probe_failure_reasons()) failures_.emplace_back(reason, 0);
}

bool upstream_status::record(const probe_outcome& o, time_point at) {
  const double seconds = std::chrono::duration<double>(o.duration).count();
  const auto bucket = std::lower_bound(bounds_.begin(), bounds_.end(), seconds) - bounds_.begin();
  ++in_bucket_[static_cast<std::size_t>(bucket)];
  duration_sum_ += seconds;
  ++probes_;
  verdict& v = verdict_;
  v.probed = true;
  if (o.pass()) {
    v.failures = 0;
    ++v.passes;
    if (!v.passed && v.passes >= rise_) return v.passed = true;
    return false;
  }
  ++failures_[static_cast<std::size_t>(o.failure) - 1].second;  // in probe_failure_reasons()' order
  v.passes = 0;
  ++v.failures;
  v.last_error = o.error;
  v.last_failure_at = at;
  if (v.passed && v.failures >= fall_) {
    v.passed = false;
    return true;
  }
  return false;
}

void upstream_status::restart() {
  paused_ = false;
  verdict_ = {};
}

std::string upstream_status::detail() const {
  const verdict& v = verdict_;
  const std::string last =
      v.failures == 0 && v.last_error.empty()
          ? std::string()
          : fmt::format("last: {} at {}", v.last_error, format_wall_time(v.last_failure_at));
  std::string text;
  if (!v.probed) {
    text = "not probed yet";
  } else if (v.passed) {
    if (v.failures > 0) {
      text = fmt::format("{} consecutive failure{} (fails at {}), {}", v.failures,
                         v.failures == 1 ? "" : "s", fall_, last);
    }
  } else if (v.failures > 0) {
    text =
        fmt::format("{} consecutive failure{}, {}", v.failures, v.failures == 1 ? "" : "s", last);
  } else {
    text =
        fmt::format("{} of {} passes needed{}", v.passes, rise_, last.empty() ? "" : "; " + last);
  }
  if (paused_) {
    text = text.empty() ? "not probed during a shutdown" : text + "; not probed during a shutdown";
  }
  return text;
}

std::vector<std::uint64_t> upstream_status::cumulative_buckets() const {
  std::vector<std::uint64_t> out(bounds_.size());
  std::partial_sum(in_bucket_.begin(), in_bucket_.begin() + std::ssize(out), out.begin());
  return out;
}

}  // namespace shim
