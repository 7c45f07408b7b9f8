#include "lb/load_balancer_watch.hpp"

#include <string>
#include <system_error>
#include <utility>

#include "log/logger.hpp"

namespace shim {

load_balancer_watch::load_balancer_watch(boost::asio::io_context& io, std::uint16_t port,
                                         logger& log)
    : io_(io), port_(port), log_(log), timer_(io) {}

load_balancer_watch::~load_balancer_watch() = default;

void load_balancer_watch::begin(clock::time_point t0, unsigned fall) {
  // A shutdown that takes over a drill counts from the drill's start: the same measurement.
  if (sampling_ && checkers_.t0() == t0) return;
  checkers_.begin(t0, fall);
  series_.reset();
  frozen_.reset();
  sampling_ = true;
  // Each drill's and hold's first sample is its baseline, whatever the sampler compared it with.
  baseline_pending_ = true;
  truncation_logged_ = false;
  timer_.cancel();
  if (port_ == 0) return;
  if (!sampler_ && !sampler_failed_) {
    try {
      sampler_ = std::make_unique<new_connection_sampler>(io_, port_);
    } catch (const std::system_error& e) {
      sampler_failed_ = true;
      log_.warning("cannot read the socket table: no figures of new connections",
                   {{"error", e.what()}});
    }
  }
  if (!sampler_) return;
  series_.emplace(port_, t0);
  // The baseline: the connections open at t0. A sample still running from before serves as it.
  if (!sample_pending_) sample();
}

void load_balancer_watch::end() {
  if (!sampling_) return;
  sampling_ = false;
  // What the checkers saw is frozen here: later answers are no part of this drill or hold.
  frozen_ = checkers_.observe(clock::now());
  checkers_.end();
  timer_.cancel();
}

void load_balancer_watch::arm() {
  timer_.expires_after(kSampleInterval);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec && sampling_) sample();
  });
}

void load_balancer_watch::sample() {
  sample_pending_ = true;
  sampler_->sample([this](result<new_connection_sampler::counts> got) {
    sample_pending_ = false;
    if (!sampling_ || !series_) return;
    if (!got) {
      log_.warning("a sample of the socket table failed", {{"error", got.error()}});
    } else if (got.value().truncated) {
      // No figure rather than a false one; the next whole sample is a baseline again.
      baseline_pending_ = true;
      if (!std::exchange(truncation_logged_, true)) {
        log_.warning(
            "too many connections to the port: a sample stops at the limit and gives "
            "no figure of new connections",
            {{"port", std::to_string(port_)},
             {"limit", std::to_string(new_connection_sampler::kMaxSockets)}});
      }
    } else if (!std::exchange(baseline_pending_, false)) {
      series_->add(clock::now(), got.value().fresh);
    }
    arm();
  });
}

std::optional<checker_observation> load_balancer_watch::observe() const {
  return sampling_ ? checkers_.observe(clock::now()) : frozen_;
}

bool load_balancer_watch::has_checkers() const {
  const auto seen = observe();
  return seen && !seen->checkers().empty();
}

std::string load_balancer_watch::summary(std::chrono::nanoseconds drain_delay) const {
  const auto seen = observe();
  if (!seen) return {};
  std::string out = seen->summary(drain_delay);
  if (series_ && series_->samples() > 0) out += "; " + series_->summary();
  return out;
}

log_fields load_balancer_watch::fields(std::chrono::nanoseconds drain_delay) const {
  const auto seen = observe();
  if (!seen) return {};
  log_fields out = seen->fields(drain_delay);
  out.emplace_back("lb", seen->summary(drain_delay));
  if (series_) {
    for (auto& f : series_->fields()) out.push_back(std::move(f));
  }
  return out;
}

}  // namespace shim
