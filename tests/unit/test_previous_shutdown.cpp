// The previous shutdown as the daemon finds it at start: the latest shutdown of an earlier boot,
// its one line for /readyz?verbose, its event fields and its metrics; never a readiness failure.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "event_log_builder.hpp"
#include "http/http_answer.hpp"
#include "http/prometheus_metrics.hpp"
#include "http/readiness_server.hpp"
#include "readiness/shim_status.hpp"
#include "readiness_server_test_support.hpp"
#include "report/previous_shutdown.hpp"
#include "report/shutdown_history.hpp"

namespace shim {
namespace {

using readiness_test::answer_to;
using test::event_log_builder;
using test::kBootA;
using test::kBootB;
using test::kBootC;
using testing::HasSubstr;

std::optional<previous_shutdown> previous_of(const std::string& log, std::string_view running) {
  // As read_previous_shutdown() keeps them: the two last boots that had a shutdown.
  shutdown_history history(2, std::string(running));
  test::feed(history, log);
  return previous_shutdown_in(history.boots());
}

std::string value_of(const log_fields& fields, const std::string& key) {
  for (const auto& [k, v] : fields) {
    if (k == key) return v;
  }
  return "(absent)";
}

bool has_line(const std::string& text, const std::string& line) {
  return ("\n" + text).find("\n" + line + "\n") != std::string::npos;
}

TEST(PreviousShutdown, TheCleanRebootOfTheBootBefore) {
  event_log_builder log;
  log.start(1).clean_shutdown(100, 1.25);
  log.boot(kBootB).start(2);
  const auto p = previous_of(log.text(), kBootB);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->boot_id, kBootA);
  EXPECT_EQ(p->verdict, shutdown_verdict::clean);
  EXPECT_TRUE(p->clean());
  EXPECT_DOUBLE_EQ(*p->hold, 3.001);
  EXPECT_DOUBLE_EQ(*p->unready_to_signal, 0.002);
  EXPECT_DOUBLE_EQ(*p->signal_to_target_exit, 1.248);
  EXPECT_EQ(p->summary(), "clean at 2026-11-29T16:01:40.000000Z, boot aaaaaaaa, hold 3.0 s");
  const auto f = p->fields();
  EXPECT_EQ(value_of(f, "verdict"), "clean");
  EXPECT_EQ(value_of(f, "previous_boot_id"), kBootA);
  EXPECT_EQ(value_of(f, "hold_seconds"), "3.001");
  EXPECT_EQ(value_of(f, "unready_to_signal_seconds"), "0.002");
  EXPECT_EQ(value_of(f, "signal_to_target_exit_seconds"), "1.248");
  EXPECT_EQ(value_of(f, "trigger"), "PrepareForShutdown(true)");
}

TEST(PreviousShutdown, AHoldCutShortHasNoHoldButHowFarItsRecordsGo) {
  event_log_builder log;
  log.start(1)
      .add("ShutdownInitiated", 100, "PrepareForShutdown(true)")
      .add("SignalForwarded", 100, "PrepareForShutdown(true)")
      .add("TargetExited", 101.5, "pidfd");
  log.boot(kBootB).start(2);
  const auto p = previous_of(log.text(), kBootB);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->verdict, shutdown_verdict::cut_short);
  EXPECT_FALSE(p->clean());
  EXPECT_FALSE(p->hold);
  EXPECT_THAT(p->summary(), HasSubstr("cut short at "));
  EXPECT_THAT(p->summary(), HasSubstr("records stop 1.5 s into the hold: the records of the shim"));
  EXPECT_EQ(value_of(p->fields(), "hold_seconds"), "(absent)");
  EXPECT_EQ(value_of(p->fields(), "records_span_seconds"), "1.500");
}

TEST(PreviousShutdown, ThisBootsOwnShutdownIsNotThePreviousOne) {
  // A cancel in the running boot (and a restart mid-hold would be the same): the boot before
  // still has the last shutdown of an earlier boot.
  event_log_builder log;
  log.start(1).clean_shutdown(100);
  log.boot(kBootB)
      .start(2)
      .add("ShutdownInitiated", 50, "PrepareForShutdown(true)")
      .add("ShutdownCancelled", 51, "PrepareForShutdown(false): the shutdown was cancelled");
  const auto p = previous_of(log.text(), kBootB);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->boot_id, kBootA);
  EXPECT_EQ(p->verdict, shutdown_verdict::clean);
}

