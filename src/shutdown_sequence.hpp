#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "event_kind.hpp"

namespace shim {

// The shutdown sequence as a pure state machine: inputs carry the time, outputs are actions for the
// edges to carry out. No I/O and no clock of its own, so every ordering of trigger, cancel, target
// exit and timers can be tested with a fake clock.
//
// The hold ends at the later of (unready + drain-delay) and (target exit), but no later than
// unready + drain-delay + exit-timeout, and never before the signal was forwarded.
class shutdown_sequence {
 public:
  using clock = std::chrono::steady_clock;
  using time_point = clock::time_point;
  using duration = clock::duration;

  struct settings {
    duration drain_delay{};
    duration signal_delay{};
    duration exit_timeout{};
    bool has_target = false;  // with none, the shim only flips readiness and holds
    bool wrapper = false;     // the target is the shim's child: its exit ends the shim
  };

  enum class trigger_kind { prepare_for_shutdown, sigterm, sigint };

  // Whether a shim SIGTERM/SIGINT is passed on to the target. PrepareForShutdown always is.
  enum class forward_decision { forward, skip, ask_system_state };

  struct action {
    enum class kind {
      become_unready,    // message: why (event ShutdownInitiated); at: the moment, which the
                         // drain is counted from
      become_ready,      // a cancelled shutdown is over
      notify_stopping,   // sd_notify STOPPING=1: the shim was asked to stop and will exit
      ask_system_state,  // is PID 1's manager stopping? answer with system_state()
      forward_signal,    // resolve the target now and send it the signal
      watch_target,      // re-resolve until a target runs again, then call target_running()
      arm_timer,         // at: call timer_expired() then; replaces the previous timer
      cancel_timer,
      release_inhibitor,  // close the lock fd
      retake_inhibitor,   // take the lock again if it is not held
      exit,               // the shim's work is done (wrapper: exit once the child has exited)
      note,               // a log line, with event when it is a lifecycle event
    };
    kind what;
    std::string message;
    std::optional<event_kind> event;
    time_point at{};
    std::string cause;  // become_unready: what started the shutdown

    friend bool operator==(const action&, const action&) = default;
  };
  using actions = std::vector<action>;

  explicit shutdown_sequence(settings s) : settings_(s) {}

  actions trigger(time_point now, trigger_kind kind, const std::string& cause,
                  forward_decision decision);
  actions system_state(time_point now, bool stopping, const std::string& state);
  actions cancel(const std::string& cause);
  // Every target process has exited (or, at signal time, none was found).
  actions target_exited(time_point now, const std::string& detail);
  actions target_running();
  actions timer_expired(time_point now);

  // Unready because of a shutdown (not during a wait for the target after a cancel).
  bool draining() const { return phase_ == phase::holding || phase_ == phase::released; }
  bool waiting_for_target() const { return phase_ == phase::awaiting_target; }
  bool holding() const { return phase_ == phase::holding; }
  bool signal_sent() const { return signal_sent_; }
  std::optional<time_point> unready_since() const {
    return draining() ? std::optional(unready_at_) : std::nullopt;
  }

 private:
  enum class phase { idle, holding, released, awaiting_target };
  enum class decision_state { pending, forward, skip };

  void start(time_point now, trigger_kind kind, const std::string& cause, forward_decision decision,
             actions& out);
  void decide(bool forward, const std::string& why, actions& out);
  void advance(time_point now, actions& out);
  void update_timer(actions& out);
  void request_exit(actions& out);
  std::optional<time_point> next_deadline() const;
  time_point hard_deadline() const;

  settings settings_;
  phase phase_ = phase::idle;
  time_point unready_at_{};
  decision_state decision_ = decision_state::pending;
  bool stop_requested_ = false;  // the shim itself was asked to stop (SIGTERM/SIGINT)
  bool signal_sent_ = false;
  bool drain_elapsed_ = false;
  bool target_gone_ = false;
  bool exit_requested_ = false;
  std::optional<time_point> armed_;
};

}  // namespace shim
