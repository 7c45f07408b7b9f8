// The report's classifier over hand-made event logs: one verdict per test, then the edge cases
// (torn line, no boot_id, two boots, a cancel then a reboot, a restart mid-hold, a rotated log).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "event_log_builder.hpp"
#include "log_test_support.hpp"
#include "report/shutdown_history.hpp"

namespace shim {
namespace {

using test::event_log_builder;
using test::kBootA;
using test::kBootB;
using test::kBootC;
using testing::HasSubstr;

// This process runs in another boot than any of the hand-made ones.
constexpr std::string_view kRunningBoot = "ffffffff000000000000000000000000";

struct classified {
  std::vector<shutdown_history::boot> boots;
  std::uint64_t skipped = 0;
};

classified classify(const std::string& log, std::size_t keep = 10,
                    std::string_view running = kRunningBoot) {
  shutdown_history history(keep, std::string(running));
  const auto skipped = test::feed(history, log);
  return {history.boots(), skipped};
}

shutdown_verdict only_verdict(const std::string& log) {
  const auto c = classify(log);
  EXPECT_EQ(c.boots.size(), 1u);
  return c.boots.empty() ? shutdown_verdict::in_progress : c.boots.back().verdict();
}

// --- one per verdict
// ------------------------------------------------------------------------------

TEST(ShutdownHistory, CleanWithItsFigures) {
  event_log_builder log;
  log.start(1).clean_shutdown(100, 1.25);
  const auto c = classify(log.text());
  ASSERT_EQ(c.boots.size(), 1u);
  const auto& b = c.boots[0];
  EXPECT_EQ(b.boot_id, kBootA);
  EXPECT_FALSE(b.current);
  EXPECT_EQ(b.verdict(), shutdown_verdict::clean);
  ASSERT_TRUE(b.last_shutdown);
  const auto& s = *b.last_shutdown;
  EXPECT_EQ(s.trigger(), "PrepareForShutdown(true)");
  EXPECT_EQ(s.wall(), "2026-11-29T16:01:40.000000Z");
  EXPECT_DOUBLE_EQ(*s.unready_to_signal(), 0.002);
  EXPECT_DOUBLE_EQ(*s.signal_to_target_exit(), 1.248);
  EXPECT_DOUBLE_EQ(*s.hold(), 3.001);
  EXPECT_EQ(s.inhibit_delay_max_usec(), 90'000'000u);
  EXPECT_EQ(s.holder_pid(), 100);
  EXPECT_EQ(c.skipped, 0u);
}

TEST(ShutdownHistory, CutShortWhenTheRecordsStopBeforeTheRelease) {
  event_log_builder log;
  log.start(1)
      .add("ShutdownInitiated", 100, "PrepareForShutdown(true)")
      .add("SignalForwarded", 100, "PrepareForShutdown(true)")
      .add("TargetExited", 101.5, "pidfd");
  const auto c = classify(log.text());
  ASSERT_EQ(c.boots.size(), 1u);
  EXPECT_EQ(c.boots[0].verdict(), shutdown_verdict::cut_short);
  EXPECT_FALSE(c.boots[0].last_shutdown->hold());
  EXPECT_DOUBLE_EQ(*c.boots[0].last_shutdown->records_span(), 1.5);
  EXPECT_THAT(c.boots[0].detail(), HasSubstr("pid 100"));
  EXPECT_THAT(c.boots[0].detail(), HasSubstr("1.5 s into the hold"));
}

TEST(ShutdownHistory, NoSignalWhenNoTargetHadIt) {
  // forward_signal found nothing: the drain still runs, the lock is released after it.
  event_log_builder log;
  log.start(1)
      .add("ShutdownInitiated", 100, "PrepareForShutdown(true)")
      .add("DrainElapsed", 103, "the drain delay has passed")
      .add("InhibitorReleased", 103, "PrepareForShutdown(true)");
  EXPECT_EQ(only_verdict(log.text()), shutdown_verdict::no_signal);
}

TEST(ShutdownHistory, NoSignalWhenTheWrappedChildHadAlreadyExited) {
  // Wrapper mode: the child ends on its own; the shim becomes unready and exits, no lock release.
  event_log_builder log;
  log.start(1)
      .add("TargetExited", 50, "child", R"("exit_code":"1")")
      .add("ShutdownInitiated", 50, "the child exited with 1");
  const auto c = classify(log.text());
  ASSERT_EQ(c.boots.size(), 1u);
  EXPECT_EQ(c.boots[0].verdict(), shutdown_verdict::no_signal);
  EXPECT_EQ(c.boots[0].detail(), "the target had exited before the shutdown");
}

TEST(ShutdownHistory, NotForwardedWhenTheLockIsReleasedBeforeAnyDrain) {
  // A SIGTERM while PID 1 is not stopping: not passed on, the lock released at once. Issue 22:
  // that is a restart of the shim (as an older shim recorded it), no shutdown.
  event_log_builder log;
  log.start(1).add("ShutdownInitiated", 100, "SIGTERM").add("InhibitorReleased", 100.01, "SIGTERM");
  const auto c = classify(log.text());
  ASSERT_EQ(c.boots.size(), 1u);
  EXPECT_EQ(c.boots[0].verdict(), shutdown_verdict::restart);
  EXPECT_FALSE(c.boots[0].last_shutdown);
  EXPECT_EQ(c.boots[0].restarts, 1u);
  EXPECT_EQ(c.boots[0].detail(),
            "no system shutdown on record in this boot; the shim was restarted (1 restart, the "
            "last at 2026-11-29T16:01:40.000000Z)");
}

// Issue 22: today's shim records a restart as such; it is counted, and the boot's system shutdown
// (a cancelled one here) stays what the boot is judged by, whichever record a restart is told by.
TEST(ShutdownHistory, RestartsAreCountedApartFromTheBootsShutdown) {
  for (const char* restart : {"Restart", "ShutdownInitiated"}) {
    event_log_builder log;
    log.start(1)
        .add("ShutdownInitiated", 40, "PrepareForShutdown(true)")
        .add("ShutdownCancelled", 41, "PrepareForShutdown(false): the shutdown was cancelled")
        .add(restart, 50, "SIGTERM")
        .add("InhibitorReleased", 50.001, "SIGTERM")
        .pid(200)
        .start(51)
        .add(restart, 70, "SIGTERM")
        .add("InhibitorReleased", 70.001, "SIGTERM");
    const auto c = classify(log.text());
    ASSERT_EQ(c.boots.size(), 1u) << restart;
    EXPECT_EQ(c.boots[0].verdict(), shutdown_verdict::cancelled) << restart;
    EXPECT_EQ(c.boots[0].restarts, 2u) << restart;
    EXPECT_EQ(c.boots[0].restarts_text(), "2 restarts, the last at 2026-11-29T16:01:10.000000Z");
  }
}

// Boots of restarts only are kept among and after the last shutdowns, never more of them than
// boots asked for, and never at the cost of a shutdown.
TEST(ShutdownHistory, BootsOfRestartsOnlyAreKeptBesideTheLastShutdowns) {
  event_log_builder log;
  log.start(1).add("Restart", 10, "SIGTERM");               // A: before the kept shutdowns
  log.boot(kBootB).start(1).clean_shutdown(100);            // B
  log.boot(kBootC).start(1).add("Restart", 10, "SIGTERM");  // C
  log.boot("dddddddd111111112222222233333333").start(1).clean_shutdown(100);  // D
  const auto c = classify(log.text(), 2);
  ASSERT_EQ(c.boots.size(), 3u);
  EXPECT_EQ(c.boots[0].boot_id, kBootB);
  EXPECT_EQ(c.boots[1].boot_id, kBootC);
  EXPECT_EQ(c.boots[1].verdict(), shutdown_verdict::restart);
  EXPECT_EQ(c.boots[2].verdict(), shutdown_verdict::clean);

  log.boot("eeeeeeee111111112222222233333333").start(1).add("Restart", 10, "SIGTERM");
  log.boot("ffffffff111111112222222233333333").start(1).add("Restart", 10, "SIGTERM");
  const auto more = classify(log.text(), 2);
  ASSERT_EQ(more.boots.size(), 4u) << "2 boots asked for: at most 4 in all";
  EXPECT_EQ(more.boots[0].boot_id, kBootC);
  EXPECT_EQ(more.boots[3].boot_id, "ffffffff111111112222222233333333");
}

TEST(ShutdownHistory, Cancelled) {
  event_log_builder log;
  log.start(1)
      .add("ShutdownInitiated", 100, "PrepareForShutdown(true)")
      .add("SignalForwarded", 100, "PrepareForShutdown(true)")
      .add("ShutdownCancelled", 101, "PrepareForShutdown(false): the shutdown was cancelled");
  const auto c = classify(log.text());
  ASSERT_EQ(c.boots.size(), 1u);
  EXPECT_EQ(c.boots[0].verdict(), shutdown_verdict::cancelled);
  EXPECT_EQ(c.boots[0].detail(), "PrepareForShutdown(false): the shutdown was cancelled");
}

TEST(ShutdownHistory, InProgressOnlyInTheRunningBoot) {
  event_log_builder log;
  log.start(1).add("ShutdownInitiated", 100, "PrepareForShutdown(true)");
  const auto running = classify(log.text(), 10, kBootA);
  ASSERT_EQ(running.boots.size(), 1u);
  EXPECT_TRUE(running.boots[0].current);
  EXPECT_EQ(running.boots[0].verdict(), shutdown_verdict::in_progress);
  // The same records seen from a later boot: that boot ended under the hold.
  EXPECT_EQ(only_verdict(log.text()), shutdown_verdict::cut_short);
}

// --- edge cases
// -----------------------------------------------------------------------------------

TEST(ShutdownHistory, ATornLastLineIsSkipped) {
  event_log_builder log;
  log.start(1).clean_shutdown(100).raw(R"({"event":"Started","wall":"2026-11-29T16:)");
  const auto c = classify(log.text());
  ASSERT_EQ(c.boots.size(), 1u);
  EXPECT_EQ(c.boots[0].verdict(), shutdown_verdict::clean);
  EXPECT_EQ(c.skipped, 1u);
}

TEST(ShutdownHistory, ATornLineInTheMiddleIsSkipped) {
  // After ENOSPC the recorder starts the next record on a fresh line.
  event_log_builder log;
  log.start(1)
      .add("ShutdownInitiated", 100, "PrepareForShutdown(true)")
      .raw(R"({"event":"SignalForw)")
      .raw("\n")
      .add("SignalForwarded", 100, "PrepareForShutdown(true)")
      .add("DrainElapsed", 103)
      .add("InhibitorReleased", 103);
  const auto c = classify(log.text());
  ASSERT_EQ(c.boots.size(), 1u);
  EXPECT_EQ(c.boots[0].verdict(), shutdown_verdict::clean);
  EXPECT_EQ(c.skipped, 1u);
}

TEST(ShutdownHistory, RecordsWithoutBootIdAreSplitAtARestartedBootClock) {
  // An older shim: no boot_id. The second boot's Started has a smaller CLOCK_BOOTTIME.
  event_log_builder log;
  log.boot("", 5'000'000)
      .start(1)
      .add("ShutdownInitiated", 100, "PrepareForShutdown(true)")
      .add("SignalForwarded", 100)
      .boot("", 2'000'000)
      .start(1)
      .clean_shutdown(200);
  const auto c = classify(log.text());
  ASSERT_EQ(c.boots.size(), 2u);
  EXPECT_EQ(c.boots[0].boot_id, "");
  EXPECT_EQ(c.boots[0].verdict(), shutdown_verdict::cut_short);
  EXPECT_EQ(c.boots[1].verdict(), shutdown_verdict::clean);
  EXPECT_FALSE(c.boots[1].current);
}

TEST(ShutdownHistory, AResumedHoldIsNotABootBoundaryWithoutBootId) {
  // ShutdownResumed is stamped back to the earlier run's unready moment on purpose.
  event_log_builder log;
  log.boot("")
      .start(1)
      .add("ShutdownInitiated", 100, "PrepareForShutdown(true)")
      .add("SignalForwarded", 100)
      .pid(200)
      .start(101)
      .add("ShutdownResumed", 100, "PrepareForShutdown(true)")
      .add("DrainElapsed", 103)
      .add("InhibitorReleased", 103);
  const auto c = classify(log.text());
  ASSERT_EQ(c.boots.size(), 1u);
}

TEST(ShutdownHistory, AnUpgradeMidBootNamesTheBoot) {
  event_log_builder log;
  log.boot("").start(1).boot(kBootA).pid(200).start(50).clean_shutdown(100);
  const auto c = classify(log.text());
  ASSERT_EQ(c.boots.size(), 1u);
  EXPECT_EQ(c.boots[0].boot_id, kBootA);
}

TEST(ShutdownHistory, TwoBootsOldestFirst) {
  event_log_builder log;
  log.start(1).clean_shutdown(100).boot(kBootB).pid(300).start(1).add("ShutdownInitiated", 80,
                                                                      "SIGTERM");
  const auto c = classify(log.text());
  ASSERT_EQ(c.boots.size(), 2u);
  EXPECT_EQ(c.boots[0].boot_id, kBootA);
  EXPECT_EQ(c.boots[0].verdict(), shutdown_verdict::clean);
  EXPECT_EQ(c.boots[1].boot_id, kBootB);
  EXPECT_EQ(c.boots[1].verdict(), shutdown_verdict::cut_short);
  EXPECT_EQ(c.boots[1].last_shutdown->trigger(), "SIGTERM");
}

TEST(ShutdownHistory, ABootWithoutAShutdownIsLeftOut) {
  event_log_builder log;
  log.start(1).clean_shutdown(100).boot(kBootB).start(1).boot(kBootC).start(1);
  const auto c = classify(log.text());
  ASSERT_EQ(c.boots.size(), 1u);
  EXPECT_EQ(c.boots[0].boot_id, kBootA);
}

TEST(ShutdownHistory, KeepsOnlyTheLastBoots) {
  event_log_builder log;
  log.start(1).clean_shutdown(100);
  log.boot(kBootB).start(1).clean_shutdown(100);
  log.boot(kBootC).start(1).add("ShutdownInitiated", 100, "SIGTERM");
  const auto c = classify(log.text(), 2);
  ASSERT_EQ(c.boots.size(), 2u);
  EXPECT_EQ(c.boots[0].boot_id, kBootB);
  EXPECT_EQ(c.boots[1].boot_id, kBootC);
  EXPECT_EQ(classify(log.text(), 1).boots.at(0).boot_id, kBootC);
}

TEST(ShutdownHistory, ACancelThenACleanRebootInTheSameBootIsClean) {
  event_log_builder log;
  log.start(1)
      .add("ShutdownInitiated", 100, "PrepareForShutdown(true)")
      .add("SignalForwarded", 100)
      .add("ShutdownCancelled", 101, "PrepareForShutdown(false): the shutdown was cancelled")
      .add("InhibitorTaken", 101, "re-taken")
      .clean_shutdown(200);
  const auto c = classify(log.text());
  ASSERT_EQ(c.boots.size(), 1u);
  EXPECT_EQ(c.boots[0].verdict(), shutdown_verdict::clean);
  EXPECT_DOUBLE_EQ(*c.boots[0].last_shutdown->hold(), 3.001);
}

TEST(ShutdownHistory, ACleanRebootThenALateCancelIsCancelled) {
  // logind gave up the reboot after the shim had let go: the node did not go down.
  event_log_builder log;
  log.start(1).clean_shutdown(100).add("ShutdownCancelled", 110, "PrepareForShutdown(false)");
  EXPECT_EQ(only_verdict(log.text()), shutdown_verdict::cancelled);
}

TEST(ShutdownHistory, ARestartMidHoldIsCutShortEvenIfTheNewRunReleases) {
  // kill -9 under the lock: logind went on at once; the restarted shim held nothing.
  event_log_builder log;
  log.start(1)
      .add("ShutdownInitiated", 100, "PrepareForShutdown(true)")
      .add("SignalForwarded", 100)
      .pid(200)
      .start(101)
      .add("ShutdownResumed", 100, "PrepareForShutdown(true)")
      .add("TargetExited", 101.5)
      .add("DrainElapsed", 103)
      .add("InhibitorReleased", 103, "hold over (no lock was held)");
  const auto c = classify(log.text(), 10, kBootA);
  ASSERT_EQ(c.boots.size(), 1u);
  EXPECT_EQ(c.boots[0].verdict(), shutdown_verdict::cut_short);
  EXPECT_EQ(c.boots[0].detail(),
            "the shim (pid 100) stopped 0.0 s into the hold without releasing the lock; pid 200 "
            "started after it");
}

TEST(ShutdownHistory, ANotForwardedRestartThenACleanRebootIsClean) {
  event_log_builder log;
  log.start(1)
      .add("ShutdownInitiated", 50, "SIGTERM")
      .add("InhibitorReleased", 50, "SIGTERM")
      .pid(200)
      .start(51)
      .clean_shutdown(100);
  EXPECT_EQ(only_verdict(log.text()), shutdown_verdict::clean);
}

TEST(ShutdownHistory, TheDelayMaxFromTheRecordThatHasIt) {
  event_log_builder log;
  log.start(1)
      .add("ShutdownInitiated", 100, "PrepareForShutdown(true)")
      .add("SignalForwarded", 100);
  EXPECT_FALSE(classify(log.text()).boots.at(0).last_shutdown->inhibit_delay_max_usec());
}

TEST(ShutdownHistory, ReadsTheRotatedFileFirst) {
  test::temp_dir dir;
  const std::string path = dir.path() + "/events.jsonl";
  event_log_builder older, newer;
  older.start(1).clean_shutdown(100);
  newer.boot(kBootB).start(1).add("ShutdownInitiated", 100, "SIGTERM");
  // The rotated file ends in a torn line; the new one starts with EventLogReopened.
  std::ofstream(path + ".1") << older.text() << R"({"event":"Sig)";
  std::ofstream(path) << newer.text();
  auto read = shutdown_history::read(path, 10, std::string(kRunningBoot));
  ASSERT_TRUE(read) << read.error();
  const auto& boots = read.value().boots;
  ASSERT_EQ(boots.size(), 2u);
  EXPECT_EQ(boots[0].boot_id, kBootA);
  EXPECT_EQ(boots[0].verdict(), shutdown_verdict::clean);
  EXPECT_EQ(boots[1].boot_id, kBootB);
  EXPECT_EQ(read.value().files_read, 2u);
  EXPECT_EQ(read.value().skipped_lines, 1u);
}

TEST(ShutdownHistory, NoFileIsAnEmptyHistoryAndADirectoryAnError) {
  test::temp_dir dir;
  auto none = shutdown_history::read(dir.path() + "/none.jsonl", 10, "");
  ASSERT_TRUE(none);
  EXPECT_EQ(none.value().files_read, 0u);
  EXPECT_TRUE(none.value().boots.empty());
  auto directory = shutdown_history::read(dir.path(), 10, "");
  ASSERT_FALSE(directory);
  EXPECT_THAT(directory.error(), HasSubstr(dir.path()));
}

}  // namespace
}  // namespace shim
