#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "lb/checker_observation.hpp"
#include "lb/connection_series.hpp"
#include "lb/health_checker_watch.hpp"
#include "lb/new_connection_sampler.hpp"
#include "log/log_line.hpp"

namespace shim {

class logger;

// The shim's edge for the load-balancer measurement (issue 23): every /readyz answer goes to the
// health_checker_watch, and from the moment /readyz turns unready (a drill, a shutdown) until
// end() it also samples, once a second, the new connections to the target's port (with
// --upstream-readyz: its URL's port). Idle, nothing wakes: the sampling timer runs only between
// begin() and end().
class load_balancer_watch {
 public:
  using clock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds kSampleInterval{1};
  static constexpr unsigned kDefaultFall = 3;

  // port 0: no target port known, no connection figures.
  load_balancer_watch(boost::asio::io_context& io, std::uint16_t port, logger& log);
  ~load_balancer_watch();
  load_balancer_watch(const load_balancer_watch&) = delete;
  load_balancer_watch& operator=(const load_balancer_watch&) = delete;

  // kubelet_probe: User-Agent kube-probe/..., listed apart and never a checker.
  void probe_answered(const boost::asio::ip::address& from, bool ready,
                      bool kubelet_probe = false) {
    checkers_.record(from, clock::now(), ready, kubelet_probe);
  }

  void begin(clock::time_point t0, unsigned fall);
  // Stops the sampling and freezes what was measured until the next begin().
  void end();

  // What the checkers (and the connections) showed by now, or by end(); empty before begin().
  std::string summary(std::chrono::nanoseconds drain_delay) const;
  log_fields fields(std::chrono::nanoseconds drain_delay) const;
  // Whether a remote checker probed /readyz in the minute before t0.
  bool has_checkers() const;

 private:
  std::optional<checker_observation> observe() const;
  void arm();
  void sample();

  boost::asio::io_context& io_;
  std::uint16_t port_;
  logger& log_;
  health_checker_watch checkers_;
  std::unique_ptr<new_connection_sampler> sampler_;
  std::optional<connection_series> series_;
  boost::asio::steady_timer timer_;
  bool sampling_ = false;
  bool sample_pending_ = false;
  bool baseline_pending_ = false;              // the next sample is the baseline
  std::optional<checker_observation> frozen_;  // what the checkers saw, as of end()
  bool sampler_failed_ = false;                // logged once
  bool truncation_logged_ = false;             // once a drill or hold
};

}  // namespace shim
