#include "core/shutdown_sequence.hpp"

#include <algorithm>

// Every deadline is a saturating_add: the end of time rather than an overflow (a resumed
// unready_at comes from a file).
#include "util/saturating.hpp"

namespace shim {

namespace {

using action = shutdown_sequence::action;
using kind = action::kind;

action make(kind what, std::string message = {}) {
  return action{what, std::move(message), {}, {}, {}};
}

action note(std::string message, std::optional<event_kind> event = std::nullopt) {
  return action{kind::note, std::move(message), event, {}, {}};
}

action unready(std::string message, std::string cause, shutdown_sequence::time_point now,
               std::optional<event_kind> event = event_kind::ShutdownInitiated) {
  return action{kind::become_unready, std::move(message), event, now, std::move(cause)};
}

// What a SIGTERM that is not passed on does, and why: the shim stops, nothing is shutting down.
std::string stop_without_signal(const std::string& why) {
  return "stopping without signalling the target: " + why;
}

}  // namespace

shutdown_sequence::forwarding shutdown_sequence::sigterm_forwarding(std::optional<bool> forced,
                                                                    bool wrapper, bool uses_bus) {
  if (forced) {
    return *forced ? forwarding{forward_decision::forward, "--forward-on-sigterm=always"}
                   : forwarding{forward_decision::skip, "--forward-on-sigterm=never"};
  }
  if (wrapper) {
    return {forward_decision::forward, "wrapper mode: the shim's stop is the container's stop"};
  }
  if (!uses_bus) {
    return {forward_decision::skip,
            "--inhibit=off: PID 1 cannot be asked, so the stop is taken for the shim's alone"};
  }
  return {forward_decision::ask_system_state,
          "attach mode: forwarding only if PID 1's manager is stopping"};
}

shutdown_sequence::actions shutdown_sequence::trigger(time_point now, trigger_kind kind,
                                                      const std::string& cause,
                                                      const signal_timing& timing) {
  actions out;
  const bool from_signal = kind != trigger_kind::prepare_for_shutdown;
  if (phase_ == phase_kind::drilling) {
    // The drill becomes the shutdown: the load balancer has been draining the node since the
    // drill began, so the drain is counted from then.
    const time_point since = unready_at_;
    end_drill("shutdown", out);
    start(now, since, kind, cause, timing, out);
  } else if (phase_ == phase_kind::idle || phase_ == phase_kind::awaiting_target) {
    start(now, now, kind, cause, timing, out);
  } else {
    // One signal per shutdown: later triggers are logged, never forwarded again.
    out.push_back(note(cause + " while already shutting down: not forwarding again"));
    if (from_signal && !stop_requested_) {
      stop_requested_ = true;
      out.push_back(make(kind::notify_stopping));
    }
    if (decision_ == decision_state::pending && !from_signal) {
      decide(true, "PrepareForShutdown shows the system is going down", out);
    }
    if (phase_ == phase_kind::released && from_signal) request_exit(out);
  }
  advance(now, out);
  return out;
}

void shutdown_sequence::start(time_point now, time_point since, trigger_kind kind,
                              const std::string& cause, const signal_timing& timing, actions& out) {
  const forward_decision decision = timing.decision;
  phase_ = phase_kind::holding;
  timing_ = timing;
  unready_at_ = since;
  // A shutdown that takes over a drill may find the drain served: the target still gets its
  // exit-timeout from now, when its signal goes (ShutdownSequence.AShutdownAfterTheDrainServed...).
  exit_timeout_from_ = std::max(saturating_add(since, settings_.drain_delay), now);
  stop_requested_ = kind != trigger_kind::prepare_for_shutdown;
  signal_sent_ = false;
  signal_missed_ = false;
  drain_elapsed_ = false;
  target_gone_ = !settings_.has_target;
  decision_ = decision_state::pending;
  kubelet_signals_ = decision == forward_decision::kubelet_signals;
  cause_ = cause;
  // Whether this is a shutdown or the shim's own restart waits for PID 1's answer: so does the
  // record (record_start), lest every restart read as a shutdown (issue 22).
  record_pending_ = decision == forward_decision::ask_system_state;

  // Words for what is known now: a SIGTERM that is not passed on stops the shim and holds no
  // reboot; whether one is asked of PID 1 is said once it answers (decide()).
  std::string words = "received " + cause + ", becoming unready";
  if (since < now) words = "received " + cause + " during a drill, unready since its start";
  switch (decision) {
    case forward_decision::forward:
      words += ", keeping the reboot on hold";
      break;
    case forward_decision::kubelet_signals:
      words += ", keeping the reboot on hold; kubelet sends the target its signal, the shim none";
      break;
    case forward_decision::skip:
      words += ", " + stop_without_signal(cause + " is not passed on by policy");
      break;
    case forward_decision::ask_system_state:
      words += "; asking PID 1 whether the system is shutting down";
      break;
  }
  const std::optional<event_kind> event = decision == forward_decision::skip
                                              ? std::optional(event_kind::Restart)
                                          : decision == forward_decision::ask_system_state
                                              ? std::nullopt
                                              : std::optional(event_kind::ShutdownInitiated);
  out.push_back(unready(words, cause, since, event));
  // STOPPING=1 only when the shim itself is going to exit: after PrepareForShutdown it stays up,
  // and systemd would take STOPPING=1 as the start of its stop and SIGKILL it TimeoutStopSec
  // later, holding the reboot that long (seen in the VM test).
  if (stop_requested_) out.push_back(make(kind::notify_stopping));
  switch (decision) {
    case forward_decision::forward:
    case forward_decision::kubelet_signals:
      decide(true, cause, out);
      break;
    case forward_decision::skip:
      decide(false, cause + " is not passed on by policy", out);
      break;
    case forward_decision::ask_system_state:
      out.push_back(make(kind::ask_system_state));
      break;
  }
}

void shutdown_sequence::decide(bool forward, const std::string& why, actions& out) {
  const bool record = record_pending_;
  record_pending_ = false;
  if (forward) {
    decision_ = decision_state::forward;
    if (record) {
      out.push_back(record_start("received " + cause_ + ", keeping the reboot on hold: " + why,
                                 event_kind::ShutdownInitiated));
    }
    return;
  }
  // Not our shutdown (a restart of the shim, or kubelet stopping the pod, which signals the
  // apiserver itself): let go at once rather than hold anything.
  decision_ = decision_state::skip;
  const std::string words = stop_without_signal(why);
  out.push_back(record ? record_start(words, event_kind::Restart) : note(words));
  phase_ = phase_kind::released;
  disarm(out);
  out.push_back(action{kind::release_inhibitor, words, {}, {}, cause_});
  request_exit(out);
}

shutdown_sequence::actions shutdown_sequence::system_state(time_point now, bool stopping,
                                                           const std::string& state) {
  actions out;
  if (phase_ != phase_kind::holding || decision_ != decision_state::pending) return out;
  if (stopping) {
    decide(true, "the system is going down (SystemState=" + state + ")", out);
  } else {
    decide(false, "the system is not shutting down (SystemState=" + state + ")", out);
  }
  advance(now, out);
  return out;
}

shutdown_sequence::actions shutdown_sequence::resume(time_point now, const resumed_hold& hold) {
  actions out;
  if (phase_ == phase_kind::drilling) end_drill("shutdown", out);
  if (phase_ != phase_kind::idle && phase_ != phase_kind::awaiting_target) return out;
  phase_ = phase_kind::holding;
  timing_ = hold.timing;
  unready_at_ = std::min(hold.unready_at, now);
  exit_timeout_from_ = saturating_add(unready_at_, settings_.drain_delay);
  stop_requested_ = false;
  decision_ = decision_state::forward;
  kubelet_signals_ =
      hold.signalled ? hold.left_to_kubelet : timing_.decision == forward_decision::kubelet_signals;
  signal_sent_ = hold.signalled;
  signal_missed_ = false;
  drain_elapsed_ = false;
  target_gone_ = !hold.target_running;
  cause_ = hold.cause;
  out.push_back(
      unready("resuming the hold of a shutdown an earlier run " +
                  std::string(hold.signalled ? "signalled for" : "held, its signal still to come") +
                  " (" + hold.cause + "): no second signal",
              hold.cause, unready_at_, event_kind::ShutdownResumed));
  advance(now, out);
  return out;
}

shutdown_sequence::actions shutdown_sequence::cancel(const std::string& cause) {
  actions out;
  if (phase_ == phase_kind::idle || phase_ == phase_kind::awaiting_target ||
      phase_ == phase_kind::drilling) {
    out.push_back(make(kind::retake_inhibitor));
    return out;
  }
  if (stop_requested_ || decision_ == decision_state::skip) {
    out.push_back(note(cause + ": ignored, the shim itself was asked to stop"));
    return out;
  }
  out.push_back(note(cause + ": the shutdown was cancelled", event_kind::ShutdownCancelled));
  disarm(out);
  out.push_back(make(kind::retake_inhibitor));
  // Without a target nothing was ever signalled, whatever signal_sent_ says (issue 18, item 7).
  if (!signal_sent_ || signal_missed_ || !settings_.has_target) {
    phase_ = phase_kind::idle;
    out.push_back(make(kind::become_ready, !settings_.has_target ? "shutdown cancelled; no target"
                                           : signal_sent_
                                               ? "shutdown cancelled; no target had the signal"
                                               : "shutdown cancelled before the signal"));
  } else if (settings_.wrapper) {
    // The child had its signal and will exit; the shim exits with it.
    phase_ = phase_kind::awaiting_target;
    if (target_gone_) request_exit(out);
  } else {
    phase_ = phase_kind::awaiting_target;
    out.push_back(make(kind::watch_target));
  }
  return out;
}

shutdown_sequence::actions shutdown_sequence::no_target(time_point now, const std::string& why) {
  actions out;
  if (phase_ != phase_kind::holding || !signal_sent_) return out;
  signal_missed_ = true;
  out.push_back(note("no target had the signal: " + why));
  target_gone_ = true;
  advance(now, out);
  return out;
}

shutdown_sequence::actions shutdown_sequence::target_exited(time_point now,
                                                            const std::string& detail) {
  actions out;
  switch (phase_) {
    case phase_kind::drilling:
      if (!settings_.wrapper) break;
      end_drill("target exited", out);
      [[fallthrough]];
    case phase_kind::idle:
      if (settings_.wrapper) {
        // The child ended on its own: nothing left to serve, so stop being ready and leave.
        phase_ = phase_kind::released;
        unready_at_ = now;
        exit_timeout_from_ = now;
        target_gone_ = true;
        out.push_back(unready(detail + " on its own, becoming unready", detail, now));
        request_exit(out);
      }
      break;
    case phase_kind::holding:
      target_gone_ = true;
      advance(now, out);
      break;
    case phase_kind::released:
    case phase_kind::awaiting_target:
      target_gone_ = true;
      if (settings_.wrapper) request_exit(out);
      break;
  }
  return out;
}

shutdown_sequence::actions shutdown_sequence::target_running() {
  actions out;
  if (phase_ != phase_kind::awaiting_target) return out;
  phase_ = phase_kind::idle;
  out.push_back(make(kind::become_ready, "a target is running again"));
  return out;
}

shutdown_sequence::actions shutdown_sequence::target_started(time_point now) {
  actions out;
  // Before the signal, the signal finds it at its time; after the hold, the reboot is under way.
  if (phase_ != phase_kind::holding || !signal_sent_ || !settings_.has_target ||
      settings_.wrapper) {
    return out;
  }
  target_gone_ = false;
  signal_missed_ = false;
  if (kubelet_signals_ && now < saturating_add(unready_at_, timing_.kubelet_by)) {
    // kubelet restarted it before its group's turn, and stops it then, as it stops the first.
    out.push_back(
        note("a target that did not have the signal runs again before kubelet's SIGTERM "
             "time: kubelet sends it its signal, the shim none"));
    out.push_back(make(kind::leave_restarted_to_kubelet));
  } else {
    out.push_back(
        note("a target that did not have the signal runs again during the hold: it gets its one "
             "signal now, and the hold waits for it"));
    out.push_back(make(kind::signal_restarted));
  }
  advance(now, out);
  return out;
}

shutdown_sequence::actions shutdown_sequence::kubelet_gone(time_point now) {
  actions out;
  if (phase_ != phase_kind::holding || !kubelet_signals_ || !signal_sent_ || target_gone_)
    return out;
  const time_point by =
      saturating_add(saturating_add(unready_at_, timing_.kubelet_by), duration(kKubeletSignalPath));
  if (now >= by) {
    // kubelet closes its lock when its last group's timer fires, while the runtime's SIGKILL of a
    // pod of that group is still to land: a lock gone then is kubelet done, not kubelet gone.
    out.push_back(
        note("kubelet went after its SIGTERM time: its signal went; the shim sends none (a second "
             "SIGTERM makes kube-apiserver exit at once)",
             event_kind::KubeletGone));
    return out;
  }
  kubelet_signals_ = false;
  out.push_back(
      note("kubelet went before its SIGTERM time and before the target exited: the shim sends the "
           "signal itself",
           event_kind::KubeletGone));
  out.push_back(make(kind::forward_signal));
  advance(now, out);
  return out;
}

shutdown_sequence::actions shutdown_sequence::timer_expired(time_point now) {
  actions out;
  armed_.reset();
  if (phase_ == phase_kind::drilling) {
    if (now < drill_end_) {
      update_timer(out);
      return out;
    }
    end_drill("completed", out);
    out.push_back(make(kind::become_ready, "the drill is over"));
    return out;
  }
  advance(now, out);
  return out;
}

std::optional<std::string> shutdown_sequence::drill_refusal() const {
  switch (phase_) {
    case phase_kind::idle:
      return std::nullopt;
    case phase_kind::drilling:
      return "a drill is already under way";
    case phase_kind::holding:
    case phase_kind::released:
      return "a shutdown is under way";
    case phase_kind::awaiting_target:
      return "unready after a cancelled shutdown, waiting for a target that did not have the "
             "signal";
  }
  return "unknown state";
}

std::string shutdown_sequence::cause() const {
  hold_phase p = phase();
  return p.draining() ? std::move(p.cause) : std::string();
}

hold_phase shutdown_sequence::phase() const {
  return {.what = phase_,
          .cause = phase_ == phase_kind::idle ? std::string() : cause_,
          .since = unready_at_,
          .ends = drill_end_};
}

shutdown_sequence::actions shutdown_sequence::drill(time_point now, duration length,
                                                    const std::string& cause) {
  actions out;
  if (drill_refusal()) return out;
  phase_ = phase_kind::drilling;
  unready_at_ = now;
  cause_ = cause;
  drill_end_ = saturating_add(now, length);
  out.push_back(action{kind::start_drill,
                       "drill: unready for the load balancer as at a shutdown; "
                       "no signal, the lock is kept",
                       event_kind::DrillStarted, now, cause});
  update_timer(out);
  return out;
}

shutdown_sequence::actions shutdown_sequence::stop_drill(const std::string& cause) {
  actions out;
  if (phase_ != phase_kind::drilling) return out;
  end_drill("stopped", out);
  out.push_back(make(kind::become_ready, "the drill was stopped (" + cause + ")"));
  return out;
}

void shutdown_sequence::end_drill(const std::string& how, actions& out) {
  phase_ = phase_kind::idle;
  disarm(out);
  out.push_back(action{kind::end_drill, "drill " + how, event_kind::DrillEnded, unready_at_, how});
}

shutdown_sequence::action shutdown_sequence::record_start(std::string message,
                                                          event_kind event) const {
  return action{kind::record_start, std::move(message), event, unready_at_, cause_};
}

void shutdown_sequence::disarm(actions& out) {
  if (armed_) out.push_back(make(kind::cancel_timer));
  armed_.reset();
}

void shutdown_sequence::request_exit(actions& out) {
  if (exit_requested_) return;
  exit_requested_ = true;
  out.push_back(make(kind::exit));
}

shutdown_sequence::time_point shutdown_sequence::hard_deadline() const {
  return saturating_add(exit_timeout_from_, settings_.exit_timeout);
}

void shutdown_sequence::advance(time_point now, actions& out) {
  if (phase_ != phase_kind::holding) return;
  // kubelet's signal comes on kubelet's time, not after --signal-delay: counted at once.
  if (!signal_sent_ && decision_ == decision_state::forward &&
      (kubelet_signals_ || now >= saturating_add(unready_at_, timing_.signal_delay))) {
    signal_sent_ = true;
    if (settings_.has_target) {
      out.push_back(make(kubelet_signals_ ? kind::count_kubelet_signal : kind::forward_signal));
    }
  }
  if (!drain_elapsed_ && now >= saturating_add(unready_at_, settings_.drain_delay)) {
    drain_elapsed_ = true;
    out.push_back(note("the drain delay has passed", event_kind::DrainElapsed));
  }
  // forward_signal may find no target; the edge then reports no_target, which comes back here.
  if (signal_sent_ && drain_elapsed_ && (target_gone_ || now >= hard_deadline())) {
    if (!target_gone_) out.push_back(note("exit-timeout passed and the target is still running"));
    phase_ = phase_kind::released;
    disarm(out);
    out.push_back(action{kind::release_inhibitor, {}, {}, {}, cause_});
    if (stop_requested_ || (settings_.wrapper && target_gone_)) request_exit(out);
    return;
  }
  update_timer(out);
}

std::optional<shutdown_sequence::time_point> shutdown_sequence::next_deadline() const {
  if (phase_ == phase_kind::drilling) return drill_end_;
  std::optional<time_point> next;
  auto consider = [&next](time_point t) {
    if (!next || t < *next) next = t;
  };
  if (!signal_sent_ && decision_ == decision_state::forward && !kubelet_signals_) {
    consider(saturating_add(unready_at_, timing_.signal_delay));
  }
  if (!drain_elapsed_) {
    consider(saturating_add(unready_at_, settings_.drain_delay));
  } else if (signal_sent_ && !target_gone_) {
    consider(hard_deadline());
  }
  return next;
}

void shutdown_sequence::update_timer(actions& out) {
  auto next = next_deadline();
  if (next == armed_) return;
  armed_ = next;
  if (next) {
    out.push_back(action{kind::arm_timer, {}, {}, *next, {}});
  } else {
    out.push_back(make(kind::cancel_timer));
  }
}

}  // namespace shim
