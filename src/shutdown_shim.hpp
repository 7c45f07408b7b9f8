#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "control/control_routes.hpp"
#include "control/status_document.hpp"
#include "core/sequence_runner.hpp"
#include "core/shim_status.hpp"
#include "http/control_server.hpp"
#include "http/readiness_server.hpp"
#include "kubelet/kubelet_watch.hpp"
#include "lb/load_balancer_watch.hpp"
#include "log/event_log.hpp"
#include "logind/logind_edge.hpp"
#include "process/target_watch.hpp"
#include "signal_watch.hpp"
#include "upstream/upstream_check.hpp"

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

// The daemon: the shutdown_sequence state machine (through sequence_runner) with its edges:
// the system bus (bus_link, logind_inhibitor, systemd_manager, inhibit_delay_ensurer), signals,
// timers, the target, the HTTP server and sd_notify, all on one io_context. The edges report
// through handlers; this class alone writes shim_status, but for the upstream check's row, which
// upstream_check keeps.
class shutdown_shim {
 public:
  shutdown_shim(boost::asio::io_context& io, const config& cfg, logger& log,
                event_recorder& events);
  ~shutdown_shim();
  shutdown_shim(const shutdown_shim&) = delete;
  shutdown_shim& operator=(const shutdown_shim&) = delete;

  // Binds the listeners, starts the child (wrapper mode) and the bus, installs the signal
  // handlers. Throws std::system_error when something cannot be started.
  void start();

  // Runs the loop until the shim's work is done.
  shim_outcome run();

  const shim_status& status() const { return status_; }

 private:
  using seq = shutdown_sequence;
  using clock = seq::clock;

  // The state machine's side.
  void carry_out(const seq::action& a);
  void record_start(const seq::action& a);
  void settled();

  // The upstream check.
  void start_upstream();
  void ask_system_state();
  void request_exit();

  // What the edges report.
  void on_prepare_for_shutdown(bool active, const std::string& cause);
  void on_preparing_read(bool preparing);
  void on_first_attempt(const result<>& outcome);
  void on_trigger_signal(int signal);
  void on_stray_signal(int signal, bool own);
  void on_child_exit(int code);
  void kubelet_changed();

  // The signal plan (issue 32).
  seq::signal_timing timing(seq::forward_decision decision) const;
  void plan_from(const std::vector<std::string>& argv, const std::string& source, bool running);
  void lb_known();

  // The control socket (issue 23): status and drills, for root on the node.
  void start_control();
  http_answers control_answers();
  control_reply answer_status(bool json) const;
  control_reply answer_start_drill(const drill_request& request);
  control_reply answer_drill(bool json) const;
  control_reply answer_stop_drill(bool json);
  status_snapshot snapshot() const;
  std::string drill_progress() const;

  void record_previous_shutdown();
  void start_bus();
  void notify_status();
  void start_watchdog();
  void ping_watchdog();
  void finish(shim_outcome outcome);

  boost::asio::io_context& io_;
  const config& cfg_;
  logger& log_;
  event_recorder& events_;
  shim_status status_;
  sequence_runner runner_;
  load_balancer_watch lb_;
  readiness_server server_;
  control_server control_;
  unsigned drill_fall_ = load_balancer_watch::kDefaultFall;  // the drill's --lb-fall
  std::string last_drill_;  // how the last drill ended and what the load balancer did

  std::unique_ptr<logind_edge> logind_;  // absent with --inhibit=off

  kubelet_watch kubelet_;
  target_watch target_;

  signal_watch signals_;
  boost::asio::steady_timer hold_timer_;
  boost::asio::steady_timer watchdog_timer_;
  boost::asio::steady_timer lb_check_timer_;
  std::chrono::microseconds watchdog_period_{0};
  std::unique_ptr<upstream_check> upstream_;
  bool ready_notified_ = false;
  bool plan_from_process_ = false;  // the plan's settings came from a running target
  bool exit_pending_ = false;
  // For the Restart record: what PID 1 said (empty: not asked) and why a SIGTERM is passed on.
  std::string system_state_;
  std::string forward_why_;
  std::optional<shim_outcome> outcome_;
};

}  // namespace shim
