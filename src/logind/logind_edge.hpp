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
class logind_edge final : public logind_inhibitor::events {
 public:
  logind_edge(boost::asio::io_context& io, logind_settings cfg, logger& log, event_recorder& events,
              logind_row& row, logind_events& on);
  logind_edge(const logind_edge&) = delete;
  logind_edge& operator=(const logind_edge&) = delete;

  void start();

  // Reads PID 1's SystemState ("running", "stopping", ...); the answer, or why it could not be
  // read, comes from the loop as logind_events::system_state_read().
  void ask_system_state();
  // Closes the lock (the shutdown goes on), or takes it again after a cancel.
  void release() { inhibitor_->release(); }
  void retake() { inhibitor_->retake(); }

  // logind_inhibitor::events: what logind says, into the rows and on to the daemon (the unit
  // tests call these as the inhibitor does).
  void prepare_for_shutdown(bool active, const std::string& cause) override {
    on_.prepare_for_shutdown(active, cause);
  }
  void preparing_read(bool preparing) override { on_.preparing_read(preparing); }
  void lock_changed(logind_inhibitor::lock_state state, const std::string& detail) override;
  void first_attempt_done(const result<>& outcome) override;
  void inhibit_delay_read(std::uint64_t usec) override;
  void delay_locks_listed(const std::vector<logind_inhibitor::listed_lock>& locks) override {
    on_.delay_locks_listed(locks);
  }

 private:
  void on_lost(const std::string& why);

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
