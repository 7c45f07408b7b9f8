#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "core/hold_phase.hpp"
#include "log/event_kind.hpp"

namespace shim {

// The shutdown sequence as a pure state machine: inputs carry the time, outputs are actions for the
// edges to carry out. No I/O and no clock of its own, so every ordering of trigger, cancel, target
// exit and timers can be tested with a fake clock. Inputs must arrive one at a time, never from
// inside the carrying out of its own actions (sequence_runner sees to that).
//
// The hold ends at the later of (unready + drain-delay) and (target exit), but no later than
// unready + drain-delay + exit-timeout (a shutdown that took over a drill with the drain served:
// its start + exit-timeout), and never before the signal was forwarded.
//
// State: a phase, plus what is known about the current shutdown. Only `holding` uses all of it:
//   decision_      pending until the forwarding of a shim SIGTERM is decided (ask_system_state)
//   timing_        who signals this shutdown and when (signal_plan, at the trigger)
//   kubelet_signals_ kubelet sends this shutdown's signal: count_kubelet_signal, at once, instead
//                  of forward_signal after the signal delay; cleared when kubelet goes first
//   signal_sent_   the forward_signal (count_kubelet_signal) action was given (or, resumed, an
//                  earlier run sent it)
//   signal_missed_ ...but no target was there to get it (no_target)
//   drain_elapsed_ unready + drain-delay has passed
//   target_gone_   every target has exited (or there never was one)
//   stop_requested_ the shim itself was asked to stop: it exits once the hold is over
//
// Transitions (phase x input -> actions; "advance" releases once signal, drain and exit allow):
//   idle         trigger          -> become_unready, [notify_stopping], forward decision; holding
//                                    (a shim SIGTERM: ShutdownInitiated only if it is passed on,
//                                    else Restart; asking PID 1, the record waits for its answer)
//   idle         resume           -> become_unready (ShutdownResumed); holding, signal counted
//                                    (or, not sent yet by the earlier run, still to come at its
//                                    time from the recorded unready moment)
//   idle         cancel           -> retake_inhibitor
//   idle         target_exited    -> wrapper only: become_unready, exit; released
//   holding      trigger (again)  -> note (never a second signal); a signal: notify_stopping
//   holding      system_state     -> forward, or skip: release_inhibitor, exit; released
//   holding      kubelet_gone     -> kubelet counted, the target not gone: before kubelet's SIGTERM
//                                    time (+ its path to the runtime) forward_signal at once (the
//                                    shim's one signal), after it none (kubelet's went);
//                                    KubeletGone
//   holding      target_started   -> after the signal: a target that did not have it runs again;
//                                    signal_restarted (before kubelet's SIGTERM time:
//                                    leave_restarted_to_kubelet), and the hold waits for it as for
//                                    the first
//   holding      timer/exit/none  -> advance: forward_signal at the timing's signal delay (or
//                                    count_kubelet_signal at once),
//                                    DrainElapsed, release_inhibitor
//                                    [, exit]; released
//   holding      cancel           -> ShutdownCancelled, retake_inhibitor, then: nothing signalled
//                                    (or no target at all) -> become_ready, idle; signalled ->
//                                    watch_target (wrapper: exit with the child), awaiting_target
//   released     cancel           -> as holding (a logind that forgot the shutdown says so too)
//   released     trigger (signal) -> exit
//   awaiting     target_running   -> become_ready; idle
//   awaiting     trigger          -> as idle
//   idle         drill            -> start_drill (DrillStarted), arm_timer; drilling
//   drilling     timer (the end)  -> end_drill (DrillEnded, completed), become_ready; idle
//   drilling     stop_drill       -> end_drill (DrillEnded, stopped), cancel_timer, become_ready;
//                                    idle
//   drilling     trigger          -> end_drill (DrillEnded, shutdown), then as idle, with the
//                                    drain counted from the drill's start (the time already
//                                    served counts)
//   drilling     target_exited    -> wrapper only: end_drill, then as idle
//   drilling     cancel           -> as idle (there is no shutdown to cancel)
//   other        drill            -> nothing (drill_refusal() says why, for the caller to answer)
// A drill is a shutdown's drain without the shutdown: unready for the load balancer, no signal, the
// lock kept, ready again at its end (issue 23).
// A cancel is ignored once the shim itself was asked to stop. exit is the last action ever given.
class shutdown_sequence {
 public:
  using clock = std::chrono::steady_clock;
  using time_point = clock::time_point;
  using duration = clock::duration;

