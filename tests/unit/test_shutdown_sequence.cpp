#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>

#include "core/shutdown_sequence.hpp"

namespace shim {
namespace {

using namespace std::chrono_literals;
using seq = shutdown_sequence;
using kind = seq::action::kind;
using tp = seq::time_point;

const tp t0 = tp{} + 1000s;

// The edges, faked: carries out actions against a fake clock and remembers what happened.
struct fake_edges {
  // signal_delay: the plan's timing of the shim's signal, given with every trigger.
  explicit fake_edges(seq::settings s, seq::duration signal_delay = {})
      : machine(s), signal_delay(signal_delay) {}
  explicit fake_edges(const struct attach_settings& a);

  seq machine;
  seq::duration signal_delay;
  seq::duration kubelet_by{};  // kubelet's SIGTERM time, with kubelet_signals
  std::optional<tp> timer;
  int signals = 0;
  int kubelet_counts = 0;  // count_kubelet_signal: kubelet sends it, the shim counts it
  int asks = 0;
  int watches = 0;
  std::optional<tp> signal_at;
  std::optional<tp> released_at;
  int releases = 0;
  int retakes = 0;
  int exits = 0;
  int stoppings = 0;
  int readies = 0;
  int unreadies = 0;
  std::vector<event_kind> events;
  std::vector<std::string> unready_messages, notes, release_messages, record_messages;
  std::vector<seq::action> records;  // record_start
  tp now = t0;
  // Signals that reach the target in the current shutdown: the shim's, and kubelet's unless its
  // lock went before the target exited (kubelet_gone stands for a kubelet gone without signalling);
  // the most of them any shutdown saw.
  int shutdown_signals = 0;
  int most_signals = 0;
  bool kubelet_expected = false;
  bool target_gone = false;
  int forwards_after_kubelet_gone = 0;
  int drills = 0;
  // A target restarted during the hold (target_started): the shim's signal to it, or kubelet's.
  int restart_signals = 0;
  int restarts_left_to_kubelet = 0;
  std::optional<tp> drill_started_at;
  std::vector<std::string> drill_endings;  // end_drill's cause: how each drill ended

  void count_signal(int delta) {
    shutdown_signals += delta;
    most_signals = std::max(most_signals, shutdown_signals);
  }

  void apply(const seq::actions& actions) {
    for (const auto& a : actions) {
      if (a.what == kind::become_unready) unready_messages.push_back(a.message);
      if (a.what == kind::note) notes.push_back(a.message);
      if (a.what == kind::release_inhibitor) release_messages.push_back(a.message);
      switch (a.what) {
        case kind::arm_timer:
          EXPECT_GE(a.at, now) << "a timer in the past";
          timer = a.at;
          break;
        case kind::cancel_timer:
          timer.reset();
          break;
        case kind::forward_signal:
          ++signals;
          signal_at = now;
          count_signal(1);
          break;
        case kind::count_kubelet_signal:
          ++kubelet_counts;
          signal_at = now;
          kubelet_expected = true;
          count_signal(1);
          break;
        case kind::signal_restarted:
          ++restart_signals;
          break;
        case kind::leave_restarted_to_kubelet:
          ++restarts_left_to_kubelet;
          break;
        case kind::release_inhibitor:
          ++releases;
          released_at = now;
          break;
        case kind::retake_inhibitor:
          ++retakes;
          break;
        case kind::exit:
          ++exits;
          break;
        case kind::become_ready:
          ++readies;
          break;
        case kind::become_unready:
          ++unreadies;
          if (a.event) events.push_back(*a.event);
          shutdown_signals = 0;
          kubelet_expected = false;
          target_gone = false;
          break;
        case kind::ask_system_state:
          ++asks;
          break;
        case kind::watch_target:
          ++watches;
          break;
        case kind::note:
          if (a.event) events.push_back(*a.event);
          break;
        case kind::record_start:
          events.push_back(a.event.value());
          record_messages.push_back(a.message);
          records.push_back(a);
          break;
        case kind::notify_stopping:
          ++stoppings;
          break;
        case kind::start_drill:
          ++drills;
          events.push_back(a.event.value());
          drill_started_at = a.at;
          break;
        case kind::end_drill:
          events.push_back(a.event.value());
          drill_endings.push_back(a.cause);
          EXPECT_EQ(a.at, drill_started_at) << "DrillEnded names its drill's start";
          break;
      }
    }
  }

