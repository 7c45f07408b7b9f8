// sequence_runner: the one way into the state machine. The edges here answer at once, from inside
// the carrying out of an action, which is exactly what used to re-enter apply() (issue 12).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/sequence_runner.hpp"

namespace shim {
namespace {

using namespace std::chrono_literals;
using seq = shutdown_sequence;
using kind = seq::action::kind;

const seq::time_point t0 = seq::time_point{} + 1000s;

seq::settings attach() { return {.drain_delay = 3s, .exit_timeout = 5s, .has_target = true}; }

// Records every action carried out; `on` lets a test answer an action from inside it.
struct recording_edges {
  std::vector<kind> done;
  int settled = 0;
  std::function<void(const seq::action&)> on;

  sequence_runner::handlers handlers() {
    return {.carry_out =
                [this](const seq::action& a) {
                  done.push_back(a.what);
                  if (on) on(a);
                },
            .settled = [this] { ++settled; }};
  }
  bool carried_out(kind k) const { return std::find(done.begin(), done.end(), k) != done.end(); }
};

sequence_runner::input pfs(seq::time_point now) {
  return [now](seq& s) {
    return s.trigger(now, seq::trigger_kind::prepare_for_shutdown, "PrepareForShutdown(true)",
                     {seq::forward_decision::forward});
  };
}

// No target at signal time: the edge reports it while forward_signal is being carried out. The
// report waits until the batch is done; the old code posted it, the runner queues it.
TEST(SequenceRunner, NoTargetFoundWhileSignallingIsQueued) {
  recording_edges edges;
  sequence_runner* runner_ptr = nullptr;
  std::vector<kind> before_report;
  edges.on = [&](const seq::action& a) {
    if (a.what != kind::forward_signal) return;
    runner_ptr->feed([&](seq& s) {
      before_report = edges.done;
      return s.no_target(t0, "no process named kube-apiserver");
    });
  };
  sequence_runner runner(attach(), edges.handlers());
  runner_ptr = &runner;
  runner.feed(pfs(t0));
  // The whole first batch (unready, signal, timer) came before the report was applied.
  ASSERT_FALSE(before_report.empty());
  EXPECT_EQ(before_report.back(), kind::arm_timer);
  EXPECT_EQ(edges.settled, 1) << "settled once, after the queue ran dry";
  EXPECT_TRUE(runner.sequence().holding());
}

// A missing bus: the system-state question is answered with an error at once. The answer (and the
// exit it leads to) comes after the batch that asked.
TEST(SequenceRunner, AnAnswerGivenAtOnceComesAfterTheQuestion) {
  recording_edges edges;
  sequence_runner* runner_ptr = nullptr;
  edges.on = [&](const seq::action& a) {
    if (a.what != kind::ask_system_state) return;
    runner_ptr->feed([](seq& s) { return s.system_state(t0, false, "unknown"); });
  };
  sequence_runner runner(attach(), edges.handlers());
  runner_ptr = &runner;
  runner.feed([](seq& s) {
    return s.trigger(t0, seq::trigger_kind::sigterm, "SIGTERM",
                     {seq::forward_decision::ask_system_state});
  });
  ASSERT_FALSE(edges.done.empty());
  EXPECT_EQ(edges.done.back(), kind::exit);
  const auto ask = std::find(edges.done.begin(), edges.done.end(), kind::ask_system_state);
  const auto release = std::find(edges.done.begin(), edges.done.end(), kind::release_inhibitor);
  EXPECT_LT(ask, release);
}

// A target found while the actions of a cancel are carried out (watch_target answers at once).
TEST(SequenceRunner, ATargetFoundWhileWatchingIsQueued) {
  recording_edges edges;
  sequence_runner* runner_ptr = nullptr;
  edges.on = [&](const seq::action& a) {
    if (a.what == kind::watch_target) {
      runner_ptr->feed([](seq& s) { return s.target_running(); });
    }
  };
  sequence_runner runner(attach(), edges.handlers());
  runner_ptr = &runner;
  runner.feed(pfs(t0));
  edges.done.clear();
  runner.feed([](seq& s) { return s.cancel("PrepareForShutdown(false)"); });
  const std::vector<kind> want = {kind::note, kind::cancel_timer, kind::retake_inhibitor,
                                  kind::watch_target, kind::become_ready};
  EXPECT_EQ(edges.done, want);
  EXPECT_FALSE(runner.sequence().phase().draining());
  EXPECT_FALSE(runner.sequence().phase().waiting_for_target());
}

// Once the shim finishes (exit), nothing more is carried out: not the rest of the batch, not
// what was queued meanwhile, not what arrives later.
TEST(SequenceRunner, NoActionFollowsExit) {
  recording_edges edges;
  sequence_runner* runner_ptr = nullptr;
  int fed_after_exit = 0;
  edges.on = [&](const seq::action& a) {
    if (a.what == kind::release_inhibitor) {
      // Something that answers while the exit batch is still being carried out.
      runner_ptr->feed([&](seq& s) {
        ++fed_after_exit;
        return s.timer_expired(t0 + 10s);
      });
    }
    if (a.what == kind::exit) runner_ptr->halt();
  };
  sequence_runner runner(attach(), edges.handlers());
  runner_ptr = &runner;
  runner.feed([](seq& s) {
    return s.trigger(t0, seq::trigger_kind::sigterm, "SIGTERM", {seq::forward_decision::skip});
  });
  ASSERT_FALSE(edges.done.empty());
  EXPECT_EQ(edges.done.back(), kind::exit);
  EXPECT_EQ(fed_after_exit, 0);
  runner.feed(pfs(t0 + 1s));
  EXPECT_EQ(edges.done.back(), kind::exit);
  EXPECT_EQ(fed_after_exit, 0);
}

TEST(SequenceRunner, InputsRunInTheOrderTheyArrive) {
  recording_edges edges;
  sequence_runner* runner_ptr = nullptr;
  std::vector<std::string> order;
  edges.on = [&](const seq::action& a) {
    if (a.what != kind::become_unready) return;
    runner_ptr->feed([&](seq&) {
      order.push_back("first");
      return seq::actions{};
    });
    runner_ptr->feed([&](seq&) {
      order.push_back("second");
      return seq::actions{};
    });
  };
  sequence_runner runner(attach(), edges.handlers());
  runner_ptr = &runner;
  runner.feed(pfs(t0));
  EXPECT_EQ(order, (std::vector<std::string>{"first", "second"}));
}

}  // namespace
}  // namespace shim
