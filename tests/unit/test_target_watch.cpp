#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/shutdown_sequence.hpp"
#include "log/event_recorder.hpp"
#include "log/logger.hpp"
#include "log_test_support.hpp"
#include "process/target_watch.hpp"
#include "readiness/shim_status.hpp"
#include "run_until.hpp"
#include "test_child.hpp"

namespace shim {
namespace {

using namespace std::chrono_literals;

// One shim run's target edge over a real io_context, a real event log and a real record of
// signalled processes in `state_dir`; the sequence stays idle, as before a shutdown's signal.
struct watch_run final : target_events {
  watch_run(const std::string& target_name, const std::string& state_dir) {
    cfg.target.name = target_name;
    cfg.target.name_uid = ::getuid();
    cfg.state_dir = state_dir;
    make_watch();
  }
  // Wrapper mode: the command is started by the test (start_child).
  explicit watch_run(std::vector<std::string> command, int signal = SIGTERM) {
    cfg.target.command = std::move(command);
    cfg.signal = signal;
    make_watch();
  }

  void make_watch() {
    watch = std::make_unique<target_watch>(io, cfg, log, events, status.target, sequence, *this);
    watch->start();
  }

  // What the edge reports, counted.
  void row_changed() override { ++changes; }
  void target_exited(const std::string& detail) override { exited.push_back(detail); }
  void target_missed(const std::string& why) override { missed.push_back(why); }
  void target_running_again() override { ++running_again; }
  void target_started() override { ++started; }
  void child_exited(int code) override {
    if (!cfg.target.wrapper()) ADD_FAILURE() << "no child in attach mode";
    child_exits.push_back(code);
  }
  void target_command_line(const std::vector<std::string>& argv,
                           const std::string& source) override {
    command_lines.push_back({argv, source});
  }

  // The event log's records of one kind.
  std::vector<flat_json_object> records(std::string_view kind) const {
    return test::event_records(events_path, kind);
  }

