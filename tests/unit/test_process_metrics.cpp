// The process_* figures as client_golang's process collector computes them: parsed from
// hand-made /proc texts, then read from this process's own.

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <limits>

#include "event_recorder.hpp"
#include "log_test_support.hpp"
#include "process_metrics.hpp"
#include "readiness_server.hpp"

namespace shim {
namespace {

// proc(5): pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime
// stime cutime cstime priority nice threads itrealvalue starttime vsize rss ...
constexpr std::string_view kStat =
    "4242 (shutdown) (shim x) S 1 4242 4242 0 -1 4194560 1210 0 0 0 150 25 0 0 20 0 1 0 "
    "987654 12345678 1370 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 1 0 0 0 0 0\n";

TEST(ProcessMetrics, StatFieldsAfterACommandNameWithParenthesesAndSpaces) {
  const auto s = parse_process_stat(kStat);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->utime_ticks, 150u);
  EXPECT_EQ(s->stime_ticks, 25u);
  EXPECT_EQ(s->start_ticks, 987654u);
  EXPECT_EQ(s->rss_pages, 1370u);
  EXPECT_FALSE(parse_process_stat("4242 (cut short) S 1 2 3"));
  EXPECT_FALSE(parse_process_stat("no parenthesis"));
}

TEST(ProcessMetrics, BootTimeAndMaxOpenFiles) {
  EXPECT_EQ(parse_boot_time("cpu  1 2 3\nintr 5 6\nbtime 1764540000\nprocesses 9\n"), 1764540000u);
  EXPECT_FALSE(parse_boot_time("cpu  1 2 3\n"));
  constexpr std::string_view kLimits =
      "Limit                     Soft Limit           Hard Limit           Units     \n"
      "Max processes             63450                63450                processes \n"
      "Max open files            1024                 524288               files     \n"
      "Max locked memory         8388608              8388608              bytes     \n";
  EXPECT_EQ(parse_max_open_files(kLimits), 1024u);
  EXPECT_EQ(parse_max_open_files(
                "Max open files            unlimited            unlimited            files\n"),
            std::numeric_limits<std::uint64_t>::max());
  EXPECT_FALSE(parse_max_open_files("Max processes 1 1 processes\n"));
}

TEST(ProcessMetrics, ThisProcessFromProc) {
  const auto p = read_process_figures();
  ASSERT_TRUE(p.cpu_seconds && p.open_fds && p.max_fds && p.resident_bytes && p.start_time);
  EXPECT_GE(*p.cpu_seconds, 0.0);
  EXPECT_GE(*p.open_fds, 3.0) << "stdin, stdout, stderr at least";
  rlimit limit{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &limit), 0);
  EXPECT_EQ(*p.max_fds, static_cast<double>(limit.rlim_cur));
  EXPECT_GT(*p.resident_bytes, 0.0);
  // This test process started a moment ago: within the clock tick and the run of the suite.
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_LE(*p.start_time, now + 1);
  EXPECT_GT(*p.start_time, now - 600);
}

TEST(EventsTotal, EveryKindFromZeroCountedAsRecorded) {
  test::captured_output out;
  logger log(log_format::text, out.fd(), false);
  event_recorder events(log, "");
  shim_status status;
  status.events = &events;
  auto text = render_metrics(status, {});
  for (const auto& e : kEvents) {
    EXPECT_NE(text.find("shutdown_shim_events_total{event=\"" + std::string(e.name) + "\"} 0\n"),
              std::string::npos)
        << e.name;
  }
  events.record(event_kind::BusLost, "test", "lost");
  events.record(event_kind::BusLost, "test", "lost again");
  events.record(event_kind::PreviousShutdown, "clean", "found");
  text = render_metrics(status, {});
  EXPECT_NE(text.find("shutdown_shim_events_total{event=\"BusLost\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("shutdown_shim_events_total{event=\"PreviousShutdown\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("shutdown_shim_events_total{event=\"Started\"} 0\n"), std::string::npos);
}

}  // namespace
}  // namespace shim
