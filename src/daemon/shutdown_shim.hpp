#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "control/control_desk.hpp"
#include "core/sequence_runner.hpp"
#include "daemon/hold_recorder.hpp"
#include "daemon/signal_planner.hpp"
#include "daemon/signal_watch.hpp"
#include "daemon/systemd_notifier.hpp"
#include "http/readiness_server.hpp"
#include "kubelet/kubelet_watch.hpp"
#include "lb/load_balancer_watch.hpp"
#include "logind/logind_edge.hpp"
#include "process/target_watch.hpp"
#include "readiness/shim_status.hpp"
#include "upstream/upstream_check.hpp"
#include "util/claimed_directory.hpp"

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

// The daemon: the shutdown_sequence state machine (through sequence_runner) and its edges, all on
// one io_context. It builds the edges, hears them through their event interfaces, and turns each
// action of the sequence into a call on the edge that carries it out.
class shutdown_shim final : logind_events, target_events, kubelet_events, signal_events {
 public:
  shutdown_shim(boost::asio::io_context& io, const config& cfg, logger& log,
                event_recorder& events);
  ~shutdown_shim();
  shutdown_shim(const shutdown_shim&) = delete;
  shutdown_shim& operator=(const shutdown_shim&) = delete;

  // Claims the state directory, binds the listeners, starts the child (wrapper mode) and the bus,
  // installs the signal handlers. Throws when something cannot be started: a state directory root
  // may not trust, or one another shim holds, is such a thing (the one-signal rule rests on it).
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
  void request_exit();
  void feed_trigger(seq::trigger_kind kind, const std::string& cause,
                    seq::forward_decision decision);

  // The edges' events.
  void prepare_for_shutdown(bool active, const std::string& cause) override;
  void preparing_read(bool preparing) override;
  void first_attempt_done(const result<>& outcome) override;
  void system_state_read(const result<std::string>& read) override;
  void delay_locks_listed(const std::vector<logind_inhibitor::listed_lock>& locks) override;
  void ensure_failed(const std::string& error) override;
  void row_changed() override;
  void target_exited(const std::string& detail) override;
  void target_missed(const std::string& why) override;
  void target_running_again() override;
  void target_started() override;
  void child_exited(int exit_code) override;
  void target_command_line(const std::vector<std::string>& argv,
                           const std::string& source) override;
  void kubelet_gone() override;
  void kubelet_changed() override;
  void trigger_signal(int signal) override;
  void stray_signal(int signal, bool own) override;

  void finish(shim_outcome outcome);

  boost::asio::io_context& io_;
  const config& cfg_;
  logger& log_;
  event_recorder& events_;
  std::optional<claimed_directory> state_dir_;  // claimed first in start()
  shim_status status_;
  sequence_runner runner_;
  load_balancer_watch lb_;
  readiness_server server_;
  systemd_notifier notifier_;
  std::unique_ptr<logind_edge> logind_;  // absent with --inhibit=off
  control_desk control_;
  kubelet_watch kubelet_;
  target_watch target_;
  signal_watch signals_;
  signal_planner planner_;
  hold_recorder records_;
  std::unique_ptr<upstream_check> upstream_;
  boost::asio::steady_timer hold_timer_;
  bool exit_pending_ = false;
  std::optional<shim_outcome> outcome_;
};

}  // namespace shim