  void at(tp t) {
    // Fire every timer due up to t first, as the event loop would.
    while (timer && *timer <= t) {
      now = *timer;
      timer.reset();
      apply(machine.timer_expired(now));
    }
    now = t;
  }
  seq::signal_timing timing(seq::forward_decision d) const {
    return {.decision = d, .signal_delay = signal_delay, .kubelet_by = kubelet_by};
  }
  void prepare_for_shutdown(tp t, seq::forward_decision d = seq::forward_decision::forward) {
    at(t);
    apply(machine.trigger(now, seq::trigger_kind::prepare_for_shutdown, "PrepareForShutdown(true)",
                          timing(d)));
  }
  void sigterm(tp t, seq::forward_decision d = seq::forward_decision::forward) {
    at(t);
    apply(machine.trigger(now, seq::trigger_kind::sigterm, "SIGTERM", timing(d)));
  }
  void cancel(tp t) {
    at(t);
    apply(machine.cancel("PrepareForShutdown(false)"));
  }
  void target_exit(tp t) {
    at(t);
    target_gone = true;
    apply(machine.target_exited(now, "target exited"));
  }
  // kubelet started the target again during the hold: a process without the signal runs.
  void target_started(tp t) {
    at(t);
    target_gone = false;
    apply(machine.target_started(now));
  }
  void no_target(tp t) {
    at(t);
    target_gone = true;
    apply(machine.no_target(now, "no process named kube-apiserver"));
  }
  // The kubelet that was to signal is gone. In this model, before its SIGTERM time (kubelet_by,
  // plus its path to the runtime) it went without signalling; after it, its signal went.
  void kubelet_gone(tp t) {
    at(t);
    const auto phase = machine.phase();
    const bool before_its_time =
        phase.draining() && now < phase.since + kubelet_by + seq::kKubeletSignalPath;
    const bool owed = kubelet_expected && machine.holding() && !target_gone && before_its_time;
    if (kubelet_expected && before_its_time) {
      count_signal(-1);
      kubelet_expected = false;
    }
    const int before = signals;
    apply(machine.kubelet_gone(now));
    if (owed) {
      EXPECT_EQ(signals, before + 1)
          << "kubelet went before its time, the target running: no signal";
      forwards_after_kubelet_gone += signals - before;
    } else {
      EXPECT_EQ(signals, before) << "a signal nobody owed";
    }
  }
  void resume(tp t, tp unready_at, bool target_running, bool left_to_kubelet = false) {
    at(t);
    const int before = unreadies;
    apply(machine.resume(now,
                         {.unready_at = unready_at,
                          .cause = "PrepareForShutdown(true) from :1.3",
                          .target_running = target_running,
                          .left_to_kubelet = left_to_kubelet,
                          .timing = timing(left_to_kubelet ? seq::forward_decision::kubelet_signals
                                                           : seq::forward_decision::forward)}));
    if (unreadies == before) return;
    // The earlier run's signal, or kubelet's that it counted.
    kubelet_expected = left_to_kubelet;
    target_gone = !target_running;
    count_signal(1);
  }
  // `shutdown-shim drill`, as the control socket's edge feeds it: refused drills are not fed.
  bool drill(tp t, seq::duration length) {
    at(t);
    if (machine.drill_refusal()) return false;
    apply(machine.drill(now, length, "shutdown-shim drill"));
    return true;
  }
  void stop_drill(tp t) {
    at(t);
    apply(machine.stop_drill("shutdown-shim drill --stop"));
  }
  void run_timers() {
    while (timer) at(*timer);
  }
};

// The settings and, since issue 32 given with each trigger, the plan's timing of the shim's signal.
struct attach_settings {
  seq::settings settings;
  seq::duration signal_delay;
};
attach_settings attach(std::chrono::seconds drain = 3s, std::chrono::seconds signal = 0s,
                       std::chrono::seconds exit = 5s) {
  return {{.drain_delay = drain, .exit_timeout = exit, .has_target = true}, signal};
}

fake_edges::fake_edges(const attach_settings& a) : fake_edges(a.settings, a.signal_delay) {}

seq::settings wrapper() {
  return {.drain_delay = 3s, .exit_timeout = 5s, .has_target = true, .wrapper = true};
}

TEST(ShutdownSequence, PrepareForShutdownTurnsUnreadyAndSignalsAtOnce) {
  fake_edges e(attach());
  e.prepare_for_shutdown(t0);
  EXPECT_TRUE(e.machine.phase().draining());
  EXPECT_EQ(e.unreadies, 1);
  EXPECT_EQ(e.signals, 1);
  EXPECT_EQ(e.signal_at, t0);
  EXPECT_EQ(e.releases, 0);
  ASSERT_TRUE(e.timer);
  EXPECT_EQ(*e.timer, t0 + 3s);
}

// Issue 13: kubelet's graceful node shutdown stops kube-apiserver at the start of the shutdown.
TEST(ShutdownSequence, KubeletsSignalIsCountedAtOnceAndTheShimSendsNone) {
  fake_edges e(attach(3s, 1s));  // --signal-delay is the shim's timing, not kubelet's
  e.prepare_for_shutdown(t0, seq::forward_decision::kubelet_signals);
  EXPECT_TRUE(e.machine.phase().draining());
  EXPECT_EQ(e.signals, 0) << "the shim must not send a signal of its own";
  EXPECT_EQ(e.kubelet_counts, 1);
  EXPECT_EQ(e.signal_at, t0);
  EXPECT_TRUE(e.machine.signal_sent());
  ASSERT_EQ(e.unready_messages.size(), 1u);
  EXPECT_THAT(e.unready_messages[0], testing::HasSubstr("kubelet sends the target its signal"));
  // Whatever comes next, no signal from the shim.
  e.prepare_for_shutdown(t0 + 500ms);
  e.sigterm(t0 + 1s);
  EXPECT_EQ(e.signals, 0);
  EXPECT_EQ(e.kubelet_counts, 1);
}

TEST(ShutdownSequence, KubeletsSignalHoldsForTheTargetsExitAsTheShimsWould) {
  fake_edges e(attach());
  e.prepare_for_shutdown(t0, seq::forward_decision::kubelet_signals);
  e.at(t0 + 3s);
  EXPECT_EQ(e.releases, 0) << "the target still runs";
  e.target_exit(t0 + 6s);
  EXPECT_EQ(e.released_at, t0 + 6s);
  // A target that was not there: the drain alone, as with the shim's own signal.
  fake_edges none(attach());
  none.prepare_for_shutdown(t0, seq::forward_decision::kubelet_signals);
  none.no_target(t0);
  none.run_timers();
  EXPECT_EQ(none.released_at, t0 + 3s);
}

// Issue 19: kubelet's lock goes while the signal is left to kubelet and the target still runs
// (kubelet crashed, was stopped or gave up before its group's turn): the shim signals at once,
// once, whatever --signal-delay says, and the hold goes on as after its own signal.
// Since issue 32 "before its group's turn" is said by kubelet's SIGTERM time (here its critical
// group's, at +10 s).
TEST(ShutdownSequence, KubeletGoneBeforeTheTargetExitsGivesTheShimsSignalAtOnce) {
  fake_edges e(attach(3s, 1s));
  e.kubelet_by = 10s;
  e.prepare_for_shutdown(t0, seq::forward_decision::kubelet_signals);
  ASSERT_EQ(e.kubelet_counts, 1);
  e.kubelet_gone(t0 + 1500ms);
  EXPECT_EQ(e.signals, 1);
  EXPECT_EQ(e.signal_at, t0 + 1500ms) << "at once, not after --signal-delay";
  EXPECT_THAT(e.notes, testing::Contains(testing::HasSubstr("kubelet went before its SIGTERM")));
  e.kubelet_gone(t0 + 2s);
  e.prepare_for_shutdown(t0 + 2500ms, seq::forward_decision::kubelet_signals);
  e.sigterm(t0 + 2600ms);
  EXPECT_EQ(e.signals, 1) << "one signal per shutdown";
  EXPECT_EQ(e.releases, 0) << "the target still runs";
  e.target_exit(t0 + 6s);
  EXPECT_EQ(e.released_at, t0 + 6s);
}

TEST(ShutdownSequence, KubeletGoneAfterTheTargetExitedOrOutsideAHoldSignalsNothing) {
  fake_edges exited(attach());
  exited.prepare_for_shutdown(t0, seq::forward_decision::kubelet_signals);
  exited.target_exit(t0 + 4s);
  exited.kubelet_gone(t0 + 4100ms);  // kubelet's normal end: its pods are gone
  EXPECT_EQ(exited.signals, 0);

  fake_edges own(attach());  // the shim's own signal: kubelet was never counted
  own.prepare_for_shutdown(t0);
  own.kubelet_gone(t0 + 1s);
  EXPECT_EQ(own.signals, 1);

  fake_edges idle(attach());
  idle.kubelet_gone(t0);
  EXPECT_EQ(idle.signals, 0);
  EXPECT_FALSE(idle.machine.phase().draining());

  fake_edges released(attach());  // the hold is over: the reboot goes on without the shim
  released.prepare_for_shutdown(t0, seq::forward_decision::kubelet_signals);
  released.run_timers();
  ASSERT_EQ(released.releases, 1);
  released.kubelet_gone(t0 + 20s);
  EXPECT_EQ(released.signals, 0);

  fake_edges cancelled(attach());
  cancelled.prepare_for_shutdown(t0, seq::forward_decision::kubelet_signals);
  cancelled.cancel(t0 + 1s);
  cancelled.kubelet_gone(t0 + 2s);
  EXPECT_EQ(cancelled.signals, 0);
}

// A shim restarted while the signal was left to kubelet keeps the duty: kubelet's lock going with
// the target running (before kubelet's SIGTERM time, since issue 32: here its group's turn at
// +10 s) gives its signal; an earlier run's own signal never gives a second one.
TEST(ShutdownSequence, AResumedHoldLeftToKubeletSignalsWhenKubeletGoes) {
  fake_edges left(attach());
  left.kubelet_by = 10s;
  left.resume(t0 + 1s, t0, /*target_running=*/true, /*left_to_kubelet=*/true);
  EXPECT_EQ(left.signals, 0);
  left.kubelet_gone(t0 + 2s);
  EXPECT_EQ(left.signals, 1);
  left.kubelet_gone(t0 + 3s);
  EXPECT_EQ(left.signals, 1);

  fake_edges own(attach());
  own.resume(t0 + 1s, t0, /*target_running=*/true, /*left_to_kubelet=*/false);
  own.kubelet_gone(t0 + 2s);
  EXPECT_EQ(own.signals, 0);
}

// Issue 32: kubelet closes its lock when its last group's timer fires, while the runtime's SIGKILL
// of a pod of that group is still to land. A lock gone after kubelet's SIGTERM time is kubelet
// done, whose signal went: the shim's would be a second one.
TEST(ShutdownSequence, KubeletGoneAfterItsSigtermTimeSendsNoSecondSignal) {
  fake_edges e(attach(3s, 0s, 30s));
  e.kubelet_by = 3s;  // the critical group's turn, after the first group's 3 s
  e.prepare_for_shutdown(t0, seq::forward_decision::kubelet_signals);
  e.kubelet_gone(t0 + 13s);  // the critical group's 10 s timer: the lock goes, the target runs
  EXPECT_EQ(e.signals, 0);
  EXPECT_EQ(e.most_signals, 1) << "kubelet's, the one";
  EXPECT_THAT(e.events, testing::Contains(event_kind::KubeletGone));
  EXPECT_THAT(e.notes, testing::Contains(testing::HasSubstr("its signal went")));
  EXPECT_EQ(e.releases, 0) << "the target still runs";
  e.target_exit(t0 + 13200ms);  // the runtime's SIGKILL
  EXPECT_EQ(e.released_at, t0 + 13200ms);

  // The same lock gone within kubelet's path to the runtime after its time: kubelet's SIGTERM may
  // still be on its way, but it was sent or is as good as sent; gone before the time it was not.
  fake_edges edge(attach(3s));
  edge.kubelet_by = 3s;
  edge.prepare_for_shutdown(t0, seq::forward_decision::kubelet_signals);
  edge.kubelet_gone(t0 + 3999ms);
  EXPECT_EQ(edge.signals, 1) << "before kubelet's time plus its path: the shim's";
  fake_edges after(attach(3s));
  after.kubelet_by = 3s;
  after.prepare_for_shutdown(t0, seq::forward_decision::kubelet_signals);
  after.kubelet_gone(t0 + 4s);
  EXPECT_EQ(after.signals, 0);
}

// Issue 32: the signal goes when the trigger's timing says, from the plan (kube-apiserver's
// shutdown delay shorter than the drain: at the drain minus it).
TEST(ShutdownSequence, TheSignalGoesWhenTheTriggerPlansIt) {
  fake_edges e(attach(10s, 7s, 5s));
  e.prepare_for_shutdown(t0);
  EXPECT_EQ(e.signals, 0);
  ASSERT_TRUE(e.timer);
  EXPECT_EQ(*e.timer, t0 + 7s);
  e.at(t0 + 7s);
  EXPECT_EQ(e.signals, 1);
  EXPECT_EQ(e.signal_at, t0 + 7s);
  e.target_exit(t0 + 11s);
  EXPECT_EQ(e.released_at, t0 + 11s);
}

// Issue 32: kubelet restarts kube-apiserver's container when it exits. A new process found during
// the hold, after the signal, gets its one signal at once and holds the reboot as the first did.
TEST(ShutdownSequence, ATargetRestartedDuringTheHoldGetsItsSignalAndIsWaitedFor) {
  fake_edges e(attach(10s, 0s, 5s));
  e.prepare_for_shutdown(t0);
  ASSERT_EQ(e.signals, 1);
  e.target_exit(t0 + 2s);  // kube-apiserver with a shutdown delay of 0
  EXPECT_EQ(e.releases, 0) << "the drain is not over";
  e.target_started(t0 + 3100ms);  // kubelet started it again
  EXPECT_EQ(e.restart_signals, 1);
  EXPECT_EQ(e.signals, 1) << "the restarted one's signal is its own, not a second to the first";
  e.at(t0 + 10s);
  EXPECT_EQ(e.releases, 0) << "the restarted target still runs";
  e.target_exit(t0 + 12s);
  EXPECT_EQ(e.released_at, t0 + 12s);

  // Within the same bound: one that never exits is waited for until drain + exit-timeout.
  fake_edges stuck(attach(10s, 0s, 5s));
  stuck.prepare_for_shutdown(t0);
  stuck.target_exit(t0 + 2s);
  stuck.target_started(t0 + 3s);
  stuck.run_timers();
  EXPECT_EQ(stuck.released_at, t0 + 15s);
  // After a signal that found no target at all, the same.
  fake_edges missed(attach(10s, 0s, 5s));
  missed.prepare_for_shutdown(t0);
  missed.no_target(t0);
  missed.target_started(t0 + 4s);
  EXPECT_EQ(missed.restart_signals, 1);
  missed.run_timers();
  EXPECT_EQ(missed.released_at, t0 + 15s);
}

TEST(ShutdownSequence, ATargetStartedBeforeTheSignalOrAfterTheHoldIsNotSignalledThen) {
  fake_edges before(attach(10s, 6s, 5s));
  before.prepare_for_shutdown(t0);
  before.target_started(t0 + 2s);  // the signal at +6 s resolves the target anew and finds it
  EXPECT_EQ(before.restart_signals, 0);
  before.at(t0 + 6s);
  EXPECT_EQ(before.signals, 1);

  fake_edges after(attach(3s, 0s, 5s));
  after.prepare_for_shutdown(t0);
  after.target_exit(t0 + 1s);
  after.run_timers();
  ASSERT_EQ(after.releases, 1);
  after.target_started(t0 + 4s);  // the reboot is under way
  EXPECT_EQ(after.restart_signals, 0);

  fake_edges idle(attach());
  idle.target_started(t0);
  EXPECT_EQ(idle.restart_signals, 0);
  EXPECT_FALSE(idle.machine.phase().draining());
}

// Where kubelet signals, a target it restarted before its SIGTERM time is kubelet's to stop too;
// after that time, the shim's.
TEST(ShutdownSequence, ATargetRestartedBeforeKubeletsTimeIsLeftToKubelet) {
  fake_edges e(attach(10s, 0s, 30s));
  e.kubelet_by = 8s;
  e.prepare_for_shutdown(t0, seq::forward_decision::kubelet_signals);
  e.target_exit(t0 + 1s);  // crashed before its group's turn
  e.target_started(t0 + 2s);
  EXPECT_EQ(e.restarts_left_to_kubelet, 1);
  EXPECT_EQ(e.restart_signals, 0);
  e.target_exit(t0 + 9s);         // kubelet's SIGTERM at +8 s
  e.target_started(t0 + 9500ms);  // a kubelet without graceful shutdown started it again
  EXPECT_EQ(e.restart_signals, 1);
  EXPECT_EQ(e.signals, 0);
}

// A restarted shim whose earlier run had not sent its signal yet (kube-apiserver's delay is
// shorter than the drain, so it goes late): the signal goes at the planned time from the recorded
// unready moment, once.
TEST(ShutdownSequence, AResumedHoldWhoseSignalWasStillToComeSendsItAtItsTime) {
  fake_edges e(attach(10s, 8s, 5s));
  e.apply(e.machine.resume(t0 + 3s, {.unready_at = t0,
                                     .cause = "PrepareForShutdown(true)",
                                     .target_running = true,
                                     .signalled = false,
                                     .timing = e.timing(seq::forward_decision::forward)}));
  e.now = t0 + 3s;
  EXPECT_EQ(e.signals, 0);
  e.at(t0 + 8s);
  EXPECT_EQ(e.signals, 1);
  EXPECT_EQ(e.signal_at, t0 + 8s);
  e.target_exit(t0 + 10500ms);
  EXPECT_EQ(e.released_at, t0 + 10500ms);
}

TEST(ShutdownSequence, UnreadyCarriesTheMomentTheDrainCountsFrom) {
  seq machine(attach().settings);
  auto out = machine.trigger(t0 + 7ms, seq::trigger_kind::prepare_for_shutdown,
                             "PrepareForShutdown(true)", {seq::forward_decision::forward});
  auto unready = std::find_if(out.begin(), out.end(),
                              [](const auto& a) { return a.what == kind::become_unready; });
  ASSERT_NE(unready, out.end());
  EXPECT_EQ(unready->at, t0 + 7ms);
  auto timer =
      std::find_if(out.begin(), out.end(), [](const auto& a) { return a.what == kind::arm_timer; });
  ASSERT_NE(timer, out.end());
  EXPECT_EQ(timer->at, t0 + 7ms + 3s) << "the drain counts from the moment the event carries";
}

TEST(ShutdownSequence, HoldEndsAtDrainWhenTargetExitedEarly) {
  fake_edges e(attach());
  e.prepare_for_shutdown(t0);
  e.target_exit(t0 + 1s);
  EXPECT_EQ(e.releases, 0) << "the drain delay must pass first";
  e.run_timers();
  EXPECT_EQ(e.released_at, t0 + 3s);
  EXPECT_EQ(e.releases, 1);
  EXPECT_EQ(e.exits, 0) << "after PrepareForShutdown the shim keeps running, unready";
  EXPECT_TRUE(e.machine.phase().draining());
  EXPECT_THAT(e.events,
              testing::ElementsAre(event_kind::ShutdownInitiated, event_kind::DrainElapsed));
}

TEST(ShutdownSequence, HoldExtendsUntilTargetExits) {
  fake_edges e(attach());
  e.prepare_for_shutdown(t0);
  e.at(t0 + 3s);
  EXPECT_EQ(e.releases, 0);
  ASSERT_TRUE(e.timer);
  EXPECT_EQ(*e.timer, t0 + 8s) << "bounded by drain + exit-timeout";
  e.target_exit(t0 + 4500ms);
  EXPECT_EQ(e.released_at, t0 + 4500ms);
  EXPECT_FALSE(e.timer);
}

TEST(ShutdownSequence, ExitTimeoutBoundsTheHold) {
  fake_edges e(attach());
  e.prepare_for_shutdown(t0);
  e.run_timers();
  EXPECT_EQ(e.released_at, t0 + 8s);
  e.target_exit(t0 + 20s);
  EXPECT_EQ(e.releases, 1);
}

TEST(ShutdownSequence, SignalDelayDelaysTheSignal) {
  fake_edges e(attach(3s, 1s));
  e.prepare_for_shutdown(t0);
  EXPECT_EQ(e.signals, 0);
  EXPECT_EQ(*e.timer, t0 + 1s);
  e.at(t0 + 1s);
  EXPECT_EQ(e.signals, 1);
  EXPECT_EQ(e.signal_at, t0 + 1s);
}

TEST(ShutdownSequence, NeverReleasesBeforeTheSignal) {
  // A signal delay longer than drain + exit-timeout: the hold lasts until the signal went out.
  fake_edges e(attach(1s, 10s, 2s));
  e.prepare_for_shutdown(t0);
  e.run_timers();
  EXPECT_EQ(e.signal_at, t0 + 10s);
  EXPECT_EQ(e.released_at, t0 + 10s);
}

TEST(ShutdownSequence, OnlyOneSignalWhateverArrives) {
  fake_edges e(attach());
  e.prepare_for_shutdown(t0);
  e.sigterm(t0 + 1s);
  e.sigterm(t0 + 1s);
  e.apply(e.machine.trigger(e.now, seq::trigger_kind::sigint, "SIGINT",
                            {seq::forward_decision::forward}));
  e.prepare_for_shutdown(t0 + 2s);
  e.run_timers();
  EXPECT_EQ(e.signals, 1);
  EXPECT_EQ(e.unreadies, 1);
  EXPECT_EQ(e.exits, 1) << "the SIGTERM asked the shim to stop once the hold is over";
}

TEST(ShutdownSequence, StoppingIsNotifiedOnlyWhenTheShimWillExit) {
  fake_edges e(attach());
  e.prepare_for_shutdown(t0);
  e.target_exit(t0 + 1s);
  e.run_timers();
  EXPECT_EQ(e.stoppings, 0) << "after PrepareForShutdown the shim stays up: no STOPPING=1";
  e.sigterm(t0 + 30s);
  e.sigterm(t0 + 31s);
  EXPECT_EQ(e.stoppings, 1);

  fake_edges f(attach());
  f.sigterm(t0);
  f.prepare_for_shutdown(t0 + 1s);
  EXPECT_EQ(f.stoppings, 1);
}

TEST(ShutdownSequence, SigtermAfterTheHoldExits) {
  fake_edges e(attach());
  e.prepare_for_shutdown(t0);
  e.target_exit(t0 + 1s);
  e.run_timers();
  EXPECT_EQ(e.exits, 0);
  e.sigterm(t0 + 30s);
  EXPECT_EQ(e.exits, 1);
  EXPECT_EQ(e.signals, 1);
}

TEST(ShutdownSequence, CancelBeforeSignalBecomesReadyAgain) {
  fake_edges e(attach(3s, 2s));
  e.prepare_for_shutdown(t0);
  e.cancel(t0 + 1s);
  EXPECT_FALSE(e.machine.phase().draining());
  EXPECT_EQ(e.readies, 1);
  EXPECT_EQ(e.retakes, 1);
  EXPECT_FALSE(e.timer);
  e.run_timers();
  EXPECT_EQ(e.signals, 0);
  EXPECT_EQ(e.releases, 0);
  EXPECT_THAT(e.events,
              testing::ElementsAre(event_kind::ShutdownInitiated, event_kind::ShutdownCancelled));
}

TEST(ShutdownSequence, CancelAfterSignalWaitsForTheTarget) {
  fake_edges e(attach());
  e.prepare_for_shutdown(t0);
  e.cancel(t0 + 1s);
  EXPECT_FALSE(e.machine.phase().draining());
  EXPECT_TRUE(e.machine.phase().waiting_for_target());
  EXPECT_EQ(e.watches, 1);
  EXPECT_EQ(e.readies, 0);
  e.apply(e.machine.target_running());
  EXPECT_EQ(e.readies, 1);
  EXPECT_FALSE(e.machine.phase().waiting_for_target());
}

TEST(ShutdownSequence, CancelAfterReleaseRetakesTheLock) {
  fake_edges e(attach());
  e.prepare_for_shutdown(t0);
  e.target_exit(t0 + 1s);
  e.run_timers();
  EXPECT_EQ(e.releases, 1);
  e.cancel(t0 + 10s);
  EXPECT_EQ(e.retakes, 1);
  EXPECT_TRUE(e.machine.phase().waiting_for_target());
}

TEST(ShutdownSequence, NextShutdownAfterCancelSignalsAgain) {
  fake_edges e(attach());
  e.prepare_for_shutdown(t0);
  e.cancel(t0 + 1s);
  e.apply(e.machine.target_running());
  e.prepare_for_shutdown(t0 + 10s);
  EXPECT_EQ(e.signals, 2) << "a new shutdown, a new signal";
  e.run_timers();
  EXPECT_EQ(e.released_at, t0 + 18s);
}

TEST(ShutdownSequence, CancelIgnoredWhenTheShimWasAskedToStop) {
  fake_edges e(attach());
  e.sigterm(t0);
  e.cancel(t0 + 1s);
  EXPECT_TRUE(e.machine.phase().draining());
  EXPECT_EQ(e.retakes, 0);
  e.run_timers();
  EXPECT_EQ(e.exits, 1);
}

TEST(ShutdownSequence, SigtermWhileSystemRunningForwardsNothingAndExits) {
  fake_edges e(attach());
  e.sigterm(t0, seq::forward_decision::ask_system_state);
  EXPECT_EQ(e.unreadies, 1) << "unready at once, before the answer";
  EXPECT_EQ(e.asks, 1);
  EXPECT_EQ(e.signals, 0);
  e.apply(e.machine.system_state(t0 + 5ms, false, "running"));
  EXPECT_EQ(e.signals, 0);
  EXPECT_EQ(e.releases, 1);
  EXPECT_EQ(e.exits, 1);
  EXPECT_FALSE(e.timer);
}

// A SIGTERM that is not passed on is the shim stopping, not a reboot held: its words say so from
// the first line, and the lock goes with the reason, not "the shutdown goes on".
TEST(ShutdownSequence, ASigtermNotForwardedIsWordedAsAStopWithoutSignal) {
  constexpr std::string_view kStop =
      "stopping without signalling the target: the system is not shutting down "
      "(SystemState=running)";
  fake_edges e(attach());
  e.sigterm(t0, seq::forward_decision::ask_system_state);
  ASSERT_EQ(e.unready_messages.size(), 1u);
  EXPECT_EQ(e.unready_messages[0],
            "received SIGTERM, becoming unready; asking PID 1 whether the system is shutting down");
  e.apply(e.machine.system_state(t0 + 5ms, false, "running"));
  // Issue 22: said by the Restart record, no longer by a note of its own.
  EXPECT_EQ(e.record_messages, std::vector<std::string>{std::string(kStop)});
  EXPECT_EQ(e.release_messages, std::vector<std::string>{std::string(kStop)});

  fake_edges policy(attach());
  policy.sigterm(t0, seq::forward_decision::skip);
  ASSERT_EQ(policy.unready_messages.size(), 1u);
  EXPECT_EQ(policy.unready_messages[0],
            "received SIGTERM, becoming unready, stopping without signalling the target: SIGTERM "
            "is not passed on by policy");
  EXPECT_EQ(policy.release_messages,
            std::vector<std::string>{
                "stopping without signalling the target: SIGTERM is not passed on by policy"});
  for (const auto* all : {&e.unready_messages, &e.notes, &e.record_messages,
                          &policy.unready_messages, &policy.notes}) {
    for (const auto& m : *all) EXPECT_EQ(m.find("on hold"), std::string::npos) << m;
  }

  // A reboot still says it holds, and its release needs no reason.
  fake_edges reboot(attach());
  reboot.prepare_for_shutdown(t0);
  EXPECT_EQ(reboot.unready_messages[0],
            "received PrepareForShutdown(true), becoming unready, keeping the reboot on hold");
  reboot.target_exit(t0 + 1s);
  reboot.run_timers();
  EXPECT_EQ(reboot.release_messages, std::vector<std::string>{""});
}

// Issue 22: a `systemctl restart` of the shim was recorded as ShutdownInitiated, and read as a
// failed shutdown. A shim SIGTERM is recorded as what it turns out to be, once that is known:
// Restart when it is not passed on, ShutdownInitiated (stamped at the unready moment, with the
// signal as its cause) when it is.
TEST(ShutdownSequence, ASigtermIsRecordedAsARestartOrAShutdownOnceItIsKnown) {
  fake_edges running(attach());
  running.sigterm(t0, seq::forward_decision::ask_system_state);
  EXPECT_TRUE(running.events.empty()) << "nothing recorded before PID 1 answers";
  running.apply(running.machine.system_state(t0 + 5ms, false, "running"));
  EXPECT_THAT(running.events, testing::ElementsAre(event_kind::Restart));
  ASSERT_EQ(running.records.size(), 1u);
  EXPECT_EQ(running.records[0].at, t0);
  EXPECT_EQ(running.records[0].cause, "SIGTERM");

  fake_edges policy(attach());
  policy.sigterm(t0, seq::forward_decision::skip);
  EXPECT_THAT(policy.events, testing::ElementsAre(event_kind::Restart));
  EXPECT_TRUE(policy.records.empty()) << "known at once: become_unready's own record";

  fake_edges stopping(attach());
  stopping.sigterm(t0, seq::forward_decision::ask_system_state);
  stopping.apply(stopping.machine.system_state(t0 + 5ms, true, "stopping"));
  stopping.target_exit(t0 + 1s);
  stopping.run_timers();
  EXPECT_THAT(stopping.events,
              testing::ElementsAre(event_kind::ShutdownInitiated, event_kind::DrainElapsed));
  ASSERT_EQ(stopping.records.size(), 1u);
  EXPECT_EQ(stopping.records[0].at, t0) << "the hold is counted from the SIGTERM";
  EXPECT_EQ(stopping.records[0].message,
            "received SIGTERM, keeping the reboot on hold: the system is going down "
            "(SystemState=stopping)");

  fake_edges settled(attach());
  settled.sigterm(t0, seq::forward_decision::ask_system_state);
  settled.prepare_for_shutdown(t0 + 1ms);
  settled.apply(settled.machine.system_state(t0 + 5ms, false, "running"));
  EXPECT_THAT(settled.events, testing::ElementsAre(event_kind::ShutdownInitiated));
  ASSERT_EQ(settled.records.size(), 1u);
  EXPECT_EQ(settled.records[0].cause, "SIGTERM");

  fake_edges forwarded(attach());
  forwarded.sigterm(t0, seq::forward_decision::forward);
  EXPECT_THAT(forwarded.events, testing::ElementsAre(event_kind::ShutdownInitiated));
  EXPECT_TRUE(forwarded.records.empty());
}

TEST(ShutdownSequence, SigtermWhileSystemStoppingForwardsAndHolds) {
  fake_edges e(attach());
  e.sigterm(t0, seq::forward_decision::ask_system_state);
  e.apply(e.machine.system_state(t0 + 5ms, true, "stopping"));
  EXPECT_EQ(e.signals, 1);
  EXPECT_EQ(e.releases, 0);
  e.target_exit(t0 + 1s);
  e.run_timers();
  EXPECT_EQ(e.released_at, t0 + 3s);
  EXPECT_EQ(e.exits, 1);
}

TEST(ShutdownSequence, PrepareForShutdownSettlesAPendingDecision) {
  fake_edges e(attach());
  e.sigterm(t0, seq::forward_decision::ask_system_state);
  e.prepare_for_shutdown(t0 + 1ms);
  EXPECT_EQ(e.signals, 1);
  e.apply(e.machine.system_state(t0 + 5ms, false, "running"));
  EXPECT_EQ(e.releases, 0) << "a late answer does not undo the decision";
  EXPECT_EQ(e.signals, 1);
}

TEST(ShutdownSequence, ForwardNeverReleasesAndExits) {
  fake_edges e(attach());
  e.sigterm(t0, seq::forward_decision::skip);
  EXPECT_EQ(e.signals, 0);
  EXPECT_EQ(e.releases, 1);
  EXPECT_EQ(e.exits, 1);
}

TEST(ShutdownSequence, NoTargetOnlyHoldsForTheDrain) {
  fake_edges e({.drain_delay = 3s, .exit_timeout = 5s});
  e.prepare_for_shutdown(t0);
  EXPECT_EQ(e.signals, 0);
  e.run_timers();
  EXPECT_EQ(e.released_at, t0 + 3s);
}

TEST(ShutdownSequence, WrapperChildExitingOnItsOwnEndsTheShim) {
  fake_edges e(wrapper());
  e.target_exit(t0);
  EXPECT_EQ(e.unreadies, 1);
  EXPECT_EQ(e.exits, 1);
  EXPECT_EQ(e.signals, 0);
}

TEST(ShutdownSequence, WrapperExitsAfterTheHoldOnceTheChildIsGone) {
  fake_edges e(wrapper());
  e.prepare_for_shutdown(t0);
  e.target_exit(t0 + 1s);
  EXPECT_EQ(e.exits, 0) << "the load balancer still needs the drain";
  e.run_timers();
  EXPECT_EQ(e.released_at, t0 + 3s);
  EXPECT_EQ(e.exits, 1);
}

TEST(ShutdownSequence, WrapperCancelAfterSignalExitsWithTheChild) {
  fake_edges e(wrapper());
  e.prepare_for_shutdown(t0);
  e.cancel(t0 + 1s);
  EXPECT_EQ(e.exits, 0);
  e.target_exit(t0 + 2s);
  EXPECT_EQ(e.exits, 1);
}

// Faults suite item 8: with no target at signal time, a cancel left /readyz 503 for good, waiting
// for a target that never had the signal.
TEST(ShutdownSequence, NoTargetThenCancelIsReadyAgain) {
  fake_edges e(attach());
  e.prepare_for_shutdown(t0);
  EXPECT_EQ(e.signals, 1);
  e.no_target(t0);
  e.cancel(t0 + 1s);
  EXPECT_EQ(e.readies, 1);
  EXPECT_EQ(e.watches, 0);
  EXPECT_EQ(e.retakes, 1);
  EXPECT_FALSE(e.machine.phase().draining());
  EXPECT_FALSE(e.machine.phase().waiting_for_target());
  EXPECT_FALSE(e.timer);
}

// Issue 18, item 7: with no target configured at all, nothing is ever signalled, so a cancel has
// nothing to wait for. The sequence counted its (empty) signal as sent and waited for a target
// that did not have it: /readyz stayed 503 for good.
TEST(ShutdownSequence, NoTargetConfiguredThenCancelIsReadyAgain) {
  fake_edges e({.drain_delay = 3s, .exit_timeout = 5s});
  e.prepare_for_shutdown(t0);
  e.at(t0 + 1s);
  EXPECT_EQ(e.signals, 0);
  e.cancel(t0 + 2s);
  EXPECT_EQ(e.readies, 1);
  EXPECT_EQ(e.watches, 0);
  EXPECT_EQ(e.retakes, 1);
  EXPECT_FALSE(e.machine.phase().draining());
  EXPECT_FALSE(e.machine.phase().waiting_for_target());
  EXPECT_FALSE(e.timer);
  // The next shutdown holds as the first did.
  e.prepare_for_shutdown(t0 + 10s);
  e.run_timers();
  EXPECT_EQ(e.released_at, t0 + 13s);
}

TEST(ShutdownSequence, NoTargetStillHoldsTheDrain) {
  fake_edges e(attach());
  e.prepare_for_shutdown(t0);
  e.no_target(t0);
  EXPECT_EQ(e.releases, 0);
  e.run_timers();
  EXPECT_EQ(e.released_at, t0 + 3s);
}

TEST(ShutdownSequence, NoTargetAfterTheHoldChangesNothing) {
  fake_edges e(attach());
  e.no_target(t0);
  EXPECT_EQ(e.unreadies, 0);
  EXPECT_FALSE(e.machine.phase().draining());
}

// Faults suite item 3: a restarted shim resumes the hold of the shutdown its earlier run signalled
// for, with the drain that is left, and sends no second signal.
TEST(ShutdownSequence, ResumeHoldsTheRemainingDrainWithoutASignal) {
  fake_edges e(attach(3s, 0s, 5s));
  e.resume(t0 + 2s, t0, /*target_running=*/false);
  EXPECT_TRUE(e.machine.phase().draining());
  EXPECT_EQ(e.unreadies, 1);
  ASSERT_FALSE(e.events.empty());
  EXPECT_EQ(e.events.back(), event_kind::ShutdownResumed);
  EXPECT_EQ(e.signals, 0);
  ASSERT_TRUE(e.timer);
  EXPECT_EQ(*e.timer, t0 + 3s);
  e.run_timers();
  EXPECT_EQ(e.released_at, t0 + 3s);
  EXPECT_EQ(e.signals, 0);
  EXPECT_EQ(e.exits, 0) << "PrepareForShutdown: the shim stays until the reboot";
}

TEST(ShutdownSequence, ResumeWaitsForARunningTargetUpToTheExitTimeout) {
  fake_edges e(attach(3s, 0s, 5s));
  e.resume(t0 + 1s, t0, /*target_running=*/true);
  e.run_timers();
  EXPECT_EQ(e.released_at, t0 + 8s);
  EXPECT_EQ(e.signals, 0);
}

TEST(ShutdownSequence, ResumeMarksTheEventAsResumed) {
  seq machine(attach().settings);
  const auto out = machine.resume(
      t0 + 1s, {.unready_at = t0, .cause = "PreparingForShutdown=true", .target_running = true});
  const auto unready = std::find_if(out.begin(), out.end(),
                                    [](const auto& a) { return a.what == kind::become_unready; });
  ASSERT_NE(unready, out.end());
  EXPECT_EQ(unready->event, event_kind::ShutdownResumed);
  EXPECT_EQ(unready->at, t0) << "the drain counts from the earlier run's unready moment";
}

TEST(ShutdownSequence, ResumeNeverMovesTheDrainIntoTheFuture) {
  fake_edges e(attach(3s, 0s, 5s));
  e.resume(t0, t0 + 1h, false);
  e.run_timers();
  EXPECT_EQ(e.released_at, t0 + 3s);
}

TEST(ShutdownSequence, ResumeWhileDrainingChangesNothing) {
  fake_edges e(attach());
  e.prepare_for_shutdown(t0);
  e.resume(t0 + 1s, t0 - 10s, false);
  EXPECT_EQ(e.unreadies, 1);
  e.run_timers();
  EXPECT_EQ(e.released_at, t0 + 8s) << "the running target still bounds the hold";
}

TEST(ShutdownSequence, CancelAfterAResumedHoldWaitsForTheTarget) {
  fake_edges e(attach());
  e.resume(t0 + 1s, t0, true);
  e.cancel(t0 + 2s);
  EXPECT_EQ(e.watches, 1) << "the target had its signal from the earlier run";
  EXPECT_EQ(e.readies, 0);
}

// Durations are bounded by the flags, but the machine itself never overflows: a time near the end
// of the clock saturates (UBSan reported a signed overflow in chrono before).
TEST(ShutdownSequence, TimeArithmeticSaturates) {
  fake_edges e({.drain_delay = 24h, .exit_timeout = 24h, .has_target = true}, 24h);
  const tp late = tp::max() - 1h;
  e.prepare_for_shutdown(late);
  ASSERT_TRUE(e.timer);
  EXPECT_EQ(*e.timer, tp::max());
}

TEST(ShutdownSequence, SigtermForwardingPolicy) {
  using fd = seq::forward_decision;
  // --forward-on-sigterm=always, never, auto.
  const std::optional<bool> always = true, never = false, automatic = std::nullopt;
  struct row {
    std::optional<bool> policy;
    bool wrapper;
    bool uses_bus;
    fd want;
  };
  const row rows[] = {
      {always, false, true, fd::forward},
      {always, true, false, fd::forward},
      {never, true, true, fd::skip},
      {never, false, true, fd::skip},
      {automatic, true, true, fd::forward},
      {automatic, true, false, fd::forward},
      {automatic, false, true, fd::ask_system_state},
      {automatic, false, false, fd::skip},
  };
  for (const auto& r : rows) {
    const auto got = seq::sigterm_forwarding(r.policy, r.wrapper, r.uses_bus);
    EXPECT_EQ(got.decision, r.want)
        << "policy " << (r.policy ? (*r.policy ? "always" : "never") : "auto") << " wrapper "
        << r.wrapper << " bus " << r.uses_bus;
    EXPECT_FALSE(got.why.empty());
  }
}

// Every ordering of the inputs that can reach the machine during one shutdown, with the timers
// fired in between as the loop would: the invariants hold in all of them.
TEST(ShutdownSequence, InvariantsHoldInEveryOrdering) {
  enum input {
    prepare,
    sigterm,
    cancel,
    exit_target,
    prepare_again,
    missing,
    kubelet_lock_gone,
    restarted
  };
  for (auto decision : {seq::forward_decision::forward, seq::forward_decision::kubelet_signals}) {
    for (bool wrapper : {false, true}) {
      for (auto signal_delay : {0s, 1s, 4s}) {
        std::vector<input> inputs{prepare, sigterm,           cancel,   exit_target, prepare_again,
                                  missing, kubelet_lock_gone, restarted};
        std::sort(inputs.begin(), inputs.end());
        do {
          for (std::chrono::milliseconds step : {500ms, 2000ms}) {
            fake_edges e(
                {.drain_delay = 3s, .exit_timeout = 5s, .has_target = true, .wrapper = wrapper},
                signal_delay);
            tp t = t0;
            for (input in : inputs) {
              switch (in) {
                case prepare:
                case prepare_again:
                  e.prepare_for_shutdown(t, decision);
                  break;
                case sigterm:
                  e.sigterm(t);
                  break;
                case cancel:
                  e.cancel(t);
                  break;
                case exit_target:
                  e.target_exit(t);
                  break;
                case missing:
                  e.no_target(t);
                  break;
                case kubelet_lock_gone:
                  e.kubelet_gone(t);
                  break;
                case restarted:
                  e.target_started(t);
                  break;
              }
              t += step;
            }
            e.run_timers();
            SCOPED_TRACE(testing::Message() << "wrapper=" << wrapper << " step=" << step.count());
            // Each shutdown starts with exactly one become_unready.
            EXPECT_LE(e.most_signals, 1)
                << "at most one signal per shutdown, the shim's or kubelet's";
            EXPECT_LE(e.signals + e.kubelet_counts - e.forwards_after_kubelet_gone, e.unreadies);
            EXPECT_LE(e.releases, e.unreadies);
            if (e.released_at && e.signal_at) {
              EXPECT_GE(*e.released_at, *e.signal_at) << "never released before the signal";
            }
            EXPECT_LE(e.exits, 1);
            EXPECT_LE(e.restart_signals + e.restarts_left_to_kubelet, 1)
                << "one signal for the one restarted target";
            if (e.restart_signals + e.restarts_left_to_kubelet > 0) {
              EXPECT_GE(e.signals + e.kubelet_counts, 1)
                  << "a restart is signalled after the first";
            }
            EXPECT_FALSE(e.timer) << "a timer left armed after everything settled";
          }
        } while (std::next_permutation(inputs.begin(), inputs.end()));
      }
    }
  }
}

// --- the drill (issue 23) ---------------------------------------------------------------------

TEST(ShutdownSequence, ADrillIsUnreadyForItsDurationWithoutSignalOrRelease) {
  fake_edges e(attach(3s));
  ASSERT_TRUE(e.drill(t0, 10s));
  EXPECT_TRUE(e.machine.phase().drilling());
  EXPECT_FALSE(e.machine.phase().draining()) << "a drill is not a shutdown";
  EXPECT_EQ(e.machine.phase().since, t0);
  EXPECT_EQ(e.machine.phase().ends, t0 + 10s);
  EXPECT_EQ(e.machine.phase().name(), "drill");
  EXPECT_EQ(e.timer, t0 + 10s);
  e.at(t0 + 9s);
  EXPECT_TRUE(e.machine.phase().drilling()) << "the drill's length, not the drain-delay";
  e.run_timers();
  EXPECT_FALSE(e.machine.phase().drilling());
  EXPECT_EQ(e.readies, 1);
  EXPECT_EQ(e.signals, 0);
  EXPECT_EQ(e.releases, 0);
  EXPECT_EQ(e.retakes, 0);
  EXPECT_EQ(e.exits, 0);
  EXPECT_EQ(e.unreadies, 0) << "no shutdown record";
  EXPECT_THAT(e.events, testing::ElementsAre(event_kind::DrillStarted, event_kind::DrillEnded));
  EXPECT_THAT(e.drill_endings, testing::ElementsAre("completed"));
  EXPECT_FALSE(e.timer);
}

TEST(ShutdownSequence, ADrillStoppedEarlyIsReadyAtOnce) {
  fake_edges e(attach());
  ASSERT_TRUE(e.drill(t0, 70s));
  e.stop_drill(t0 + 5s);
  EXPECT_FALSE(e.machine.phase().drilling());
  EXPECT_EQ(e.readies, 1);
  EXPECT_FALSE(e.timer) << "the drill's timer is cancelled";
  EXPECT_THAT(e.drill_endings, testing::ElementsAre("stopped"));
  // Stopping again, or with no drill, does nothing.
  e.stop_drill(t0 + 6s);
  EXPECT_EQ(e.readies, 1);
  EXPECT_EQ(e.drill_endings.size(), 1u);
  // And the next drill may start.
  EXPECT_TRUE(e.drill(t0 + 7s, 1s));
}

// A real shutdown during a drill becomes the shutdown at once, with the drain already served
// counted: the load balancer has been draining the node since the drill began.
TEST(ShutdownSequence, AShutdownDuringADrillHoldsOnlyTheRemainingDrain) {
  fake_edges e(attach(10s, 0s, 5s));
  ASSERT_TRUE(e.drill(t0, 70s));
  e.prepare_for_shutdown(t0 + 4s);
  EXPECT_FALSE(e.machine.phase().drilling());
  EXPECT_TRUE(e.machine.phase().draining());
  EXPECT_EQ(e.machine.phase().since, t0) << "the drain is counted from the drill's start";
  EXPECT_THAT(e.drill_endings, testing::ElementsAre("shutdown"));
  EXPECT_EQ(e.signals, 1) << "the shutdown's one signal, at once";
  EXPECT_EQ(e.signal_at, t0 + 4s);
  EXPECT_EQ(e.readies, 0) << "never ready in between";
  ASSERT_EQ(e.unready_messages.size(), 1u);
  EXPECT_THAT(e.unready_messages[0], testing::HasSubstr("during a drill"));
  e.target_exit(t0 + 5s);
  e.run_timers();
  EXPECT_EQ(e.released_at, t0 + 10s) << "10 s drain from the drill's start, not from the shutdown";
  EXPECT_THAT(e.events,
              testing::ElementsAre(event_kind::DrillStarted, event_kind::DrillEnded,
                                   event_kind::ShutdownInitiated, event_kind::DrainElapsed));
}

TEST(ShutdownSequence, AShutdownAfterTheDrainServedInADrillReleasesOnTheTargetsExit) {
  fake_edges e(attach(3s, 0s, 5s));
  ASSERT_TRUE(e.drill(t0, 70s));
  e.prepare_for_shutdown(t0 + 20s);
  EXPECT_EQ(e.signals, 1);
  EXPECT_THAT(e.events, testing::Contains(event_kind::DrainElapsed)) << "served in the drill";
  EXPECT_EQ(e.releases, 0) << "the target still runs: the signal needs its exit-timeout";
  e.target_exit(t0 + 21s);
  EXPECT_EQ(e.released_at, t0 + 21s);
  // A target that never exits has its exit-timeout from the signal, not from the drill's start.
  fake_edges stuck(attach(3s, 0s, 5s));
  ASSERT_TRUE(stuck.drill(t0, 70s));
  stuck.prepare_for_shutdown(t0 + 20s);
  stuck.run_timers();
  EXPECT_EQ(stuck.released_at, t0 + 25s);
}

TEST(ShutdownSequence, ASigtermDuringADrillIsDecidedAsAnyOther) {
  // A restart of the shim (PID 1 running): the shim stops without a signal; the drill is over.
  fake_edges restart(attach());
  ASSERT_TRUE(restart.drill(t0, 70s));
  restart.sigterm(t0 + 1s, seq::forward_decision::ask_system_state);
  EXPECT_THAT(restart.drill_endings, testing::ElementsAre("shutdown"));
  restart.apply(restart.machine.system_state(t0 + 1s, false, "running"));
  EXPECT_EQ(restart.signals, 0);
  EXPECT_EQ(restart.exits, 1);
  EXPECT_THAT(restart.events, testing::Contains(event_kind::Restart));
  // PID 1 stopping: the shutdown, with the drill's drain counted.
  fake_edges stopping(attach(10s));
  ASSERT_TRUE(stopping.drill(t0, 70s));
  stopping.sigterm(t0 + 4s, seq::forward_decision::ask_system_state);
  stopping.apply(stopping.machine.system_state(t0 + 4s, true, "stopping"));
  EXPECT_EQ(stopping.signals, 1);
  stopping.target_exit(t0 + 5s);
  stopping.run_timers();
  EXPECT_EQ(stopping.released_at, t0 + 10s);
  EXPECT_EQ(stopping.exits, 1);
}

TEST(ShutdownSequence, NoDrillDuringAShutdownOrWhileWaitingForTheTarget) {
  fake_edges e(attach());
  e.prepare_for_shutdown(t0);
  EXPECT_EQ(e.machine.drill_refusal(), "a shutdown is under way");
  EXPECT_FALSE(e.drill(t0 + 1s, 10s));
  // Even fed, it changes nothing.
  EXPECT_TRUE(e.machine.drill(t0 + 1s, 10s, "x").empty());
  e.target_exit(t0 + 2s);
  e.run_timers();
  ASSERT_EQ(e.releases, 1);
  EXPECT_EQ(e.machine.drill_refusal(), "a shutdown is under way") << "released: the reboot goes on";
  EXPECT_EQ(e.drills, 0);
  // Cancelled after the signal: unready until a target runs again; no drill meanwhile.
  fake_edges w(attach());
  w.prepare_for_shutdown(t0);
  w.cancel(t0 + 1s);
  ASSERT_TRUE(w.machine.phase().waiting_for_target());
  EXPECT_TRUE(w.machine.drill_refusal().has_value());
  w.apply(w.machine.target_running());
  EXPECT_FALSE(w.machine.drill_refusal().has_value());
  // A second drill while one runs.
  fake_edges twice(attach());
  ASSERT_TRUE(twice.drill(t0, 10s));
  EXPECT_EQ(twice.machine.drill_refusal(), "a drill is already under way");
}

TEST(ShutdownSequence, ACancelledShutdownThatBeganInADrillIsReadyAgainAndTheDrillIsOver) {
  fake_edges e(attach(3s, 5s));  // --signal-delay 5s: cancelled before the signal
  ASSERT_TRUE(e.drill(t0, 70s));
  e.prepare_for_shutdown(t0 + 1s);
  EXPECT_EQ(e.signals, 0);
  e.cancel(t0 + 2s);
  EXPECT_FALSE(e.machine.phase().drilling())
      << "the drill became the shutdown; it does not come back";
  EXPECT_FALSE(e.machine.phase().draining());
  EXPECT_EQ(e.readies, 1);
  EXPECT_EQ(e.signals, 0);
  e.run_timers();
  EXPECT_EQ(e.signals, 0);
  // A cancel during a drill (no shutdown) only retakes the lock; the drill goes on.
  fake_edges d(attach());
  ASSERT_TRUE(d.drill(t0, 10s));
  d.cancel(t0 + 1s);
  EXPECT_TRUE(d.machine.phase().drilling());
  EXPECT_EQ(d.retakes, 1);
  EXPECT_EQ(d.readies, 0);
}

TEST(ShutdownSequence, AWrappedChildExitingDuringADrillEndsTheShim) {
  fake_edges e(wrapper());
  ASSERT_TRUE(e.drill(t0, 10s));
  e.target_exit(t0 + 1s);
  EXPECT_THAT(e.drill_endings, testing::ElementsAre("target exited"));
  EXPECT_EQ(e.exits, 1);
  EXPECT_EQ(e.unreadies, 1);
  EXPECT_FALSE(e.timer);
  // Attach mode: the target's exit is the target watch's business; the drill goes on.
  fake_edges a(attach());
  ASSERT_TRUE(a.drill(t0, 10s));
  a.target_exit(t0 + 1s);
  EXPECT_TRUE(a.machine.phase().drilling());
  EXPECT_EQ(a.exits, 0);
}

TEST(ShutdownSequence, AResumedShutdownEndsADrill) {
  fake_edges e(attach(10s));
  ASSERT_TRUE(e.drill(t0, 70s));
  e.resume(t0 + 2s, t0 - 5s, true);
  EXPECT_THAT(e.drill_endings, testing::ElementsAre("shutdown"));
  EXPECT_TRUE(e.machine.phase().draining());
  EXPECT_EQ(e.machine.phase().since, t0 - 5s);
}

// Drills mixed with shutdowns, in every order: still one signal per shutdown, a drill is always
// over once the timers have run, and nothing is left armed.
TEST(ShutdownSequence, InvariantsHoldWithDrillsInEveryOrdering) {
  enum input { drill, stop, prepare, sigterm, cancel, exit_target };
  for (bool wrapper : {false, true}) {
    for (auto signal_delay : {0s, 4s}) {
      std::vector<input> inputs{drill, stop, prepare, sigterm, cancel, exit_target};
      do {
        for (std::chrono::milliseconds step : {500ms, 2000ms}) {
          fake_edges e(
              {.drain_delay = 3s, .exit_timeout = 5s, .has_target = true, .wrapper = wrapper},
              signal_delay);
          tp t = t0;
          int asked = 0;
          for (input in : inputs) {
            switch (in) {
              case drill:
                asked += e.drill(t, 5s) ? 1 : 0;
                break;
              case stop:
                e.stop_drill(t);
                break;
              case prepare:
                e.prepare_for_shutdown(t);
                break;
              case sigterm:
                e.sigterm(t);
                break;
              case cancel:
                e.cancel(t);
                break;
              case exit_target:
                e.target_exit(t);
                break;
            }
            t += step;
          }
          e.run_timers();
          SCOPED_TRACE(testing::Message() << "wrapper=" << wrapper << " step=" << step.count());
          EXPECT_EQ(e.drills, asked);
          EXPECT_EQ(e.drill_endings.size(), static_cast<std::size_t>(e.drills))
              << "every drill ends";
          EXPECT_FALSE(e.machine.phase().drilling());
          EXPECT_LE(e.most_signals, 1);
          EXPECT_LE(e.exits, 1);
          EXPECT_FALSE(e.timer) << "a timer left armed after everything settled";
        }
      } while (std::next_permutation(inputs.begin(), inputs.end()));
    }
  }
}

}  // namespace
}  // namespace shim
