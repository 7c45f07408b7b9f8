#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>

#include "log/logger.hpp"
#include "readiness/shim_status.hpp"

namespace shim {

// What systemd hears from the shim through sd_notify: READY=1 once, STATUS= rendered from the
// readiness table at each change, STOPPING=1, and WATCHDOG=1 while the loop turns.
class systemd_notifier {
 public:
  systemd_notifier(boost::asio::io_context& io, const shim_status& status, logger& log)
      : status_(status), log_(log), watchdog_timer_(io) {}

  // Only the loop turning counts as healthy: a lost bus or a missing target is retried on the
  // loop and reported, and a restart by the watchdog would only drop the lock. So nothing else
  // stops the pings; without WATCHDOG_USEC for this PID there is no timer at all.
  void start_watchdog();
  void stop() { watchdog_timer_.cancel(); }

  void status();
  // STATUS= first, then READY=1; once.
  void ready();
  void stopping();

 private:
  void ping_watchdog();

  const shim_status& status_;
  logger& log_;
  boost::asio::steady_timer watchdog_timer_;
  std::chrono::microseconds watchdog_period_{0};
  bool ready_ = false;
};

}  // namespace shim