TEST(PreviousShutdown, TheLatestEarlierBootWins) {
  event_log_builder log;
  log.start(1).clean_shutdown(100);
  log.boot(kBootB)
      .start(2)
      .add("ShutdownInitiated", 50, "SIGTERM")
      .add("InhibitorReleased", 50.1, "SIGTERM");
  log.boot(kBootC).start(3);
  // Issue 22: boot B's records are an older shim's restart, no shutdown: A's reboot is the last.
  const auto p = previous_of(log.text(), kBootC);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->boot_id, kBootA);
  EXPECT_EQ(p->verdict, shutdown_verdict::clean);

  event_log_builder cut;
  cut.start(1).clean_shutdown(100);
  cut.boot(kBootB).start(2).add("ShutdownInitiated", 50, "PrepareForShutdown(true)");
  cut.boot(kBootC).start(3);
  const auto later = previous_of(cut.text(), kBootC);
  ASSERT_TRUE(later);
  EXPECT_EQ(later->boot_id, kBootB);
  EXPECT_EQ(later->verdict, shutdown_verdict::cut_short);
}

// Issue 22: a restart idle, a clean reboot, a restart in this boot: the previous shutdown is the
// clean reboot, with the restart of its boot said apart, never a failure.
TEST(PreviousShutdown, RestartsAreNotTheShutdownAndAreSaidApart) {
  event_log_builder log;
  log.start(1)
      .add("Restart", 50, "SIGTERM", R"("system_state":"running")")
      .add("InhibitorReleased", 50.001, "SIGTERM")
      .pid(200)
      .start(51)
      .clean_shutdown(100);
  log.boot(kBootB)
      .pid(300)
      .start(1)
      .add("Restart", 20, "SIGTERM")
      .add("InhibitorReleased", 20.001, "SIGTERM")
      .pid(400)
      .start(21);
  const auto p = previous_of(log.text(), kBootB);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->boot_id, kBootA);
  EXPECT_EQ(p->verdict, shutdown_verdict::clean);
  EXPECT_EQ(p->restarts, 1u);
  EXPECT_EQ(
      p->summary(),
      "clean at 2026-11-29T16:01:40.000000Z, boot aaaaaaaa, hold 3.0 s, 1 restart of the shim");
  EXPECT_EQ(value_of(p->fields(), "verdict"), "clean");
  EXPECT_EQ(value_of(p->fields(), "restarts"), "1");
}

TEST(PreviousShutdown, NoneWhenOnlyThisBootHadOne) {
  event_log_builder log;
  log.boot(kBootB).start(2).clean_shutdown(50);
  EXPECT_FALSE(previous_of(log.text(), kBootB));
  EXPECT_FALSE(previous_of("", kBootB));
}

TEST(PreviousShutdown, AnOlderShimsRecordsWithoutBootIdCount) {
  event_log_builder log;
  log.boot("").start(1).clean_shutdown(100);
  log.boot(kBootB).start(2);
  const auto p = previous_of(log.text(), kBootB);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->boot_id, "");
  EXPECT_THAT(p->summary(), HasSubstr("boot unknown"));
}

TEST(PreviousShutdown, ReadStreamsTheFileAndNoFileIsNone) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("shim-previous-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = (dir / "events.jsonl").string();
  auto none = read_previous_shutdown(path, std::string(kBootB));
  ASSERT_TRUE(none) << none.error();
  EXPECT_FALSE(none.value());

  event_log_builder log;
  log.start(1).clean_shutdown(100);
  log.boot(kBootB).start(2);
  std::ofstream(path) << log.text();
  auto found = read_previous_shutdown(path, std::string(kBootB));
  ASSERT_TRUE(found) << found.error();
  ASSERT_TRUE(found.value());
  EXPECT_EQ(found.value()->verdict, shutdown_verdict::clean);

  EXPECT_FALSE(read_previous_shutdown(dir.string(), std::string(kBootB)))
      << "a directory is an error";
  std::filesystem::remove_all(dir);
}

