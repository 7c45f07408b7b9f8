// Issue 8, item 6: log writes must never block the event loop. A stderr pipe that nobody reads, an
// event log that is a FIFO, and an event log on a filesystem that fills up, each against the real
// logind in the sandbox.

#include <fcntl.h>
#include <fmt/core.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "flat_json_reader.hpp"
#include "shim_harness.hpp"

namespace shim_it {
namespace {

namespace fs = std::filesystem;

class FaultLogging : public ShimTest {
 protected:
  void expect_event_log_fifo_refused(bool with_reader);
};

bool is_json_object(const std::string& line) {
  return ::shim::test::json_reader(line).object().has_value();
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

std::string read_whole_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The file status flags of a process's descriptor, from /proc/PID/fdinfo/FD ("flags: 0100002").
int descriptor_flags(pid_t pid, int fd) {
  std::ifstream in(fmt::format("/proc/{}/fdinfo/{}", pid, fd));
  std::string key;
  std::string value;
  while (in >> key >> value) {
    if (key == "flags:") return static_cast<int>(std::stol(value, nullptr, 8));
  }
  return -1;
}

// A FIFO that stands for a stderr pipe whose reader has stalled (journald overloaded, a container
// log pipe): this test holds the only reader and reads only when it says so.
class stalled_pipe {
 public:
  explicit stalled_pipe(fs::path path) : path_(std::move(path)) {
    if (::mkfifo(path_.c_str(), 0600) != 0) throw std::system_error(errno, std::generic_category());
    // O_RDWR: opening never waits, and the pipe always has a reader.
    fd_ = ::open(path_.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd_ < 0) throw std::system_error(errno, std::generic_category());
  }
  ~stalled_pipe() { ::close(fd_); }
  stalled_pipe(const stalled_pipe&) = delete;
  stalled_pipe& operator=(const stalled_pipe&) = delete;

  const fs::path& path() const { return path_; }

  // Fills the pipe to the last byte with filler lines.
  void fill() {
    const std::string block = std::string(4095, 'x') + "\n";
    while (::write(fd_, block.data(), block.size()) > 0) {
    }
    while (::write(fd_, "\n", 1) > 0) {
    }
  }

  // What the pipe holds now.
  std::string take() {
    std::string out;
    char buffer[65536];
    ssize_t n;
    while ((n = ::read(fd_, buffer, sizeof buffer)) > 0) {
      out.append(buffer, static_cast<std::size_t>(n));
    }
    return out;
  }

 private:
  fs::path path_;
  int fd_ = -1;
};

bool is_filler(const std::string& line) { return line.find_first_not_of('x') == std::string::npos; }

// stderr is a pipe that nobody reads, shared with the child as in a container (wrapper mode). The
// shim keeps answering /readyz while it has more to log than the pipe and its queue can hold, says
// how many lines it dropped once the pipe is read again, and still holds a reboot for the drain
// with exactly one SIGTERM while the pipe is full. Measured on the base commit: the first log line
// into the full pipe blocked the loop in write().
TEST_F(FaultLogging, StderrPipeNobodyReadsBlocksNothing) {
  auto api = describe_apiserver("kube-apiserver", api_delay("1s"));
  stalled_pipe pipe(sb().path("shim-stderr.fifo"));
  shim_options options;
  options.drain_delay = "3s";
  options.exit_timeout = "10s";
  options.wrapped_command = api.argv;
  // $0 is the FIFO, "$@" the shim's command line.
  options.launcher = {"/bin/sh", "-c", "exec \"$@\" 2>\"$0\"", pipe.path().string()};
  auto s = start_shim(options);
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(wait_apiserver_listening(api));
  ASSERT_TRUE(wait_shim_lock(true)) << "the shim never took its delay lock";
  for (const pid_t pid : {s.process->pid(), api.pid().value_or(0)}) {
    const int flags = descriptor_flags(pid, 2);
    ASSERT_GE(flags, 0) << "pid " << pid;
    EXPECT_EQ(flags & O_NONBLOCK, 0)
        << "O_NONBLOCK set on stderr's shared description, as pid " << pid << " sees it";
  }

  // 1. Idle, the pipe full, and more to log than the queue holds: the shim logs one line for each
  //    SIGWINCH it passes on to the child.
  pipe.fill();
  const auto stall_start = sandbox::monotonic_us();
  sandbox::http_prober prober(s.port);
  sandbox::http_client client(s.port);
  double slowest_ms = 0;
  int unanswered = 0;
  auto probe = [&] {
    const auto t0 = sandbox::monotonic_us();
    const auto r = client.get("/readyz", 1000ms);
    slowest_ms = std::max(slowest_ms, ms_between(t0, sandbox::monotonic_us()));
    if (!r.ok || r.status != 200) ++unanswered;
  };
  constexpr int kSignals = 4000;
  for (int i = 0; i < kSignals; ++i) {
    s.process->signal(SIGWINCH);
    std::this_thread::sleep_for(200us);  // apart, so that the kernel does not merge them
    if (i % 100 == 99) probe();
  }
  // Then 10 s in all with the pipe full: watching is the only way to see that nothing goes wrong.
  while (ms_between(stall_start, sandbox::monotonic_us()) < 10'000) {
    probe();
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(unanswered, 0) << "/readyz did not answer while stderr was full";
  EXPECT_FALSE(prober.first_failure_at(stall_start)) << "/readyz failed while stderr was full";
  EXPECT_TRUE(sb().find_inhibitor("shutdown-shim")) << "the lock was dropped";
  const double stalled_s = ms_between(stall_start, sandbox::monotonic_us()) / 1000;

  // 2. The reader wakes up: the queued lines come out whole, then one line says how many were
  //    dropped.
  std::string text;
  std::string dropped;
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (dropped.empty() && std::chrono::steady_clock::now() < deadline) {
    text += pipe.take();
    for (const auto& line : split_lines(text)) {
      // The logger's own WARNING, the only line with a "dropped" field.
      const auto count = sandbox::json_string_field(line, "dropped");
      if (count && sandbox::json_string_field(line, "level") == "warning") dropped = *count;
    }
    if (dropped.empty()) std::this_thread::sleep_for(10ms);
  }
  ASSERT_FALSE(dropped.empty()) << "no line says how many log lines were dropped; read "
                                << text.size() << " bytes, ending: "
                                << text.substr(text.size() -
                                               std::min<std::size_t>(text.size(), 600));
  std::size_t shim_lines = 0;
  for (const auto& line : split_lines(text)) {
    if (is_filler(line)) continue;
    ++shim_lines;
    EXPECT_TRUE(is_json_object(line)) << "a torn or interleaved log line: " << line;
  }
  EXPECT_GT(std::stoul(dropped), 0u);
  const auto dropped_metric =
      metric_value(client.get("/metrics").body, "shutdown_shim_log_lines_dropped_total");
  EXPECT_GE(dropped_metric.value_or(-1), static_cast<double>(std::stoul(dropped)))
      << "/metrics does not count the dropped lines";

  // 3. The pipe full again, a real reboot: unready at once, one SIGTERM, held for the drain.
  pipe.fill();
  const auto full_again = sandbox::monotonic_us();
  auto r = reboot_and_observe(api, prober);
  report(r);
  ASSERT_TRUE(r.start) << "logind never started reboot.target";
  EXPECT_GE(r.start->usec - r.reboot_us, 3'000'000u) << "the reboot was not held for the drain";
  EXPECT_TRUE(r.first_503_us) << "/readyz never answered 503 during the hold";
  EXPECT_EQ(api.signals().size(), 1u) << "the target must get exactly one signal";
  // Answered from the moment the pipe was full to the end of the drain (then the shim exits).
  for (const auto& c : prober.changes()) {
    EXPECT_FALSE(c.status == 0 && c.at_us >= full_again && c.at_us < r.reboot_us + 3'000'000)
        << "/readyz went unanswered during the reboot: " << c.error;
  }

  const std::string figures = fmt::format(
      "FIGURES stderr_full_idle_s={:.1f} signals={} readyz_probes={} slowest_readyz_ms={:.1f} "
      "lines_read_after_stall={} lines_dropped={}",
      stalled_s, kSignals, prober.requests(), slowest_ms, shim_lines, dropped);
  std::cout << figures << std::endl;
  note(figures);
}

// --event-log names a FIFO, with or without a reader: refused with exit 1 and one line naming the
// path, at once. Measured on the base commit: with no reader, open() waited forever; with one,
// every record was a write that the reader could stall.
void FaultLogging::expect_event_log_fifo_refused(bool with_reader) {
  shim_options options;
  options.target = {"--target-pidfile=" + sb().path("none.pid").string()};
  const fs::path events = sb().path("shim-events.jsonl");  // the harness's --event-log
  ASSERT_EQ(::mkfifo(events.c_str(), 0600), 0);
  int reader = -1;
  if (with_reader) reader = ::open(events.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  auto s = start_shim(options, false);
  const auto t0 = sandbox::monotonic_us();
  const auto status = s.process->wait_for_exit(10s);
  if (reader >= 0) ::close(reader);
  // The diagnostics of a failed test read every file in the sandbox: not a FIFO, which would wait.
  fs::remove(events);
  ASSERT_TRUE(status) << "the shim still runs 10 s later: the FIFO was not refused";
  std::cout << fmt::format("FIGURES fifo_refused_ms={:.1f}\n",
                           ms_between(t0, s.process->exit_seen_us()));
  EXPECT_EQ(sandbox::shell_exit_code(*status), 1) << sandbox::describe_wait_status(*status);
  std::vector<std::string> lines;
  for (const auto& line : sandbox::read_lines(s.log)) {
    if (!line.empty()) lines.push_back(line);
  }
  ASSERT_EQ(lines.size(), 1u) << "expected one line";
  EXPECT_EQ(sandbox::json_string_field(lines[0], "level"), "error");
  EXPECT_EQ(sandbox::json_string_field(lines[0], "msg"),
            "--event-log " + events.string() + ": a FIFO, not a regular file");
}

TEST_F(FaultLogging, EventLogFifoWithoutReaderIsRefusedAtOnce) {
  expect_event_log_fifo_refused(false);
}

TEST_F(FaultLogging, EventLogFifoWithReaderIsRefusedAtOnce) { expect_event_log_fifo_refused(true); }

// The event log's filesystem fills up: a record that does not fit is cut off again, so that once
// there is room the next records are whole lines. A 16 KiB tmpfs in a private mount namespace that
// only the shim lives in (nothing on the machine is mounted): the event log already holds one line
// that leaves 100 bytes of its page, and a filler file takes every other page. Measured on the base
// commit: the first record was torn at 100 bytes and, once there was room, the next record was
// appended to it, which made that line invalid JSON.
TEST_F(FaultLogging, FullFilesystemLeavesEveryLineValidJson) {
  auto api = start_apiserver("kube-apiserver", api_delay("1s"));
  const fs::path tiny = sb().path("tiny");
  fs::create_directory(tiny);
  // The harness's --event-log, relative so that it resolves inside the shim's namespace as well.
  fs::create_symlink("tiny/events.jsonl", sb().path("shim-events.jsonl"));
  constexpr std::size_t kPage = 4096;
  constexpr std::size_t kRoomLeft = 100;
  const std::string earlier_prefix = R"({"event":"Earlier","pad":")";
  const std::string earlier_suffix = "\"}\n";
  const std::size_t pad = kPage - kRoomLeft - earlier_prefix.size() - earlier_suffix.size();
  auto options = attach_to(api, "2s", "10s");
  // $0 is the mount point, "$@" the shim's command line.
  const std::string script = fmt::format(
      R"sh(set -e; mount -t tmpfs -o size=16k shim-tiny "$0"; )sh"
      R"sh(printf '%s%s"}}\n' '{}' "$(head -c {} /dev/zero | tr '\0' x)" > "$0/events.jsonl"; )sh"
      R"sh(cat /dev/zero > "$0/filler" 2>/dev/null || true; exec "$@")sh",
      earlier_prefix, pad);
  options.launcher = {"/usr/bin/unshare", "--mount", "--propagation", "private",
                      "/bin/sh",          "-c",      script,          tiny.string()};
  auto s = start_shim(options);
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(wait_shim_lock(true));
  // The tmpfs as the shim sees it, through its root in its own mount namespace.
  const fs::path inside =
      fs::path(fmt::format("/proc/{}/root", s.process->pid())) / tiny.relative_path();

  // Started, TargetRunning and InhibitorTaken found the disk full.
  auto failed_records = [&] {
    std::size_t n = 0;
    for (const auto& line : sandbox::read_lines(s.log)) {
      n += sandbox::json_string_field(line, "msg") == "cannot write to the event log" ? 1 : 0;
    }
    return n;
  };
  const auto deadline = std::chrono::steady_clock::now() + kEventTimeout;
  while (failed_records() < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(failed_records(), 3u) << "Started, TargetRunning and InhibitorTaken should have failed";
  EXPECT_EQ(fs::file_size(inside / "events.jsonl"), kPage - kRoomLeft)
      << "the part of a record that did fit was left in the file";
  sandbox::http_client client(s.port);
  EXPECT_EQ(metric_value(client.get("/metrics").body, "shutdown_shim_event_records_failed_total"),
            3.0)
      << "/metrics does not count the records that could not be written";

  // Room again, then a reboot: its records must start on a line of their own. Read during the
  // hold, while the shim's namespace still exists.
  fs::remove(inside / "filler");
  const auto reboot_us = sb().reboot();
  ASSERT_TRUE(wait_signal_count(api, 1)) << "no SIGTERM";
  std::string text;
  while (std::chrono::steady_clock::now() < deadline &&
         text.find("SignalForwarded") == std::string::npos) {
    std::this_thread::sleep_for(10ms);
    text = read_whole_file(inside / "events.jsonl");
  }
  EXPECT_TRUE(sb().wait_for_start_unit("reboot.target", kEventTimeout, reboot_us));
  EXPECT_EQ(api.signals().size(), 1u);
  const auto lines = split_lines(text);
  ASSERT_GE(lines.size(), 3u) << text;
  for (const auto& line : lines) EXPECT_TRUE(is_json_object(line)) << "not valid JSON: " << line;
  EXPECT_EQ(lines[0].substr(0, earlier_prefix.size()), earlier_prefix);
  EXPECT_EQ(sandbox::json_string_field(lines[1], "event"), "ShutdownInitiated");
  std::cout << fmt::format("FIGURES event_log_lines={} failed_records={}\n", lines.size(),
                           failed_records());
}

}  // namespace
}  // namespace shim_it
