#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "backoff.hpp"
#include "child_process.hpp"
#include "config.hpp"
#include "event_log.hpp"
#include "inhibit_delay_ensurer.hpp"
#include "logind_inhibitor.hpp"
#include "readiness_server.hpp"
#include "shim_status.hpp"
#include "shutdown_sequence.hpp"
#include "target.hpp"

namespace shim {

// Why the shim stopped; main() turns it into an exit code.
struct shim_outcome {
  enum class kind {
    done,            // stopped after a shutdown hold or a SIGTERM it did not forward
    child_exited,    // wrapper mode: exit with the child's code
    inhibit_failed,  // --inhibit=required and the lock could not be taken at start
    ensure_failed,   // --ensure-inhibit-delay=required and logind's delay could not be raised
  };
  kind what = kind::done;
  int child_exit_code = 0;
  std::string error;
};

// The daemon: the shutdown_sequence state machine with its edges (logind, signals, timers, the
// target, the HTTP server, sd_notify), all on one io_context.
class shutdown_shim {
 public:
  shutdown_shim(boost::asio::io_context& io, const config& cfg, logger& log,
                event_recorder& events);
  ~shutdown_shim();
  shutdown_shim(const shutdown_shim&) = delete;
  shutdown_shim& operator=(const shutdown_shim&) = delete;

  // Binds the listeners, starts the child (wrapper mode) and the inhibitor, installs the signal
  // handlers. Throws std::system_error when something cannot be started.
  void start();

  // Runs the loop until the shim's work is done.
  shim_outcome run();

  const shim_status& status() const { return status_; }

 private:
  using clock = shutdown_sequence::clock;

  void apply(const shutdown_sequence::actions& actions);
  void forward_signal();
  void no_target(const std::string& why);
  void watch_for_target();
  void on_trigger_signal(int signal);
  void on_child_exit(int code);
  void on_inhibitor_ready(const std::string& error);
  void start_child();
  void wait_for_signals();
  void wait_for_forwarded_signals();
  void notify_status();
  void start_watchdog();
  void ping_watchdog();
  void finish(shim_outcome outcome);
  std::string target_description() const;

  boost::asio::io_context& io_;
  const config& cfg_;
  logger& log_;
  event_recorder& events_;
  shim_status status_;
  shutdown_sequence sequence_;
  readiness_server server_;
  std::unique_ptr<logind_inhibitor> inhibitor_;
  std::unique_ptr<inhibit_delay_ensurer> ensurer_;
  std::unique_ptr<child_process> child_;
  bool child_signalled_ = false;
  exit_watcher watcher_;
  std::set<pid_t> signalled_;  // attach targets signalled and not yet exited: never signalled twice
  boost::asio::signal_set triggers_;
  boost::asio::signal_set
      passed_on_;  // wrapper mode: passed on to the child (and SIGCHLD as PID 1)
  boost::asio::steady_timer hold_timer_;
  boost::asio::steady_timer target_timer_;
  boost::asio::steady_timer watchdog_timer_;
  std::chrono::microseconds watchdog_period_{0};
  backoff target_backoff_{std::chrono::milliseconds(100), std::chrono::seconds(5)};
  bool ready_notified_ = false;
  bool exit_pending_ = false;
  std::optional<shim_outcome> outcome_;
};

}  // namespace shim
