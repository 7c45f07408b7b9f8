#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#include "log/event_recorder.hpp"
#include "log_test_support.hpp"
#include "util/boot_id.hpp"

namespace shim {
namespace {

using namespace std::chrono_literals;
using test::captured_output;
using test::get;
using test::is_timestamp;
using test::json_object;
using test::json_reader;
using test::keys;
using test::parse_object;
using test::read_file;
using test::split_lines;
using test::temp_dir;
using testing::ElementsAre;
using testing::HasSubstr;
using testing::StartsWith;

// A scratch directory with a path for the event log in it, and a logger writing to a memfd.
class EventRecorder : public ::testing::Test {
 protected:
  temp_dir dir;
  const std::string path = dir.path() + "/events.jsonl";
  captured_output out;
  logger log{log_format::text, out.fd(), true};

  // The refusal's message, or "" if the path was accepted.
  std::string refusal(const std::string& refused) {
    try {
      event_recorder events(log, refused);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "";
  }
};

TEST_F(EventRecorder, WritesOneJsonLineWithEveryKey) {
  event_recorder events(log, path);

  timespec mono{};
  ::clock_gettime(CLOCK_MONOTONIC, &mono);
  const auto before_us = mono.tv_sec * 1'000'000LL + mono.tv_nsec / 1'000;

  events.record(event_kind::SignalForwarded, "PrepareForShutdown(true)",
                "sent SIGTERM to \"kube-apiserver\"\n(pid 42)",
                {{"signal", "SIGTERM"}, {"pid_target", "42"}, {"note", "\xff"}});

  const std::string text = read_file(path);
  ASSERT_EQ(text.back(), '\n');
  const auto lines = split_lines(text);
  ASSERT_EQ(lines.size(), 1u);
  const json_object o = parse_object(lines[0]);
  EXPECT_THAT(keys(o), ElementsAre("event", "wall", "monotonic_us", "boottime_us", "boot_id", "pid",
                                   "cause", "message", "signal", "pid_target", "note"));
  EXPECT_EQ(get(o, "event").text, "SignalForwarded");
  EXPECT_TRUE(is_timestamp(get(o, "wall").text));
  EXPECT_FALSE(get(o, "monotonic_us").is_string);
  EXPECT_FALSE(get(o, "boottime_us").is_string);
  EXPECT_FALSE(get(o, "pid").is_string);
  const long long monotonic = std::stoll(get(o, "monotonic_us").text);
  EXPECT_GE(monotonic, before_us);
  EXPECT_LT(monotonic, before_us + 60'000'000);
  // The boot clock also counts suspend, so it is not behind the monotonic one (give or take the
  // microsecond some sandboxed kernels show).
  EXPECT_GE(std::stoll(get(o, "boottime_us").text), monotonic - 1'000'000);
  // The journal's form (32 hex digits), so that `journalctl -b` can be matched with it.
  EXPECT_EQ(get(o, "boot_id").text, current_boot_id().value());
  EXPECT_THAT(get(o, "boot_id").text, testing::MatchesRegex("[0-9a-f]{32}"));
  EXPECT_EQ(get(o, "pid").text, std::to_string(::getpid()));
  EXPECT_EQ(get(o, "cause").text, "PrepareForShutdown(true)");
  EXPECT_EQ(get(o, "message").text, "sent SIGTERM to \"kube-apiserver\"\n(pid 42)");
  EXPECT_EQ(get(o, "signal").text, "SIGTERM");
  EXPECT_TRUE(get(o, "pid_target").is_string);
  EXPECT_EQ(get(o, "note").text, "\xef\xbf\xbd");  // U+FFFD

  EXPECT_EQ(out.text(),
            "<5>sent SIGTERM to \"kube-apiserver\"\\n(pid 42) event=SignalForwarded "
            "cause=PrepareForShutdown(true) signal=SIGTERM pid_target=42 note=\xff\n");
  EXPECT_EQ(events.failed_records(), 0u);
}

TEST_F(EventRecorder, StampsTheMomentGivenOnEveryClock) {
  event_recorder events(log, path);

  const auto at = std::chrono::steady_clock::now() - std::chrono::seconds(30);
  const auto at_us =
      std::chrono::duration_cast<std::chrono::microseconds>(at.time_since_epoch()).count();
  const auto wall_before = std::chrono::system_clock::now();
  events.record(event_kind::ShutdownInitiated, "PrepareForShutdown(true)", "unready", {}, at);
  events.record(event_kind::DrainElapsed, "timer", "drained");

  const auto lines = split_lines(read_file(path));
  ASSERT_EQ(lines.size(), 2u);
  const json_object earlier = parse_object(lines[0]);
  const json_object now = parse_object(lines[1]);
  const long long earlier_mono = std::stoll(get(earlier, "monotonic_us").text);
  const long long now_mono = std::stoll(get(now, "monotonic_us").text);
  EXPECT_GE(earlier_mono, at_us);
  EXPECT_LT(earlier_mono, at_us + 5'000'000) << "not the moment given";
  EXPECT_GE(now_mono - earlier_mono, 30'000'000);
  const long long boot_gap =
      std::stoll(get(now, "boottime_us").text) - std::stoll(get(earlier, "boottime_us").text);
  EXPECT_GE(boot_gap, 30'000'000 - 1'000'000);
  // Walls as text: the earlier one is about 30 s before the later one (same minute layout).
  EXPECT_LT(get(earlier, "wall").text, get(now, "wall").text);
  EXPECT_LT(get(earlier, "wall").text, format_wall_time(wall_before));
}

TEST_F(EventRecorder, ExtraFieldsNeverShadowFixedKeys) {
  event_recorder events(log, path);
  events.record(
      event_kind::TargetExited, "pidfd", "the target exited",
      {{"pid", "42"}, {"event", "x"}, {"message", "y"}, {"boot_id", "z"}, {"exit_code", "0"}});
  const json_object o = parse_object(split_lines(read_file(path)).at(0));
  EXPECT_THAT(keys(o), ElementsAre("event", "wall", "monotonic_us", "boottime_us", "boot_id", "pid",
                                   "cause", "message", "field_pid", "field_event", "field_message",
                                   "field_boot_id", "exit_code"));
  EXPECT_EQ(get(o, "pid").text, std::to_string(::getpid()));
  EXPECT_EQ(get(o, "field_pid").text, "42");
  EXPECT_EQ(get(o, "event").text, "TargetExited");
  // The log line is the caller's fields as given.
  EXPECT_THAT(out.text(),
              StartsWith("<6>the target exited event=TargetExited cause=pidfd pid=42 "));
}

TEST_F(EventRecorder, LogsAtTheEventsLevel) {
  event_recorder events(log, "");
  events.record(event_kind::Started, "", "started");
  events.record(event_kind::InhibitorTaken, "", "");
  events.record(event_kind::ShutdownInitiated, "SIGTERM", "draining");
  events.record(event_kind::SignalForwarded, "c", "m");
  events.record(event_kind::TargetExited, "c", "m");
  events.record(event_kind::DrainElapsed, "c", "m");
  events.record(event_kind::InhibitorReleased, "c", "m");
  events.record(event_kind::ShutdownCancelled, "c", "m");
  events.record(event_kind::BusLost, "c", "m");
  events.record(event_kind::BusRestored, "c", "m");
  events.record(event_kind::InhibitDelayEnsured, "c", "m");
  events.record(event_kind::Restart, "SIGTERM", "m");
  EXPECT_THAT(
      split_lines(out.text()),
      ElementsAre("<6>started event=Started", "<6>InhibitorTaken event=InhibitorTaken",
                  "<5>draining event=ShutdownInitiated cause=SIGTERM",
                  "<5>m event=SignalForwarded cause=c", "<6>m event=TargetExited cause=c",
                  "<6>m event=DrainElapsed cause=c", "<5>m event=InhibitorReleased cause=c",
                  "<6>m event=ShutdownCancelled cause=c", "<4>m event=BusLost cause=c",
                  "<6>m event=BusRestored cause=c", "<5>m event=InhibitDelayEnsured cause=c",
                  "<5>m event=Restart cause=SIGTERM"));
}

TEST_F(EventRecorder, AppendsAcrossInstances) {
  { std::ofstream(path) << "{\"event\":\"Earlier\"}\n"; }
  {
    event_recorder first(log, path);
    first.record(event_kind::Started, "", "one");
  }
  {
    event_recorder second(log, path);
    second.record(event_kind::ShutdownInitiated, "SIGTERM", "two");
    second.record(event_kind::DrainElapsed, "timer", "three");
  }
  const auto lines = split_lines(read_file(path));
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], "{\"event\":\"Earlier\"}");
  EXPECT_EQ(get(parse_object(lines[1]), "message").text, "one");
  EXPECT_EQ(get(parse_object(lines[2]), "message").text, "two");
  EXPECT_EQ(get(parse_object(lines[3]), "event").text, "DrainElapsed");
  EXPECT_LE(std::stoll(get(parse_object(lines[1]), "monotonic_us").text),
            std::stoll(get(parse_object(lines[3]), "monotonic_us").text));
}

// The descriptor for path among this process's, or -1.
int find_descriptor(const std::string& path) {
  int found = -1;
  for (int fd = 0; fd < 1024; ++fd) {
    char link[4096];
    const std::string proc = "/proc/self/fd/" + std::to_string(fd);
    const ssize_t n = ::readlink(proc.c_str(), link, sizeof link);
    if (n > 0 && std::string(link, static_cast<std::size_t>(n)) == path) found = fd;
  }
  return found;
}

TEST_F(EventRecorder, CreatesTheFileAppendOnlyCloseOnExec) {
  const mode_t old_umask = ::umask(0);
  event_recorder events(log, path);
  ::umask(old_umask);

  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);

