#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <csignal>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "core/shutdown_sequence.hpp"
#include "log/event_recorder.hpp"
#include "log/logger.hpp"
#include "process/child_process.hpp"
#include "process/kubelet_handoff.hpp"
#include "process/signal_record.hpp"
#include "process/target.hpp"
#include "process/target_events.hpp"
#include "process/target_row.hpp"
#include "process/target_spec.hpp"
#include "util/backoff.hpp"
#include "util/result.hpp"

namespace shim {

// What --target-* or the wrapped command name, for log lines: "pid 812", "child kube-apiserver".
std::string describe_target(const target_spec& spec);

// The target edge: the wrapped child, or the processes found in attach mode, each watched through
// its pidfd; the search for them; the one signal; and the record of signalled processes that
// keeps a restarted shim from sending a second. It writes the target row of the readiness table
// (and the count of signals sent) and reports what the state machine must hear through
// target_events.
//
// Attach mode: every target process found is watched whether or not a shutdown is under way;
// while none runs that did not have the signal, it is looked for with capped backoff, during a
// hold too once every target process has exited (kubelet restarts kube-apiserver's container).
class target_watch {
 public:
  // What the record of an earlier run says of a shutdown under way (resume()).
  struct resumed {
    shutdown_sequence::resumed_hold hold;  // its timing is the caller's to give
    bool unsignalled_running = false;      // a target process it did not signal runs
  };

  struct settings {
    target_spec target;
    int signal = SIGTERM;
    std::string state_dir;  // where the record of signalled processes is kept
  };

  target_watch(boost::asio::io_context& io, settings s, logger& log, event_recorder& events,
               target_row& row, const shutdown_sequence& sequence, target_events& on);
  target_watch(const target_watch&) = delete;
  target_watch& operator=(const target_watch&) = delete;

  // Reads the record of signalled processes, then (attach mode) starts looking for the target:
  // what the record says was signalled never counts as the target.
  void start();
  // Wrapper mode: starts the command, once. A failure is child_process's error (fork, exec): a
  // caller at start-up throws it on, one on the loop logs it.
  result<> start_child();
  void stop();

  // The shutdown is under way according to the record of an earlier run (start() read it).
  bool resumable() const { return resumable_; }
  // The processes the earlier run signalled that still run are watched again; a target process it
  // did not signal (kubelet restarted it meanwhile) is the sequence's to signal (target_started).
  resumed resume();
  void remember_shutdown(shutdown_sequence::time_point unready_at, const std::string& cause);
  void forget_shutdown();

  // The shim's one signal to the target (forward_signal), or with kubelet none sent and kubelet's
  // counted as the one (count_kubelet_signal).
  void forward_signal(const std::optional<kubelet_handoff>& kubelet = std::nullopt);
  // Target processes this shutdown has not met yet (kubelet restarted kube-apiserver): the shim's
  // one signal to them, or with kubelet theirs left to kubelet. One that had the signal, or was
  // left to kubelet, is never signalled again.
  void signal_restarted(const std::optional<kubelet_handoff>& kubelet = std::nullopt);
  // The sequence asks for a target again (watch_target), or settled out of a drain.
  void look_for_target();
  void settled();

  // Attach-mode processes that had the signal and have not exited, for ShutdownResumed.
  const std::set<pid_t>& signalled() const { return signalled_; }
  // Wrapper mode: the child, once started.
  const child_process* child() const { return child_.get(); }
  // Passes a signal on to a running child (a failure to send is logged); false when there is none.
  bool pass_on(int signal);
  // As PID 1: reaps the orphans that SIGCHLD announces.
  void reap_orphans();

 private:
  // Which processes a signal goes to: every target not signalled yet (a process left to kubelet
  // taken back by the shim), or only those the record does not know (restarted ones).
  enum class signal_scope { owed, new_only };
  bool attach() const { return settings_.target.any() && !settings_.target.wrapper(); }
  bool looking() const;
  bool target_counts() const;
  void signal_child();
  void signal_attached(const std::optional<kubelet_handoff>& kubelet, signal_scope scope);
  void read_command_line(pid_t pid);
  result<> watch_signalled(process_handle process);
  void arm_search(backoff::duration delay);
  void search();
  result<> watch_present(process_handle process);
  void target_found();
  void on_present_exit(pid_t pid);
  void after_signal();
  void on_child_exit(int code);
  void save_record();
  std::string child_name() const;

  boost::asio::io_context& io_;
  const settings settings_;
  logger& log_;
  event_recorder& events_;
  target_row& row_;
  const shutdown_sequence& sequence_;
  target_events& on_;

  std::unique_ptr<child_process> child_;
  bool child_signalled_ = false;
  exit_watcher watcher_;
  std::set<pid_t> signalled_;  // attach targets signalled and not yet exited
  struct present_process {
    process_identity identity;
    std::string name;  // /proc/PID/comm when found
  };
  std::map<pid_t, present_process> present_;  // attach targets found and not yet exited
  bool searching_ = false;                    // timer_ will call search()
  bool seen_ = false;                         // a target has run since the start
  signal_record record_;
  shutdown_record shutdown_;  // what record_ holds
  bool resumable_ = false;    // shutdown_ came from an earlier run, with a shutdown under way
  boost::asio::steady_timer timer_;
  backoff backoff_{std::chrono::milliseconds(100), std::chrono::seconds(5)};
  // During a hold, once the target has exited, kubelet starts it again within about a second, and
  // the new one must have its signal before it serves: the search is capped tighter there, for at
  // most the hold's bound.
  backoff hold_backoff_{std::chrono::milliseconds(100), std::chrono::milliseconds(250)};
};

}  // namespace shim
