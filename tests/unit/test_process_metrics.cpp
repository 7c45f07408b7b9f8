// The process_* figures as client_golang's process collector computes them: parsed from
// hand-made /proc texts, then read from this process's own and compared with
// the same fields read here independently.

#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "http/process_metrics.hpp"
#include "http/prometheus_metrics.hpp"
#include "http/readiness_server.hpp"
#include "log/event_recorder.hpp"
#include "log_test_support.hpp"

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

// This process's own /proc, read here without the code under test: proc(5)'s fields counted from
// the last ')', /proc/stat's btime line, /proc/self/fd's entries.
struct independent_reading {
  std::uint64_t utime = 0, stime = 0, start = 0, rss_pages = 0;
};

independent_reading read_proc_self() {
  independent_reading r;
  std::ifstream stat("/proc/self/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  std::istringstream fields(text.substr(text.rfind(')') + 1));
  std::vector<std::string> f((std::istream_iterator<std::string>(fields)),
                             std::istream_iterator<std::string>());
  // f[0] is field 3 (state): field n is f[n - 3].
  r.utime = std::stoull(f.at(14 - 3));
  r.stime = std::stoull(f.at(15 - 3));
  r.start = std::stoull(f.at(22 - 3));
  r.rss_pages = std::stoull(f.at(24 - 3));
  return r;
}

std::uint64_t boot_time() {
  std::ifstream in("/proc/stat");
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("btime ")) return std::stoull(line.substr(6));
  }
  ADD_FAILURE() << "no btime in /proc/stat";
  return 0;
}

// Entries of /proc/self/fd, the directory's own descriptor included, as procfs counts them.
std::size_t count_open_fds() {
  DIR* d = ::opendir("/proc/self/fd");
  if (!d) return 0;
  std::size_t n = 0;
  while (const dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) ++n;
  }
  ::closedir(d);
  return n;
}

double ticks_to_seconds(std::uint64_t ticks) {
  return static_cast<double>(ticks) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

TEST(ProcessMetrics, StartTimeIsBootTimePlusThisProcessStartTicks) {
  const auto p = read_process_figures();
  ASSERT_TRUE(p.start_time);
  const auto mine = read_proc_self();
  EXPECT_DOUBLE_EQ(*p.start_time, static_cast<double>(boot_time()) + ticks_to_seconds(mine.start));
}

TEST(ProcessMetrics, CpuSecondsAreThisProcessUserPlusSystemTicks) {
  // Burn at least 5 clock ticks of CPU, so that the figure is not the 0 of a fresh process.
  const auto burn_until = read_proc_self();
  volatile std::uint64_t sink = 0;
  for (;;) {
    for (int i = 0; i < 1'000'000; ++i) sink = sink + static_cast<std::uint64_t>(i);
    const auto now = read_proc_self();
    if (now.utime + now.stime >= burn_until.utime + burn_until.stime + 5) break;
  }
  const auto before = read_proc_self();
  const auto p = read_process_figures();
  const auto after = read_proc_self();
  ASSERT_TRUE(p.cpu_seconds);
  // CPU time only grows: the figure lies between the two readings around it (equal to both
  // unless a tick passed in between).
  EXPECT_GE(*p.cpu_seconds, ticks_to_seconds(before.utime + before.stime));
  EXPECT_LE(*p.cpu_seconds, ticks_to_seconds(after.utime + after.stime));
  EXPECT_GE(*p.cpu_seconds, ticks_to_seconds(5));
}

TEST(ProcessMetrics, ResidentBytesAreRssPagesTimesThePageSize) {
  const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const auto first = read_process_figures();
  ASSERT_TRUE(first.resident_bytes);
  // 32 MiB touched page by page: the figure grows by about as much. Not by all of it: glibc gives
  // the heap's top back once more than M_TRIM_THRESHOLD (128 KiB) of it is free, so what the first
  // reading's own buffers held may have left RSS meanwhile (131,072 bytes less, once, at load 2).
  constexpr std::size_t kTouched = 32u << 20;
  constexpr std::size_t kHeapTrimAllowance = 1u << 20;
  std::vector<char> block(kTouched);
  for (std::size_t i = 0; i < block.size(); i += page) block[i] = 1;
  // RSS moves with every page fault: compare a figure taken between two equal readings.
  bool compared = false;
  for (int attempt = 0; attempt < 20 && !compared; ++attempt) {
    const auto before = read_proc_self();
    const auto p = read_process_figures();
    const auto after = read_proc_self();
    ASSERT_TRUE(p.resident_bytes);
    if (before.rss_pages != after.rss_pages) continue;
    compared = true;
    EXPECT_EQ(*p.resident_bytes, static_cast<double>(before.rss_pages * page));
    EXPECT_GE(*p.resident_bytes,
              *first.resident_bytes + static_cast<double>(kTouched - kHeapTrimAllowance));
  }
  EXPECT_TRUE(compared) << "RSS never held still across one reading";
  EXPECT_EQ(block[page], 1);
}

TEST(ProcessMetrics, OpenFdsCountThisProcessDescriptors) {
  const auto base = read_process_figures();
  ASSERT_TRUE(base.open_fds);
  // Both counts include the descriptor of the /proc/self/fd listing itself.
  EXPECT_EQ(*base.open_fds, static_cast<double>(count_open_fds()));
  std::vector<int> fds;
  for (int i = 0; i < 5; ++i) {
    int pipe_fds[2];
    ASSERT_EQ(::pipe(pipe_fds), 0);
    fds.insert(fds.end(), {pipe_fds[0], pipe_fds[1]});
  }
  const auto more = read_process_figures();
  ASSERT_TRUE(more.open_fds);
  EXPECT_EQ(*more.open_fds, *base.open_fds + 10);
  for (int fd : fds) ::close(fd);
  const auto again = read_process_figures();
  ASSERT_TRUE(again.open_fds);
  EXPECT_EQ(*again.open_fds, *base.open_fds);
}

TEST(ProcessMetrics, MaxFdsIsTheSoftNofileLimit) {
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  const auto p = read_process_figures();
  ASSERT_TRUE(p.max_fds);
  EXPECT_EQ(*p.max_fds, static_cast<double>(saved.rlim_cur));
  // A soft limit set here, below the hard one, is what the figure reads.
  ASSERT_GT(saved.rlim_max, 257u);
  rlimit lowered = saved;
  lowered.rlim_cur = 257;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &lowered), 0);
  const auto q = read_process_figures();
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  ASSERT_TRUE(q.max_fds);
  EXPECT_EQ(*q.max_fds, 257.0);
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