  // The child in wrapper mode must not get the descriptor.
  const int found = find_descriptor(path);
  ASSERT_GE(found, 0);
  EXPECT_TRUE(::fcntl(found, F_GETFD) & FD_CLOEXEC);
  const int flags = ::fcntl(found, F_GETFL);
  EXPECT_TRUE(flags & O_APPEND);
  EXPECT_EQ(flags & O_ACCMODE, O_WRONLY);
}

TEST_F(EventRecorder, UnopenablePathThrowsNamingIt) {
  const std::string missing = dir.path() + "/no/such/dir/events.jsonl";
  try {
    event_recorder events(log, missing);
    ADD_FAILURE() << "no exception";
  } catch (const std::system_error& e) {
    EXPECT_THAT(e.what(), StartsWith("open event log " + missing + ": "));
    EXPECT_EQ(e.code(), std::errc::no_such_file_or_directory);
  }
  try {
    event_recorder events(log, dir.path());  // a directory cannot be opened for writing
    ADD_FAILURE() << "no exception";
  } catch (const std::system_error& e) {
    EXPECT_THAT(e.what(), HasSubstr(dir.path()));
    EXPECT_EQ(e.code(), std::errc::is_a_directory);
  }
}

// A FIFO's reader could stall every write (and the loop with it), and with no reader open() itself
// would wait: both are refused at once.
TEST_F(EventRecorder, RefusesWhatIsNotARegularFile) {
  const std::string fifo = dir.path() + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(refusal(fifo), "--event-log " + fifo + ": a FIFO, not a regular file");
  {
    unique_fd reader(::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
    ASSERT_TRUE(reader);
    EXPECT_EQ(refusal(fifo), "--event-log " + fifo + ": a FIFO, not a regular file");
  }

  const std::string socket_path = dir.path() + "/socket";
  unique_fd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  socket_path.copy(address.sun_path, sizeof address.sun_path - 1);
  ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  EXPECT_EQ(refusal(socket_path), "--event-log " + socket_path + ": a socket, not a regular file");

  EXPECT_EQ(refusal("/dev/null"), "--event-log /dev/null: a character device, not a regular file");
  EXPECT_EQ(refusal(dir.path() + "/file"), "");
}

// RLIMIT_FSIZE makes a real write on a real file stop short, then fail (EFBIG), as a full disk
// does (ENOSPC), with no root and no filesystem to fill. SIGXFSZ is ignored meanwhile.
class file_size_limit {
 public:
  explicit file_size_limit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &saved_limit_);
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGXFSZ, &ignore, &saved_action_);
    rlimit limit = saved_limit_;
    limit.rlim_cur = bytes;
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) ADD_FAILURE() << "setrlimit";
  }
  ~file_size_limit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_limit_);
    ::sigaction(SIGXFSZ, &saved_action_, nullptr);
  }
  file_size_limit(const file_size_limit&) = delete;
  file_size_limit& operator=(const file_size_limit&) = delete;

 private:
  rlimit saved_limit_{};
  struct sigaction saved_action_ {};
};

