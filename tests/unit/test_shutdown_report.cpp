// shutdown-shim report: its table and JSON, and the outcome main() turns into the exit
// status.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <utility>
#include <vector>

#include "event_log_builder.hpp"
#include "log_test_support.hpp"
#include "report/shutdown_report.hpp"

namespace shim {
namespace {

using test::event_log_builder;
using test::kBootA;
using test::kBootB;
using testing::HasSubstr;
using testing::Not;
using namespace std::chrono_literals;

constexpr std::string_view kRunningBoot = "ffffffff000000000000000000000000";

class ShutdownReport : public ::testing::Test {
 protected:
  test::temp_dir dir;
  test::temp_dir journal;  // an empty journal directory: no boot is in it
  const std::string path = dir.path() + "/events.jsonl";

  report run(const std::string& log, bool json = false) {
    std::ofstream(path) << log;
    report_options options;
    options.event_log = path;
    options.json = json;
    options.journal_dir = journal.path();
    return make_report(options, std::string(kRunningBoot));
  }
};

TEST_F(ShutdownReport, CleanTable) {
  event_log_builder log;
  log.start(1).clean_shutdown(100, 1.25);
  const auto r = run(log.text());
  EXPECT_EQ(r.result, report::outcome::clean);
  EXPECT_EQ(r.note, "");
  EXPECT_EQ(
      r.out,
      "BOOT      SHUTDOWN AT (UTC)     TRIGGER                   UNREADY>SIGNAL  SIGNAL>EXIT  "
      "HOLD  LOGIND MAX  VERDICT\n"
      "aaaaaaaa  2026-11-29 16:01:40Z  PrepareForShutdown(true)  0.0s            1.2s         "
      "3.0s  90s         clean\n");
}

// Issue 13: kubelet's graceful node shutdown sent the signal; the shim counted it. The shim's
// words of what kubelet was expected to do (the record's message) get a line of their own.
TEST_F(ShutdownReport, KubeletsSignalCountsAndItsExpectationIsShown) {
  event_log_builder log;
  const auto pfs = event_log_builder::kPfs;
  log.start(1)
      .add("ShutdownInitiated", 100, pfs, R"("inhibit_delay_max_usec":"90000000")")
      .add("KubeletShutdown", 100.0001, pfs, R"("kubelet_pid":"7","shim_signals":"false")")
      .add("SignalLeftToKubelet", 100.002, pfs, R"("target_pid":"42")")
      .add("TargetExited", 101.2, "pidfd", R"("target_pid":"42")")
      .add("DrainElapsed", 103, "the drain delay has passed")
      .add("InhibitorReleased", 103.001, pfs);
  const auto table = run(log.text());
  EXPECT_EQ(table.result, report::outcome::clean);
  EXPECT_THAT(table.out, HasSubstr("clean\naaaaaaaa: kubelet: KubeletShutdown\n"));
  const auto json = run(log.text(), true);
  EXPECT_THAT(json.out,
              HasSubstr(R"("verdict":"clean","signal_by":"kubelet",)"
                        R"("kubelet":"KubeletShutdown","detail":"the signal was left to kubelet)"));
}

// Issue 23: what the load balancer's checkers did in the drain (DrainElapsed's lb) is shown on a
// line of its own, and in the JSON.
TEST_F(ShutdownReport, TheLoadBalancersDrainIsShown) {
  event_log_builder log;
  const auto pfs = event_log_builder::kPfs;
  log.start(1)
      .add("ShutdownInitiated", 100, pfs)
      .add("SignalForwarded", 100.002, pfs, R"("target_pid":"42")")
      .add("TargetExited", 101.2, "pidfd", R"("target_pid":"42")")
      .add("DrainElapsed", 103, "the drain delay has passed",
           R"("lb":"1 checker saw 3 x 503 by +2.1s","lb_fell_ms":"2100")")
      .add("InhibitorReleased", 103.001, pfs);
  const auto table = run(log.text());
  EXPECT_EQ(table.result, report::outcome::clean);
  EXPECT_THAT(table.out,
              HasSubstr("clean\naaaaaaaa: load balancer: 1 checker saw 3 x 503 by +2.1s\n"));
  const auto json = run(log.text(), true);
  EXPECT_THAT(json.out, HasSubstr(R"("load_balancer":"1 checker saw 3 x 503 by +2.1s","detail":)"));
}

// Issue 32: kubelet restarted kube-apiserver during the hold; the new one got its own signal and
// the hold waited for it. The shutdown's signal stays the first; the report counts the restart.
// And kubelet gone after its SIGTERM time is said, with no second signal.
TEST_F(ShutdownReport, ARestartedTargetIsCountedAndKubeletGoneIsSaid) {
  event_log_builder log;
  const auto pfs = event_log_builder::kPfs;
  log.start(1)
      .add("ShutdownInitiated", 100, pfs)
      .add("SignalForwarded", 100.002, pfs, R"("target_pid":"42")")
      .add("TargetExited", 102, "pidfd", R"("target_pid":"42")")
      .add("TargetRestarted", 103.2, pfs, R"("target_pid":"43","signal_by":"shim")")
      .add("KubeletGone", 104, "kubelet went after its SIGTERM time: its signal went")
      .add("DrainElapsed", 110, "the drain delay has passed")
      .add("TargetExited", 111, "pidfd", R"("target_pid":"43")")
      .add("InhibitorReleased", 111.001, pfs);
  const auto table = run(log.text());
  EXPECT_EQ(table.result, report::outcome::clean);
  EXPECT_THAT(table.out, HasSubstr("aaaaaaaa: kube-apiserver ran again 1 time during the hold "
                                   "(kubelet restarted it); each got its own one signal\n"));
  // The builder's message is the event's name: the record's message gets a line of its own.
  EXPECT_THAT(table.out, HasSubstr("signal\naaaaaaaa: KubeletGone\n"));
  const auto json = run(log.text(), true);
  EXPECT_THAT(json.out, HasSubstr(R"("unready_to_signal_seconds":0.002,)"));
  EXPECT_THAT(json.out, HasSubstr(R"("targets_restarted":1,"kubelet_gone":"KubeletGone",)"));
}

// Issue 19: kubelet's lock went before the target exited, and the shim sent the signal itself:
// the shim's signal is the one, at its time.
TEST_F(ShutdownReport, TheShimsSignalAfterKubeletsLockWentIsTheOne) {
  event_log_builder log;
  const auto pfs = event_log_builder::kPfs;
  log.start(1)
      .add("ShutdownInitiated", 100, pfs, R"("inhibit_delay_max_usec":"90000000")")
      .add("KubeletShutdown", 100.0001, pfs, R"("kubelet_pid":"7","shim_signals":"false")")
      .add("SignalLeftToKubelet", 100.002, pfs, R"("target_pid":"42")")
      .add("SignalForwarded", 101.5, pfs, R"("target_pid":"42","instead_of":"kubelet")")
      .add("DrainElapsed", 103, "the drain delay has passed")
      .add("TargetExited", 104.5, "pidfd", R"("target_pid":"42")")
      .add("InhibitorReleased", 104.501, pfs);
  const auto json = run(log.text(), true);
  EXPECT_EQ(json.result, report::outcome::clean);
  EXPECT_THAT(json.out, HasSubstr(R"("unready_to_signal_seconds":1.500,)"));
  EXPECT_THAT(json.out, HasSubstr(R"("signal_to_target_exit_seconds":3.000,)"));
  EXPECT_THAT(json.out, HasSubstr(R"("verdict":"clean","signal_by":"shim",)"));
  EXPECT_THAT(json.out, HasSubstr(R"("detail":"kubelet's lock went before kube-apiserver had )"
                                  R"(exited and the shim sent the signal)"));
}

TEST_F(ShutdownReport, CleanJson) {
  event_log_builder log;
  log.start(1).clean_shutdown(100, 1.25);
  const auto r = run(log.text(), true);
  EXPECT_EQ(r.result, report::outcome::clean);
  EXPECT_EQ(
      r.out,
      R"({"boot_id":"aaaaaaaa111111112222222233333333","current_boot":false,"restarts":0,)"
      R"j("wall":"2026-11-29T16:01:40.000000Z","trigger":"PrepareForShutdown(true)",)j"
      R"("unready_to_signal_seconds":0.002,"signal_to_target_exit_seconds":1.248,)"
      R"("hold_seconds":3.001,"records_span_seconds":3.001,"inhibit_delay_max_seconds":90.000,)"
      R"("verdict":"clean","signal_by":"shim",)"
      R"("detail":"signal forwarded, the drain ran in full, then the lock was released"})"
      "\n");
}

TEST_F(ShutdownReport, TheMostRecentShutdownDecides) {
  event_log_builder log;
  log.start(1)
      .add("ShutdownInitiated", 100, "PrepareForShutdown(true)")
      .add("SignalForwarded", 100.5, "PrepareForShutdown(true)")
      .boot(kBootB)
      .start(1)
      .clean_shutdown(100);
  EXPECT_EQ(run(log.text()).result, report::outcome::clean);

  log.boot(test::kBootC).start(1).add("ShutdownInitiated", 100, "PrepareForShutdown(true)");
  const auto r = run(log.text());
  EXPECT_EQ(r.result, report::outcome::not_clean);
  EXPECT_THAT(r.out, HasSubstr("cut short (cause unknown: no journal for that boot)"));
  EXPECT_THAT(r.out, HasSubstr("aaaaaaaa: the records of the shim (pid 100) stop 0.5 s into the "
                               "hold, before the lock was released\n"));
  EXPECT_THAT(r.out, HasSubstr(">=0.5s"));
}

TEST_F(ShutdownReport, CutShortJsonSaysTheCauseIsUnknownWithoutAJournal) {
  event_log_builder log;
  log.start(1).add("ShutdownInitiated", 100, "SIGTERM");
  const auto r = run(log.text(), true);
  EXPECT_EQ(r.result, report::outcome::not_clean);
  EXPECT_THAT(r.out, HasSubstr(R"("hold_seconds":null,"records_span_seconds":0.000,)"
                               R"("inhibit_delay_max_seconds":null,"verdict":"cut short",)"
                               R"("cut_short_cause":"unknown",)"));
}

TEST_F(ShutdownReport, EveryVerdictButCleanIsNotClean) {
  event_log_builder cancelled, not_forwarded, no_signal;
  cancelled.start(1).add("ShutdownInitiated", 100).add("ShutdownCancelled", 101);
  not_forwarded.start(1).add("ShutdownInitiated", 100, "SIGTERM").add("InhibitorReleased", 100);
  no_signal.start(1)
      .add("ShutdownInitiated", 100)
      .add("DrainElapsed", 103)
      .add("InhibitorReleased", 103);
  for (const auto* log : {&cancelled, &no_signal}) {
    EXPECT_EQ(run(log->text()).result, report::outcome::not_clean) << log->text();
  }
  // Issue 22: what was `not forwarded` (the shim's SIGTERM, the lock released at once) is a
  // restart, no shutdown at all.
  const auto restart = run(not_forwarded.text());
  EXPECT_EQ(restart.result, report::outcome::no_shutdown) << restart.out;
  EXPECT_THAT(restart.out, HasSubstr("  restart\n"));
}

// Issue 22: a `systemctl restart shutdown-shim` read as a failed shutdown: `not forwarded`, exit 1,
// even in the boot after a clean reboot. A restart is no shutdown: the last system shutdown
// decides the exit status, and each boot's restarts are on a line of their own. The same for an
// older shim's records of a restart (ShutdownInitiated cause=SIGTERM, the lock released at once),
// which the upgrade to this one writes.
TEST_F(ShutdownReport, RestartsAreNoShutdownsAndTheLastSystemShutdownDecides) {
  const auto restart = [](event_log_builder& log, double at, bool older_shim) {
    if (older_shim) {
      log.add("ShutdownInitiated", at, "SIGTERM");
    } else {
      log.add("Restart", at, "SIGTERM", R"("system_state":"running")");
    }
    log.add("InhibitorReleased", at + 0.001, "SIGTERM");
  };
  for (const bool older_shim : {false, true}) {
    event_log_builder log;
    log.start(1);
    restart(log, 50, older_shim);
    log.pid(200).start(51).clean_shutdown(100, 1.25);
    log.boot(kBootB).pid(300).start(1);
    restart(log, 60, older_shim);
    log.pid(400).start(61);
    const auto r = run(log.text());
    EXPECT_EQ(r.result, report::outcome::clean) << r.out;
    EXPECT_EQ(r.note, "");
    EXPECT_EQ(
        r.out,
        "BOOT      SHUTDOWN AT (UTC)     TRIGGER                   UNREADY>SIGNAL  SIGNAL>EXIT  "
        "HOLD  LOGIND MAX  VERDICT\n"
        "aaaaaaaa  2026-11-29 16:01:40Z  PrepareForShutdown(true)  0.0s            1.2s         "
        "3.0s  90s         clean\n"
        "bbbbbbbb  -                     -                         -               -            "
        "-     -           restart\n"
        "aaaaaaaa: restarts of the shim (no shutdowns): 1, the last at 2026-11-29 16:00:50Z\n"
        "bbbbbbbb: restarts of the shim (no shutdowns): 1, the last at 2026-11-29 16:01:00Z\n")
        << (older_shim ? "an older shim's records" : "Restart records");
    const auto json = run(log.text(), true);
    EXPECT_EQ(json.result, report::outcome::clean);
    EXPECT_THAT(json.out, HasSubstr(R"("current_boot":false,"restarts":1,)"
                                    R"("last_restart_wall":"2026-11-29T16:00:50.000000Z",)"
                                    R"("wall":"2026-11-29T16:01:40.000000Z",)"));
    EXPECT_THAT(json.out, HasSubstr(R"("boot_id":"bbbbbbbb111111112222222233333333",)"
                                    R"("current_boot":false,"restarts":1,)"
                                    R"("last_restart_wall":"2026-11-29T16:01:00.000000Z",)"
                                    R"("verdict":"restart","detail":"no system shutdown)"));
  }
}

// A restart after a shutdown that was not clean leaves that verdict standing; restarts alone are
// no shutdown on record.
TEST_F(ShutdownReport, ARestartNeverMakesAShutdownCleanNorIsOne) {
  event_log_builder cut;
  cut.start(1).add("ShutdownInitiated", 100, "PrepareForShutdown(true)");
  cut.boot(kBootB).start(1).add("Restart", 60, "SIGTERM").add("InhibitorReleased", 60, "SIGTERM");
  const auto r = run(cut.text());
  EXPECT_EQ(r.result, report::outcome::not_clean);
  EXPECT_THAT(r.out, HasSubstr("cut short"));

  event_log_builder only;
  only.start(1).add("Restart", 60, "SIGTERM").add("InhibitorReleased", 60, "SIGTERM");
  const auto none = run(only.text());
  EXPECT_EQ(none.result, report::outcome::no_shutdown);
  EXPECT_EQ(none.note, "no system shutdown on record in " + path);
  EXPECT_THAT(none.out, HasSubstr("restart\naaaaaaaa: restarts of the shim (no shutdowns): 1,"));
}

TEST_F(ShutdownReport, TheRunningBootIsMarked) {
  event_log_builder log;
  log.boot(kRunningBoot).start(1).add("ShutdownInitiated", 100, "SIGTERM");
  const auto r = run(log.text());
  EXPECT_EQ(r.result, report::outcome::not_clean);
  EXPECT_THAT(r.out, HasSubstr("ffffffff*"));
  EXPECT_THAT(r.out, HasSubstr("in progress\n"));
  EXPECT_THAT(r.out, HasSubstr("* this boot\n"));
}

TEST_F(ShutdownReport, NoShutdownOnRecord) {
  event_log_builder log;
  log.start(1);
  const auto r = run(log.text());
  EXPECT_EQ(r.result, report::outcome::no_shutdown);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.note, "no shutdown on record in " + path);
}

TEST_F(ShutdownReport, NoEventLog) {
  report_options options;
  options.event_log = dir.path() + "/absent.jsonl";
  // No persistent journal either (else the report reads it: the next case).
  options.journal_dir = dir.path() + "/no-journal";
  const auto r = make_report(options, std::string(kRunningBoot));
  EXPECT_EQ(r.result, report::outcome::no_shutdown);
  EXPECT_THAT(r.note, HasSubstr("no event log at"));
}

TEST_F(ShutdownReport, NoEventLogButAPersistentJournal) {
  report_options options;
  options.event_log = dir.path() + "/absent.jsonl";
  options.journal_dir = journal.path();  // exists, empty
  const auto r = make_report(options, std::string(kRunningBoot));
  EXPECT_EQ(r.result, report::outcome::no_shutdown);
  EXPECT_THAT(r.note, HasSubstr("no event log at"));
  EXPECT_THAT(r.note, HasSubstr("read the journal"));
}

TEST_F(ShutdownReport, JournalThatCannotBeOpened) {
  report_options options;
  options.journal = true;
  options.journal_dir = dir.path() + "/no-journal";
  const auto r = make_report(options, std::string(kRunningBoot));
  EXPECT_EQ(r.result, report::outcome::unreadable);
  EXPECT_THAT(r.note, HasSubstr("the journal in " + dir.path() + "/no-journal"));
}

TEST_F(ShutdownReport, AnUnreadableLog) {
  report_options options;
  options.event_log = dir.path();  // a directory
  const auto r = make_report(options, std::string(kRunningBoot));
  EXPECT_EQ(r.result, report::outcome::unreadable);
  EXPECT_THAT(r.note, HasSubstr("cannot read the event log: " + dir.path()));
}

TEST_F(ShutdownReport, SkippedLinesAreNoted) {
  event_log_builder log;
  log.start(1).clean_shutdown(100).raw("{\"event\":\"Sta");
  const auto r = run(log.text());
  EXPECT_EQ(r.result, report::outcome::clean);
  EXPECT_EQ(r.note,
            "skipped 1 line(s) of " + path + " that are not event records (torn or not JSON)");
}

TEST_F(ShutdownReport, ALongTriggerStaysOnOneShortLine) {
  event_log_builder log;
  log.start(1)
      .add("ShutdownInitiated", 100, R"(a cause\nthat spans lines and goes on and on and on)")
      .add("DrainElapsed", 103)  // a shutdown (no signal), not a restart: its row has the trigger
      .add("InhibitorReleased", 103);
  const auto r = run(log.text());
  EXPECT_THAT(r.out, HasSubstr("  a cause that spans lines and goes on...  "));
}

// Issue 18, item 5: a log that a user other than root (or the shim's own) may write can say
// anything. Appending a clean run's records turned "in progress, exit 1" into "clean, exit 0",
// without a word. Now the report says so in one line, every verdict it gives is `untrusted`, and
// it exits 1.
class UntrustedReport : public ShutdownReport {
 protected:
  report run_again() {
    report_options options;
    options.event_log = path;
    options.journal_dir = journal.path();
    return make_report(options, std::string(kRunningBoot));
  }
  void expect_untrusted(const report& r, const std::string& why) {
    EXPECT_EQ(r.result, report::outcome::not_clean);
    EXPECT_THAT(r.note, HasSubstr("the event log " + path + " is not trusted: " + why));
    EXPECT_THAT(r.note, HasSubstr("every verdict below is untrusted"));
    EXPECT_THAT(r.out, HasSubstr("  untrusted\n"));
    EXPECT_THAT(r.out, Not(HasSubstr("clean")));
  }
  event_log_builder clean_log() {
    event_log_builder log;
    log.start(1).clean_shutdown(100);
    return log;
  }
};

TEST_F(UntrustedReport, AWorldWritableLog) {
  ASSERT_EQ(run(clean_log().text()).result, report::outcome::clean);
  ASSERT_EQ(::chmod(path.c_str(), 0666), 0);
  expect_untrusted(run_again(), path + " is writable by group or others (mode 0666)");
}

TEST_F(UntrustedReport, ALogInADirectoryOthersMayWrite) {
  ASSERT_EQ(run(clean_log().text()).result, report::outcome::clean);
  ASSERT_EQ(::chmod(dir.path().c_str(), 0777), 0);
  expect_untrusted(run_again(), "directory " + dir.path() +
                                    " is writable by group or others (mode 0777) and not sticky");
}

TEST_F(UntrustedReport, ALogOwnedByAnotherUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "only root can give the log to another user";
  ASSERT_EQ(run(clean_log().text()).result, report::outcome::clean);
  ASSERT_EQ(::chown(path.c_str(), 65534, 65534), 0);
  expect_untrusted(run_again(), path + " is owned by uid 65534, not by root or the shim's uid 0");
}

TEST_F(UntrustedReport, TheJsonSaysUntrustedToo) {
  run(clean_log().text());
  ASSERT_EQ(::chmod(path.c_str(), 0666), 0);
  report_options options;
  options.event_log = path;
  options.journal_dir = journal.path();
  options.json = true;
  const auto r = make_report(options, std::string(kRunningBoot));
  EXPECT_EQ(r.result, report::outcome::not_clean);
  EXPECT_THAT(r.out, HasSubstr(R"("verdict":"untrusted")"));
}

// Item 4: a FIFO or /dev/zero as --event-log kept `report` waiting for ever; now it is a log that
// cannot be read (exit 4), at once.
TEST_F(ShutdownReport, AFifoOrDevZeroIsUnreadableNotAHang) {
  const std::string fifo = dir.path() + "/fifo.jsonl";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string zero = dir.path() + "/zero.jsonl";
  std::filesystem::create_symlink("/dev/zero", zero);
  for (const auto& [log, what] : {std::pair{fifo, "a FIFO"}, {zero, "a character device"}}) {
    report_options options;
    options.event_log = log;
    auto done = std::async(std::launch::async, [&] { return make_report(options, "x"); });
    if (done.wait_for(10s) != std::future_status::ready) {
      ADD_FAILURE() << "report blocked on " << log;
      std::quick_exit(1);
    }
    const auto r = done.get();
    EXPECT_EQ(r.result, report::outcome::unreadable);
    EXPECT_EQ(r.note,
              fmt::format("cannot read the event log: {}: {}, not a regular file", log, what));
  }
}

}  // namespace
}  // namespace shim
