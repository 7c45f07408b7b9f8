#include "lb/connection_series.hpp"

#include <fmt/format.h>

#include "util/joined.hpp"

namespace shim {
namespace {

constexpr auto kNumber = [](std::uint64_t n) { return std::to_string(n); };

}  // namespace

void connection_series::add(clock::time_point at, std::uint64_t fresh) {
  const duration offset = at - t0_;
  ++samples_;
  total_ += fresh;
  if (points_.size() < kMaxPoints) points_.push_back(fresh);
  if (fresh > 0) {
    zero_since_.reset();
  } else if (!zero_since_) {
    zero_since_ = offset;
  }
}

std::string connection_series::summary() const {
  std::string text = fmt::format("new connections to port {} per sample:", port_);
  if (points_.empty()) return text + " no sample yet";
  text += " " + joined(points_, " ", kNumber);
  if (samples_ > points_.size()) text += fmt::format(" and {} more", samples_ - points_.size());
  if (zero_since_) {
    return text + fmt::format("; fell to 0 at +{:.1f} s",
                              std::chrono::duration<double>(*zero_since_).count());
  }
  return text + "; not 0 yet";
}

log_fields connection_series::fields() const {
  log_fields f;
  f.emplace_back("lb_port", std::to_string(port_));
  f.emplace_back("lb_connection_samples", std::to_string(samples_));
  f.emplace_back("lb_new_connections", std::to_string(total_));
  f.emplace_back("lb_new_connections_series", joined(points_, ",", kNumber));
  if (zero_since_) {
    f.emplace_back(
        "lb_connections_zero_ms",
        std::to_string(
            std::chrono::duration_cast<std::chrono::milliseconds>(*zero_since_).count()));
  }
  return f;
}

}  // namespace shim