  target_watch::settings cfg;
  boost::asio::io_context io;
  test::captured_output log_output;
  logger log{log_format::text, log_output.fd(), false};
  test::temp_dir log_dir;
  std::string events_path = log_dir.path() + "/events.jsonl";
  event_recorder events{log, events_path};
  shim_status status;
  shutdown_sequence sequence{{.drain_delay = 1s, .has_target = true}};
  std::unique_ptr<target_watch> watch;
  int changes = 0;
  int running_again = 0;
  int started = 0;
  std::vector<std::pair<std::vector<std::string>, std::string>> command_lines;
  std::vector<std::string> exited;
  std::vector<std::string> missed;
  std::vector<int> child_exits;
};

std::string unique_name(const std::string& tag) { return fmt::format("w{}{}", ::getpid(), tag); }

TEST(TargetWatch, FindsTheTargetAtStartAndShowsItInTheStatusRow) {
  const test::temp_dir state;
  const std::string name = unique_name("f");
  auto target = test_child::counting(name);
  watch_run run(name, state.path());
  EXPECT_TRUE(run.status.target.configured);
  EXPECT_TRUE(run.status.target.running);
  EXPECT_EQ(run.status.target.detail, fmt::format("{} (pid {})", name, target->pid()));
  EXPECT_EQ(run.changes, 1);
  ASSERT_EQ(run.records("TargetRunning").size(), 1u);
}

TEST(TargetWatch, OneSignalAndNoneFromARestartedWatchReadingTheSameRecord) {
  const test::temp_dir state;
  const std::string name = unique_name("r");
  auto target = test_child::counting(name);
  {
    watch_run first(name, state.path());
    first.watch->remember_shutdown(shutdown_sequence::clock::now(), "PrepareForShutdown(true)");
    first.watch->forward_signal();
    EXPECT_EQ(first.status.target.signals_forwarded, 1u);
    EXPECT_FALSE(first.status.target.running) << "a target that had the signal does not count";
    ASSERT_EQ(first.records("SignalForwarded").size(), 1u);
    EXPECT_EQ(target->sigterms_so_far(), 1);
    // The sequence asks again (a second trigger cannot, but a bug could): still one.
    first.watch->forward_signal();
    EXPECT_EQ(target->sigterms_so_far(), 0);
  }
  // A restarted shim, logind still preparing the shutdown: it holds on, watching what had the
  // signal.
  watch_run second(name, state.path());
  EXPECT_FALSE(second.status.target.running) << "the record says it had the signal";
  ASSERT_TRUE(second.watch->resumable());
  const auto resumed = second.watch->resume();
  EXPECT_TRUE(resumed.hold.target_running);
  EXPECT_TRUE(resumed.hold.signalled);
  EXPECT_FALSE(resumed.unsignalled_running);
  EXPECT_FALSE(resumed.hold.left_to_kubelet);
  EXPECT_EQ(resumed.hold.cause, "PrepareForShutdown(true)");
  second.watch->forward_signal();
  EXPECT_EQ(target->sigterms_so_far(), 0);
  EXPECT_EQ(second.status.target.signals_forwarded, 0u);
  EXPECT_TRUE(second.records("SignalForwarded").empty());
  EXPECT_TRUE(second.missed.empty()) << "a target that had its signal is not a missed one";
}

// The record outlives a cancelled shutdown: a target that had its signal then, and still runs,
// gets none from a restarted shim at the next shutdown (the record alone knows it).
TEST(TargetWatch, ATargetSignalledBeforeACancelGetsNoneAfterARestart) {
  const test::temp_dir state;
  const std::string name = unique_name("c");
  auto target = test_child::counting(name);
  {
    watch_run first(name, state.path());
    first.watch->remember_shutdown(shutdown_sequence::clock::now(), "PrepareForShutdown(true)");
    first.watch->forward_signal();
    EXPECT_EQ(target->sigterms_so_far(), 1);
    first.watch->forget_shutdown();  // the cancel
  }
  watch_run second(name, state.path());
  EXPECT_FALSE(second.watch->resumable());
  second.watch->forward_signal();
  EXPECT_EQ(target->sigterms_so_far(), 0);
  EXPECT_EQ(second.status.target.signals_forwarded, 0u);
}

TEST(TargetWatch, LeftToKubeletSendsNoneThenTheShimsOneWhenKubeletGoes) {
  const test::temp_dir state;
  const std::string name = unique_name("k");
  auto target = test_child::counting(name);
  watch_run run(name, state.path());
  run.watch->remember_shutdown(shutdown_sequence::clock::now(), "PrepareForShutdown(true)");
  run.watch->forward_signal(run.status.handoff_to_kubelet());
  EXPECT_EQ(target->sigterms_so_far(), 0);
  EXPECT_EQ(run.records("SignalLeftToKubelet").size(), 1u);
  EXPECT_EQ(run.status.target.signals_forwarded, 0u);

  // kubelet's lock went first: the shim's one signal, marked as instead of kubelet's.
  run.watch->forward_signal();
  EXPECT_EQ(target->sigterms_so_far(), 1);
  const auto forwarded = run.records("SignalForwarded");
  ASSERT_EQ(forwarded.size(), 1u);
  EXPECT_EQ(test::get(forwarded[0], "instead_of").text, "kubelet");
  run.watch->forward_signal();
  EXPECT_EQ(target->sigterms_so_far(), 0);

  // And the record says it is the shim's now: a restarted run sends none either.
  watch_run restarted(name, state.path());
  const auto resumed = restarted.watch->resume();
  EXPECT_FALSE(resumed.hold.left_to_kubelet) << "taken back from kubelet";
  restarted.watch->forward_signal();
  EXPECT_EQ(target->sigterms_so_far(), 0);
}

TEST(TargetWatch, NoTargetRunningIsReportedAsMissedWithTheReason) {
  const test::temp_dir state;
  watch_run run(unique_name("n"), state.path());
  EXPECT_FALSE(run.status.target.running);
  run.watch->forward_signal();
  ASSERT_EQ(run.missed.size(), 1u);
  EXPECT_EQ(run.missed[0],
            fmt::format("no process named {} owned by uid {}", unique_name("n"), ::getuid()));
  EXPECT_EQ(run.status.target.signals_forwarded, 0u);
}

TEST(TargetWatch, TheSignalledTargetsExitReachesTheSequenceOnce) {
  const test::temp_dir state;
  const std::string name = unique_name("e");
  auto target = test_child::counting(name);
  watch_run run(name, state.path());
  run.watch->forward_signal();
  ASSERT_EQ(target->sigterms_so_far(), 1);
  ::kill(target->pid(), SIGKILL);
  target->wait_exited();
  run.io.run_for(10s);  // returns once the pidfd watches are done
  EXPECT_EQ(run.exited, std::vector<std::string>{"the target exited"});
  EXPECT_EQ(run.records("TargetExited").size(), 1u);
}

// A signal the child cannot be sent (an invalid number: EINVAL) is logged where it failed. Nothing
// is thrown out of forward_signal: a throw skipped the rest of the sequence's batch (an arm_timer
// among it), and the failure reached the log only through shutdown_shim::run()'s catch.
TEST(TargetWatch, AFailedSignalToTheChildIsLoggedNotThrownIntoTheLoop) {
  watch_run run(std::vector<std::string>{"sleep", "30"}, 1000);
  run.watch->start_child();
  ASSERT_NE(run.watch->child(), nullptr);
  const pid_t pid = run.watch->child()->pid();
  EXPECT_NO_THROW(run.watch->forward_signal());
  EXPECT_NE(
      run.log_output.text().find(fmt::format(
          "ERROR a handler on the event loop failed; the loop goes on error=\"send signal 1000 "
          "to PID {}: Invalid argument\"",
          pid)),
      std::string::npos)
      << run.log_output.text();
  EXPECT_TRUE(run.missed.empty());
  EXPECT_EQ(run.status.target.signals_forwarded, 0u);
  EXPECT_TRUE(run.records("SignalForwarded").empty());
  EXPECT_TRUE(run.watch->child()->running());

  ::kill(pid, SIGKILL);
  run.io.run_for(10s);  // returns once the child's exit is delivered
  EXPECT_EQ(run.child_exits, std::vector<int>{137});
}

// Issue 32: what kube-apiserver runs with is read from its command line once it is found.
TEST(TargetWatch, TheTargetsCommandLineIsReportedWhenItIsFound) {
  const test::temp_dir state;
  const std::string name = unique_name("l");
  auto target = test_child::counting(name);
  watch_run run(name, state.path());
  ASSERT_EQ(run.command_lines.size(), 1u);
  EXPECT_EQ(run.command_lines[0].second, fmt::format("pid {}'s command line", target->pid()));
  EXPECT_FALSE(run.command_lines[0].first.empty()) << "the test binary's own argv, inherited";

  watch_run wrapper(std::vector<std::string>{"sleep", "30", "--shutdown-delay-duration=5s"});
  ASSERT_TRUE(wrapper.watch->start_child());
  ASSERT_EQ(wrapper.command_lines.size(), 1u);
  EXPECT_EQ(wrapper.command_lines[0].second, "the wrapped command");
  EXPECT_EQ(wrapper.command_lines[0].first.back(), "--shutdown-delay-duration=5s");
  ::kill(wrapper.watch->child()->pid(), SIGKILL);
  wrapper.io.run_for(10s);
}

// Issue 32: kubelet restarts a static pod's container that exits. During a hold the edge looks
// for the target again once every process of it has exited, reports one that did not have the
// signal (started), and signal_restarted gives it its own one signal, never one to a process
// that had it.
TEST(TargetWatch, ATargetRestartedDuringTheHoldIsFoundAndGetsItsOneSignal) {
  const test::temp_dir state;
  const std::string name = unique_name("s");
  auto first = test_child::counting(name);
  watch_run run(name, state.path());
  const auto now = shutdown_sequence::clock::now();
  run.sequence.trigger(now, shutdown_sequence::trigger_kind::prepare_for_shutdown,
                       "PrepareForShutdown(true)", {shutdown_sequence::forward_decision::forward});
  ASSERT_TRUE(run.sequence.holding());
  run.watch->remember_shutdown(now, "PrepareForShutdown(true)");
  run.watch->forward_signal();
  ASSERT_EQ(first->sigterms_so_far(), 1);
  ::kill(first->pid(), SIGKILL);
  first->wait_exited();
  ASSERT_TRUE(run_until(run.io, [&] { return !run.exited.empty(); }));
  EXPECT_EQ(run.started, 0);

  auto second = test_child::counting(name);  // kubelet started it again
  ASSERT_TRUE(run_until(run.io, [&] { return run.started > 0; }));
  EXPECT_EQ(run.started, 1);
  run.watch->signal_restarted();
  EXPECT_EQ(second->sigterms_so_far(), 1);
  const auto restarted = run.records("TargetRestarted");
  ASSERT_EQ(restarted.size(), 1u);
  EXPECT_EQ(test::get(restarted[0], "target_pid").text, std::to_string(second->pid()));
  EXPECT_EQ(test::get(restarted[0], "signal_by").text, "shim");
  EXPECT_EQ(run.status.target.signals_forwarded, 2u);
  // Asked again: nothing new runs.
  run.watch->signal_restarted();
  run.watch->forward_signal();
  EXPECT_EQ(second->sigterms_so_far(), 0);

  // A restarted shim finds it in the record: none from it either.
  watch_run again(name, state.path());
  const auto resumed = again.watch->resume();
  EXPECT_TRUE(resumed.hold.target_running);
  EXPECT_FALSE(resumed.unsignalled_running);
  again.watch->signal_restarted();
  EXPECT_EQ(second->sigterms_so_far(), 0);
}

// A restarted shim whose earlier run signalled a process that is gone, while kubelet's new one
// runs: the hold is resumed (not started anew), and the new one is owed its signal.
TEST(TargetWatch, ResumeReportsATargetTheEarlierRunDidNotSignal) {
  const test::temp_dir state;
  const std::string name = unique_name("u");
  {
    auto gone = test_child::counting(name);
    watch_run first(name, state.path());
    first.watch->remember_shutdown(shutdown_sequence::clock::now(), "PrepareForShutdown(true)");
    first.watch->forward_signal();
    ASSERT_EQ(gone->sigterms_so_far(), 1);
  }
  auto restarted = test_child::counting(name);
  watch_run second(name, state.path());
  ASSERT_TRUE(second.watch->resumable());
  const auto resumed = second.watch->resume();
  EXPECT_TRUE(resumed.hold.signalled);
  EXPECT_TRUE(resumed.hold.target_running) << "the hold waits for the new one";
  EXPECT_TRUE(resumed.unsignalled_running);
  second.watch->signal_restarted();
  EXPECT_EQ(restarted->sigterms_so_far(), 1);
}

}  // namespace
}  // namespace shim