off_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_size : -1;
}

TEST_F(EventRecorder, RecordIsWrittenWholeOrNotAtAll) {
  event_recorder events(log, path);
  events.record(event_kind::Started, "start", "started");
  const std::string before = read_file(path);
  {
    // Room for 50 more bytes: the write stops short, and the next one fails.
    file_size_limit limit(static_cast<rlim_t>(before.size()) + 50);
    events.record(event_kind::ShutdownInitiated, "SIGTERM", "draining");
  }
  EXPECT_EQ(read_file(path), before) << "the torn record was not cut off";
  EXPECT_EQ(events.failed_records(), 1u);
  EXPECT_THAT(split_lines(out.text()),
              ElementsAre("<6>started event=Started cause=start",
                          "<3>cannot write to the event log event=ShutdownInitiated "
                          "error=\"File too large\"",
                          "<5>draining event=ShutdownInitiated cause=SIGTERM"));

  events.record(event_kind::DrainElapsed, "timer", "drained");
  const auto lines = split_lines(read_file(path));
  ASSERT_EQ(lines.size(), 2u);
  for (const auto& line : lines) EXPECT_TRUE(json_reader(line).object()) << line;
  EXPECT_EQ(get(parse_object(lines[1]), "event").text, "DrainElapsed");
}

// When the torn part cannot be cut off either (here a memfd sealed against shrinking), the next
// record starts on a fresh line: the torn line stays invalid, the others are whole.
TEST_F(EventRecorder, TornLineThatStaysIsFollowedByAFreshLine) {
  unique_fd memfd(::memfd_create("events", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  ASSERT_TRUE(memfd);
  const std::string memfd_path = "/proc/self/fd/" + std::to_string(memfd.get());
  event_recorder events(log, memfd_path);
  events.record(event_kind::Started, "start", "started");
  ASSERT_EQ(::fcntl(memfd.get(), F_ADD_SEALS, F_SEAL_SHRINK), 0);
  {
    file_size_limit limit(static_cast<rlim_t>(file_size(memfd_path)) + 50);
    events.record(event_kind::ShutdownInitiated, "SIGTERM", "draining");
  }
  EXPECT_EQ(events.failed_records(), 1u);
  // Opening the same file again keeps that in mind.
  EXPECT_TRUE(events.reopen().ok());
  events.record(event_kind::DrainElapsed, "timer", "drained");
  events.record(event_kind::InhibitorReleased, "timer", "released");

  const auto lines = split_lines(read_file(memfd_path));
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_TRUE(json_reader(lines[0]).object()) << lines[0];
  EXPECT_EQ(lines[1].size(), 50u);
  EXPECT_THAT(lines[1], StartsWith("{\"event\":\"ShutdownInitiated\""));
  EXPECT_EQ(get(parse_object(lines[2]), "event").text, "EventLogReopened");
  EXPECT_EQ(get(parse_object(lines[3]), "event").text, "DrainElapsed");
  EXPECT_EQ(get(parse_object(lines[4]), "event").text, "InhibitorReleased");
}

// logrotate: rename, then SIGHUP.
TEST_F(EventRecorder, ReopenFollowsARename) {
  event_recorder events(log, path);
  events.record(event_kind::Started, "start", "before");
  ASSERT_EQ(::rename(path.c_str(), (path + ".1").c_str()), 0);
  events.record(event_kind::InhibitorTaken, "", "still the old file");
  EXPECT_TRUE(events.reopen().ok());
  events.record(event_kind::ShutdownInitiated, "SIGTERM", "after");

  const auto old_lines = split_lines(read_file(path + ".1"));
  ASSERT_EQ(old_lines.size(), 2u);
  EXPECT_EQ(get(parse_object(old_lines[1]), "message").text, "still the old file");
  // The new file starts with the reason it exists.
  const auto new_lines = split_lines(read_file(path));
  ASSERT_EQ(new_lines.size(), 2u);
  EXPECT_EQ(get(parse_object(new_lines[0]), "event").text, "EventLogReopened");
  EXPECT_EQ(get(parse_object(new_lines[0]), "path").text, path);
  EXPECT_EQ(get(parse_object(new_lines[1]), "message").text, "after");
  EXPECT_THAT(out.text(), HasSubstr("<6>opened the event log again event=EventLogReopened"));
  EXPECT_EQ(find_descriptor(path + ".1"), -1) << "the old file is still open";
}

TEST_F(EventRecorder, FailedReopenKeepsTheOldFile) {
  event_recorder events(log, path);
  events.record(event_kind::Started, "start", "before");
  ASSERT_EQ(::rename(path.c_str(), (path + ".1").c_str()), 0);
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);  // no reader: opening it must not wait
  const auto reopened = events.reopen();
  ASSERT_FALSE(reopened);
  EXPECT_EQ(reopened.error(), "--event-log " + path + ": a FIFO, not a regular file");
  events.record(event_kind::ShutdownInitiated, "SIGTERM", "after");

  const auto lines = split_lines(read_file(path + ".1"));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(get(parse_object(lines[1]), "message").text, "after");
  EXPECT_THAT(out.text(), HasSubstr("<4>cannot reopen the event log; still writing to the old "
                                    "file path=" +
                                    path + " error=\"--event-log " + path +
                                    ": a FIFO, not a regular file\"\n"));
  EXPECT_EQ(events.failed_records(), 0u);
}

TEST_F(EventRecorder, WithoutPathOnlyLogs) {
  logger json_log(log_format::json, out.fd(), false);
  event_recorder events(json_log, "");
  EXPECT_TRUE(events.reopen().ok());
  events.record(event_kind::TargetExited, "pidfd", "exited", {{"status", "0"}});
  const auto lines = split_lines(out.text());
  ASSERT_EQ(lines.size(), 1u);
  const json_object o = parse_object(lines[0]);
  EXPECT_THAT(keys(o), ElementsAre("time", "level", "msg", "event", "cause", "status"));
  EXPECT_EQ(get(o, "event").text, "TargetExited");
  EXPECT_EQ(get(o, "level").text, "info");
}

}  // namespace
}  // namespace shim