  struct settings {
    duration drain_delay{};
    duration exit_timeout{};
    bool has_target = false;  // with none, the shim only flips readiness and holds
    bool wrapper = false;     // the target is the shim's child: its exit ends the shim
  };

  enum class trigger_kind { prepare_for_shutdown, sigterm, sigint };

  // Whether a shim SIGTERM/SIGINT is passed on to the target. PrepareForShutdown always is, by
  // the shim or, when kubelet's graceful node shutdown stops the target at the start of the
  // shutdown, by kubelet (kubelet_signals: the shim holds and counts kubelet's signal as its own).
  enum class forward_decision { forward, skip, ask_system_state, kubelet_signals };
  struct forwarding {
    forward_decision decision;
    std::string why;  // for the log
  };
  // --forward-on-sigterm applied: always (forced true), never (forced false), or auto (none):
  // auto forwards in wrapper mode (the shim's stop is the container's), asks PID 1 in attach mode,
  // and skips when logind is not used (--inhibit=off: there is no bus to ask).
  static forwarding sigterm_forwarding(std::optional<bool> forced, bool wrapper, bool uses_bus);

  // Who sends a shutdown's signal and when, as the daemon plans it at the trigger (signal_plan:
  // from kube-apiserver's own shutdown delay, or --signal-delay; issue 32).
  struct signal_timing {
    forward_decision decision = forward_decision::forward;
    duration signal_delay{};  // the shim's signal, this long after the unready moment
    // kubelet_signals: kubelet's SIGTERM comes by then. Its lock gone earlier is a kubelet that did
    // not send it; gone later, one that did (it closes its lock when its last group's timer fires,
    // before the runtime's SIGKILL lands).
    duration kubelet_by{};
  };
  // kubelet's path from its group's turn to the runtime's kill (pod worker, CRI StopContainer):
  // its SIGTERM may reach the target this long after kubelet_by.
  static constexpr std::chrono::seconds kKubeletSignalPath{1};

  // What the record of an earlier run says of the shutdown it held (resume()).
  struct resumed_hold {
    time_point unready_at{};
    std::string cause;
    bool target_running = false;   // a target process runs, signalled or not
    bool signalled = true;         // the earlier run sent its signal, or counted kubelet's
    bool left_to_kubelet = false;  // ...kubelet's, so that kubelet_gone() still gives the shim's
    signal_timing timing{};        // for a signal still to come, and kubelet's time
  };

  struct action {
    enum class kind {
      become_unready,        // message: why; event: ShutdownInitiated, ShutdownResumed, Restart
                             // (a shim SIGTERM not passed on by policy), or none while PID 1's
                             // answer is awaited (record_start follows); at: the moment the drain
                             // is counted from
      become_ready,          // a cancelled shutdown is over
      notify_stopping,       // sd_notify STOPPING=1: the shim was asked to stop and will exit
      ask_system_state,      // is PID 1's manager stopping? answer with system_state()
      forward_signal,        // resolve the target now and send it the signal
      count_kubelet_signal,  // resolve the target now and count it as signalled, by kubelet
      signal_restarted,      // send the one signal to targets that had none (never to one that
                             // had it or was left to kubelet)
      leave_restarted_to_kubelet,  // count kubelet's signal for targets that had none
      watch_target,  // re-resolve until a target runs again, then call target_running()
      arm_timer,     // at: call timer_expired() then; replaces the previous timer
      cancel_timer,
      release_inhibitor,  // close the lock fd; message: why, when no shutdown goes on (a SIGTERM
                          // not passed on), else empty; cause: the shutdown's
      retake_inhibitor,   // take the lock again if it is not held
      exit,               // the shim's work is done (wrapper: exit once the child has exited)
      note,               // a log line, with event when it is a lifecycle event
      record_start,       // the record become_unready left to PID 1's answer: event
                          // ShutdownInitiated (recorded as become_unready's would be) or Restart;
                          // at: the unready moment; cause: the signal
      start_drill,        // unready for a drill (event DrillStarted); at: its start; cause: who
                          // asked
      end_drill,          // the drill is over (event DrillEnded); at: its start; cause: how it
                          // ended (completed, stopped, shutdown, target exited)
    };
    kind what;
    std::string message;
    std::optional<event_kind> event;
    time_point at{};
    std::string cause;  // become_unready, release_inhibitor: what started the shutdown

