#pragma once

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "log/event_recorder.hpp"
#include "log/logger.hpp"
#include "logind/bus_link.hpp"
#include "logind/inhibit_delay_ensurer.hpp"
#include "logind/logind_events.hpp"
#include "logind/logind_inhibitor.hpp"
#include "logind/logind_row.hpp"
#include "logind/logind_settings.hpp"
#include "logind/systemd_manager.hpp"
#include "util/result.hpp"

namespace shim {

// The system bus edge: the connection and its loss (bus_link), logind's delay lock and signals
// (logind_inhibitor), PID 1's manager (systemd_manager) and --ensure-inhibit-delay
// (inhibit_delay_ensurer). It writes its rows of the status table (logind_row) and
// reports what the state machine must hear through logind_events. Absent with --inhibit=off.
class logind_edge {
 public:
  logind_edge(boost::asio::io_context& io, logind_settings cfg, logger& log, event_recorder& events,
              logind_row& row, logind_events& on);
  logind_edge(const logind_edge&) = delete;
  logind_edge& operator=(const logind_edge&) = delete;

  void start();

  // PID 1's SystemState ("running", "stopping", ...), or why it could not be read; from the loop.
  // Reads PID 1's SystemState; the answer comes as system_state_read().
  void ask_system_state();
  // Closes the lock (the shutdown goes on), or takes it again after a cancel.
  void release() { inhibitor_->release(); }
  void retake() { inhibitor_->retake(); }

 private:
  void on_lost(const std::string& why);
  void on_lock_changed(logind_inhibitor::lock_state state, const std::string& detail);
  void on_first_attempt(const result<>& outcome);
  void on_inhibit_delay(std::uint64_t usec);

  boost::asio::io_context& io_;
  const logind_settings cfg_;
  logger& log_;
  event_recorder& events_;
  logind_row& row_;
  logind_events& on_;

  // Made by start(), in this order, so that the connection outlives what was connected to it.
  std::unique_ptr<bus_link> bus_;
  std::unique_ptr<logind_inhibitor> inhibitor_;
  std::unique_ptr<systemd_manager> manager_;
  std::unique_ptr<inhibit_delay_ensurer> ensurer_;
  bool was_lost_ = false;
  bool first_attempt_done_ = false;
};

}  // namespace shim