// Issue 18, item 5: the start-up verdict, and the metric built on it, trust the log no more than
// `report` does: a log others may write gives `untrusted`, never `clean`.
TEST(PreviousShutdown, ALogOthersMayWriteIsUntrusted) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("shim-untrusted-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = (dir / "events.jsonl").string();
  event_log_builder log;
  log.start(1).clean_shutdown(100);
  log.boot(kBootB).start(2);
  std::ofstream(path) << log.text();
  ASSERT_EQ(::chmod(path.c_str(), 0666), 0);
  auto found = read_previous_shutdown(path, std::string(kBootB));
  ASSERT_TRUE(found) << found.error();
  ASSERT_TRUE(found.value());
  const auto& p = *found.value();
  EXPECT_EQ(p.verdict, shutdown_verdict::untrusted);
  EXPECT_FALSE(p.clean());
  EXPECT_THAT(p.summary(), HasSubstr("untrusted at "));
  EXPECT_THAT(p.detail, HasSubstr(path + " is writable by group or others (mode 0666)"));
  std::filesystem::remove_all(dir);
}

// --- in the readiness table and /metrics

shim_status ready_status() {
  shim_status s;
  s.listener_bound = true;
  s.logind.inhibitor = logind_row::inhibitor_state::held;
  return s;
}

TEST(PreviousShutdown, AnInformationalCheckThatNeverFails) {
  auto s = ready_status();
  for (const auto& c : s.checks()) EXPECT_NE(c.name, "previous-shutdown");
  previous_shutdown p;
  p.boot_id = kBootA;
  p.wall = "2026-11-29T16:01:40.000000Z";
  p.verdict = shutdown_verdict::cut_short;
  p.detail = "the records of the shim (pid 100) stop\nhere";
  p.records_span = 1.5;
  s.previous = p;
  EXPECT_TRUE(s.ready()) << "the past never makes the node unready";
  EXPECT_THAT(status_line(s), testing::StartsWith("ready;"));
  http_request_counts counts;
  const auto verbose = answer_to(s, counts, {boost::beast::http::verb::get, "/readyz?verbose", 11});
  EXPECT_EQ(verbose.result_int(), 200u);
  EXPECT_TRUE(has_line(verbose.body(),
                       "[+]previous-shutdown ok: cut short at 2026-11-29T16:01:40.000000Z, boot "
                       "aaaaaaaa, records stop 1.5 s into the hold: the records of the shim (pid "
                       "100) stop here"))
      << verbose.body();
}

TEST(PreviousShutdown, MetricsAreAbsentWhenUnknown) {
  auto s = ready_status();
  auto text = render_metrics(s, {});
  EXPECT_EQ(text.find("shutdown_shim_previous_shutdown"), std::string::npos) << text;

  previous_shutdown p;
  p.verdict = shutdown_verdict::cut_short;
  p.records_span = 1.5;
  s.previous = p;
  text = render_metrics(s, {});
  EXPECT_TRUE(has_line(text, "shutdown_shim_previous_shutdown_clean 0")) << text;
  EXPECT_EQ(text.find("shutdown_shim_previous_shutdown_hold_seconds"), std::string::npos) << text;
  EXPECT_EQ(text.find("shutdown_shim_previous_shutdown_unready_to_signal_seconds"),
            std::string::npos)
      << "no signal on record: " << text;

  p.verdict = shutdown_verdict::clean;
  p.hold = 3.25;
  p.unready_to_signal = 1.5;
  s.previous = p;
  text = render_metrics(s, {});
  EXPECT_TRUE(has_line(text, "shutdown_shim_previous_shutdown_clean 1")) << text;
  EXPECT_TRUE(has_line(text, "shutdown_shim_previous_shutdown_hold_seconds 3.25")) << text;
  EXPECT_TRUE(has_line(text, "shutdown_shim_previous_shutdown_unready_to_signal_seconds 1.5"))
      << text;
}

}  // namespace
}  // namespace shim
