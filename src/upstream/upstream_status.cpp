#include "upstream/upstream_status.hpp"

#include <algorithm>
#include <array>

namespace shim {

namespace {

// A loopback /readyz answers in about a millisecond; the buckets tell that from a slow TLS
// handshake and from a probe that ran into the timeout, which is always the last bound.
constexpr std::array<double, 9> kBounds{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};

}  // namespace

upstream_status::upstream_status(std::string url, unsigned fall, unsigned rise,
                                 std::chrono::nanoseconds timeout,
                                 std::span<const std::string_view> reasons)
    : url_(std::move(url)), fall_(fall), rise_(rise), health_(fall, rise) {
  const double limit = std::chrono::duration<double>(timeout).count();
  for (double b : kBounds) {
    if (b < limit) bounds_.push_back(b);
  }
  bounds_.push_back(limit);
  in_bucket_.assign(bounds_.size() + 1, 0);
  for (auto reason : reasons) failures_.emplace_back(reason, 0);
}

bool upstream_status::record(const upstream_health::outcome& o, std::string_view reason,
                             std::chrono::nanoseconds duration) {
  const double seconds = std::chrono::duration<double>(duration).count();
  const auto bucket = std::lower_bound(bounds_.begin(), bounds_.end(), seconds) - bounds_.begin();
  ++in_bucket_[static_cast<std::size_t>(bucket)];
  duration_sum_ += seconds;
  ++probes_;
  if (!o.pass) {
    for (auto& [name, count] : failures_) {
      if (name == reason) ++count;
    }
  }
  return health_.record(o);
}

void upstream_status::restart() {
  paused_ = false;
  health_ = upstream_health(fall_, rise_);
}

std::string upstream_status::detail() const {
  std::string text = health_.detail();
  if (paused_)
    text = text.empty() ? "not probed during a shutdown" : text + "; not probed during a shutdown";
  return text;
}

std::vector<std::uint64_t> upstream_status::cumulative_buckets() const {
  std::vector<std::uint64_t> out;
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < bounds_.size(); ++i) {
    sum += in_bucket_[i];
    out.push_back(sum);
  }
  return out;
}

}  // namespace shim
