#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "backoff.hpp"
#include "bus_link.hpp"
#include "child_process.hpp"
#include "config.hpp"
#include "event_log.hpp"
#include "inhibit_delay_ensurer.hpp"
#include "logind_inhibitor.hpp"
#include "readiness_server.hpp"
#include "sequence_runner.hpp"
#include "shim_status.hpp"
#include "signal_record.hpp"
#include "systemd_manager.hpp"
#include "target.hpp"
#include "upstream_check.hpp"

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
  void settled();
  void forward_signal();
  void signal_child();
  enum class signal_sender { shim, kubelet };
  void signal_attached(signal_sender sender);
  void watch_attached(process_handle process);

  // The target check (attach mode): every target process found is watched through its pidfd,
  // whether or not a shutdown is under way; while none runs that did not have the signal, the
  // target is looked for with capped backoff.
  bool attach_target() const { return cfg_.target.any() && !cfg_.target.wrapper(); }
  bool looking_for_target() const;
  bool target_counts() const;
  void look_for_target();
  void arm_target_search(backoff::duration delay);
  void watch_for_target();
  void watch_present(process_handle process);
  void target_found();
  void on_present_exit(pid_t pid);
  void target_signalled();

  // The upstream check.
  void start_upstream();
  void ask_system_state();
  void request_exit();
  void remember_shutdown(const seq::action& unready);
  void forget_shutdown();
  void save_record();

  // What the edges report.
  void on_prepare_for_shutdown(bool active, const std::string& cause);
  void on_preparing_read(bool preparing);
  void on_lock_changed(logind_inhibitor::lock_state state, const std::string& detail);
  void on_first_attempt(const result<>& outcome);
  void on_inhibit_delay(std::uint64_t usec);
  void on_delay_locks(const std::vector<logind_inhibitor::listed_lock>& locks);
  void read_kubelet_files();
  void kubelet_changed();
  void on_bus_lost(const std::string& why);
  void on_trigger_signal(int signal);
  void on_stray_signal(int signal);
  void on_child_exit(int code);

  void record_previous_shutdown();
  void start_bus();
  void start_child();
  void install_signal_handlers();
  void wait_for_triggers();
  void wait_for_strays();
  void notify_status();
  void start_watchdog();
  void ping_watchdog();
  void finish(shim_outcome outcome);
  std::string target_description() const;
  std::string child_name() const;

  boost::asio::io_context& io_;
  const config& cfg_;
  logger& log_;
  event_recorder& events_;
  shim_status status_;
  sequence_runner runner_;
  readiness_server server_;

  // The system bus: absent with --inhibit=off.
  std::unique_ptr<bus_link> bus_;
  std::unique_ptr<logind_inhibitor> inhibitor_;
  std::unique_ptr<systemd_manager> manager_;
  std::unique_ptr<inhibit_delay_ensurer> ensurer_;
  bool bus_was_lost_ = false;
  bool first_attempt_done_ = false;
  bool locks_listed_ = false;  // logind's locks were listed at least once (on_delay_locks)

  // The target: the child (wrapper mode), or processes found in attach mode.
  std::unique_ptr<child_process> child_;
  bool child_signalled_ = false;
  exit_watcher watcher_;
  std::set<pid_t> signalled_;  // attach targets signalled and not yet exited
  struct present_process {
    process_identity identity;
    std::string name;  // /proc/PID/comm when found
  };
  std::map<pid_t, present_process> present_;  // attach targets found and not yet exited
  bool target_searching_ = false;             // target_timer_ will call watch_for_target()
  bool target_seen_ = false;                  // a target has run since the start
  signal_record record_;
  shutdown_record shutdown_;  // what record_ holds
  bool resumable_ = false;    // shutdown_ came from an earlier run, with a shutdown under way

  boost::asio::signal_set triggers_;  // SIGTERM, SIGINT: the shutdown sequence
  boost::asio::signal_set strays_;    // everything else that would kill or stop the shim
  boost::asio::steady_timer hold_timer_;
  boost::asio::steady_timer target_timer_;
  boost::asio::steady_timer watchdog_timer_;
  std::chrono::microseconds watchdog_period_{0};
  backoff target_backoff_{std::chrono::milliseconds(100), std::chrono::seconds(5)};
  std::unique_ptr<upstream_check> upstream_;
  std::string kubelet_said_;  // the kubelet summary last logged
  bool ready_notified_ = false;
  bool exit_pending_ = false;
  std::optional<shim_outcome> outcome_;
};

}  // namespace shim