    friend bool operator==(const action&, const action&) = default;
  };
  using actions = std::vector<action>;

  explicit shutdown_sequence(settings s) : settings_(s) {}

  actions trigger(time_point now, trigger_kind kind, const std::string& cause,
                  const signal_timing& timing);
  actions system_state(time_point now, bool stopping, const std::string& state);
  // A restarted shim finds the shutdown it held still under way (its state file and logind's
  // PreparingForShutdown): hold on from the recorded unready moment, without a second signal; a
  // signal the earlier run had not sent yet goes at its time.
  actions resume(time_point now, const resumed_hold& hold);
  actions cancel(const std::string& cause);
  // The forward_signal action found no target (none running, or all had exited).
  actions no_target(time_point now, const std::string& why);
  // Every target process has exited.
  actions target_exited(time_point now, const std::string& detail);
  actions target_running();
  // During a hold, a target process that did not have this shutdown's signal runs (kubelet
  // restarted kube-apiserver; the edge found it). Once the signal time has passed it gets its one
  // signal at once, so that it never turns ready behind the load balancer, and the hold waits for
  // it as for the first, within the same bound.
  actions target_started(time_point now);
  actions timer_expired(time_point now);
  // The kubelet that was to send this hold's signal is gone (its lock went and its process is not
  // known to run). When the target still runs: before kubelet's SIGTERM time (+ its path to the
  // runtime) kubelet did not send it (it crashed, was stopped), so the shim sends its own at once;
  // after it, kubelet's went (kubelet closes its lock when its last group's timer fires, before the
  // runtime's SIGKILL lands): none (issue 32).
  actions kubelet_gone(time_point now);

  // A drill (issue 23): unready for `length` as at a shutdown, nothing else. Only from idle; the
  // caller asks drill_refusal() first and answers with it.
  actions drill(time_point now, duration length, const std::string& cause);
  actions stop_drill(const std::string& cause);
  // Why a drill cannot start now; none when it can.
  std::optional<std::string> drill_refusal() const;
  bool holding() const { return phase_ == phase_kind::holding; }
  bool signal_sent() const { return signal_sent_; }
  // What started the shutdown under way ("PrepareForShutdown(true) from :1.3", "SIGTERM").
  std::string cause() const;
  // The phase, its cause and its moments: what every view of the shim shows.
  hold_phase phase() const;

 private:
  using phase_kind = hold_phase::kind;
  enum class decision_state { pending, forward, skip };

  // since: the moment the drain is counted from (now, or a drill's start).
  void start(time_point now, time_point since, trigger_kind kind, const std::string& cause,
             const signal_timing& timing, actions& out);
  void decide(bool forward, const std::string& why, actions& out);
  action record_start(std::string message, event_kind event) const;
  void advance(time_point now, actions& out);
  void update_timer(actions& out);
  void disarm(actions& out);  // cancel_timer, when one is armed
  void request_exit(actions& out);
  void end_drill(const std::string& how, actions& out);
  std::optional<time_point> next_deadline() const;
  time_point hard_deadline() const;

  settings settings_;
  phase_kind phase_ = phase_kind::idle;
  time_point unready_at_{};
  decision_state decision_ = decision_state::pending;
  bool stop_requested_ = false;  // the shim itself was asked to stop (SIGTERM/SIGINT)
  bool kubelet_signals_ = false;
  bool signal_sent_ = false;
  bool signal_missed_ = false;
  signal_timing timing_;
  bool drain_elapsed_ = false;
  bool target_gone_ = false;
  bool exit_requested_ = false;
  bool record_pending_ = false;  // become_unready gave no event: record_start at the decision
  std::string cause_;            // what started the current shutdown (or restart, or drill)
  std::optional<time_point> armed_;
  time_point exit_timeout_from_{};  // the hold ends by this + exit-timeout
  time_point drill_end_{};          // drilling: unready_at_ is the drill's start
};

}  // namespace shim
