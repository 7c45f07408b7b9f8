#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "target.hpp"

namespace shim {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// A child owned by the test; killed and reaped at the end, whatever happens.
class test_child {
 public:
  // fork + exec of argv (execv: a path, no PATH lookup).
  explicit test_child(const std::vector<std::string>& argv) {
    std::vector<char*> args;
    for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
    args.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    if (pid_ < 0) throw std::system_error(errno, std::generic_category(), "fork");
  }

  // A forked child that renames itself (as exec would: same 15-byte truncation), then either waits
  // to be killed or exits. Returns once the name is set, so the test needs no retry loop.
  static std::unique_ptr<test_child> named(const std::string& name, bool exit_at_once = false) {
    int ready[2];
    if (::pipe2(ready, O_CLOEXEC) != 0) {
      throw std::system_error(errno, std::generic_category(), "pipe2");
    }
    auto child = std::unique_ptr<test_child>(new test_child());
    child->pid_ = ::fork();
    if (child->pid_ == 0) {
      ::prctl(PR_SET_NAME, name.c_str());
      if (exit_at_once) ::_exit(0);
      const char byte = 1;
      [[maybe_unused]] const auto n = ::write(ready[1], &byte, 1);
      for (;;) ::pause();
    }
    const int fork_error = errno;
    ::close(ready[1]);
    if (child->pid_ < 0) {
      ::close(ready[0]);
      throw std::system_error(fork_error, std::generic_category(), "fork");
    }
    char byte;
    while (::read(ready[0], &byte, 1) < 0 && errno == EINTR) {
    }
    ::close(ready[0]);
    if (exit_at_once) child->wait_exited();
    return child;
  }

  ~test_child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      reap();
    }
  }
  test_child(const test_child&) = delete;
  test_child& operator=(const test_child&) = delete;

  pid_t pid() const { return pid_; }

  // Blocks until the child has exited, leaving it a zombie.
  void wait_exited() const {
    siginfo_t info{};
    while (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOWAIT) < 0 &&
           errno == EINTR) {
    }
  }
  // The wait status; the PID is not ours any more afterwards.
  int reap() {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return status;
  }

 private:
  test_child() = default;
  pid_t pid_ = -1;
};

// A fresh directory under TMPDIR, removed at the end.
class temp_dir {
 public:
  temp_dir() {
    std::string pattern = (fs::temp_directory_path() / "shim-target-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw std::system_error(errno, std::generic_category(), "mkdtemp");
    }
    path_ = pattern;
  }
  ~temp_dir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write_file(const fs::path& path, const std::string& content) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << content;
}

// A name unique to this test run, for a symlink whose basename becomes the child's comm.
std::string unique_name(const std::string& tag) { return "s" + std::to_string(::getpid()) + tag; }

fs::path link_to(const temp_dir& dir, const std::string& name, const char* program) {
  const fs::path link = dir.path() / name;
  fs::create_symlink(program, link);
  return link;
}

const char* const sleep_program = "/bin/sleep";

// --- process_handle -----------------------------------------------------------------------------

TEST(ProcessHandle, OpensAndSignalsRealChild) {
  test_child child({sleep_program, "30"});
  auto handle = process_handle::open(child.pid());
  ASSERT_TRUE(handle.has_value());
  EXPECT_EQ(handle->pid(), child.pid());
  ASSERT_GE(handle->fd(), 0);
  EXPECT_TRUE(::fcntl(handle->fd(), F_GETFD) & FD_CLOEXEC);
  EXPECT_TRUE(handle->send_signal(0));
  EXPECT_TRUE(handle->send_signal(SIGTERM));
  const int status = child.reap();
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
}

TEST(ProcessHandle, OpenOfReapedProcessIsNullopt) {
  test_child child({"/bin/true"});
  const pid_t pid = child.pid();
  child.reap();
  EXPECT_FALSE(process_handle::open(pid).has_value());
}

TEST(ProcessHandle, SendSignalAfterReapIsFalse) {
  test_child child({sleep_program, "30"});
  auto handle = process_handle::open(child.pid());
  ASSERT_TRUE(handle.has_value());
  ::kill(child.pid(), SIGKILL);
  child.reap();
  EXPECT_FALSE(handle->send_signal(SIGTERM));
}

TEST(ProcessHandle, OpenOfInvalidPidThrows) {
  EXPECT_THROW(process_handle::open(-5), std::system_error);
}

TEST(ProcessHandle, ReleaseFdTransfersOwnership) {
  test_child child({sleep_program, "30"});
  auto handle = process_handle::open(child.pid());
  ASSERT_TRUE(handle.has_value());
  const int fd = handle->fd();
  unique_fd released = handle->release_fd();
  EXPECT_EQ(released.get(), fd);
  EXPECT_EQ(handle->fd(), -1);
}

// --- resolve_target: pid ------------------------------------------------------------------------

TEST(ResolveTarget, PidOfLiveProcess) {
  test_child child({sleep_program, "30"});
  target_spec spec;
  spec.pid = child.pid();
  const auto result = resolve_target(spec);
  EXPECT_EQ(result.pids, std::vector<pid_t>{child.pid()});
  EXPECT_EQ(result.reason, "");
}

TEST(ResolveTarget, PidOfReapedProcess) {
  test_child child({"/bin/true"});
  const pid_t pid = child.pid();
  child.reap();
  target_spec spec;
  spec.pid = pid;
  const auto result = resolve_target(spec);
  EXPECT_TRUE(result.pids.empty());
  EXPECT_EQ(result.reason, "no process with PID " + std::to_string(pid));
}

TEST(ResolveTarget, PidOfThreadIsRefused) {
  // /proc/TID exists for a thread too, but it is no process to signal.
  std::promise<pid_t> started;
  std::promise<void> finish;
  std::thread thread([&] {
    started.set_value(::gettid());
    finish.get_future().wait();
  });
  target_spec spec;
  spec.pid = started.get_future().get();
  const auto result = resolve_target(spec);
  finish.set_value();
  thread.join();
  EXPECT_TRUE(result.pids.empty());
  EXPECT_EQ(result.reason, "PID " + std::to_string(*spec.pid) + " is a thread of process " +
                               std::to_string(::getpid()) + ", not a process");
}

TEST(ResolveTarget, NonPositivePid) {
  target_spec spec;
  spec.pid = 0;
  const auto result = resolve_target(spec);
  EXPECT_TRUE(result.pids.empty());
  EXPECT_EQ(result.reason, "PID 0 is not valid");
}

// --- resolve_target: pidfile --------------------------------------------------------------------

TEST(ResolveTarget, PidfileMissing) {
  temp_dir dir;
  target_spec spec;
  spec.pidfile = (dir.path() / "x.pid").string();
  const auto result = resolve_target(spec);
  EXPECT_TRUE(result.pids.empty());
  EXPECT_EQ(result.reason, "pidfile " + spec.pidfile + ": No such file or directory");
}

TEST(ResolveTarget, PidfileIsADirectory) {
  temp_dir dir;
  target_spec spec;
  spec.pidfile = dir.path().string();
  const auto result = resolve_target(spec);
  EXPECT_TRUE(result.pids.empty());
  EXPECT_EQ(result.reason, "pidfile " + spec.pidfile + ": Is a directory");
}

TEST(ResolveTarget, PidfileEmpty) {
  temp_dir dir;
  target_spec spec;
  spec.pidfile = (dir.path() / "x.pid").string();
  for (const std::string content : {"", " \n\t\n"}) {
    write_file(spec.pidfile, content);
    const auto result = resolve_target(spec);
    EXPECT_TRUE(result.pids.empty());
    EXPECT_EQ(result.reason, "pidfile " + spec.pidfile + ": empty");
  }
}

TEST(ResolveTarget, PidfileMalformed) {
  temp_dir dir;
  target_spec spec;
  spec.pidfile = (dir.path() / "x.pid").string();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"abc", R"("abc")"},
      {"12abc\n", R"("12abc")"},
      {"-5", R"("-5")"},
      {"+5", R"("+5")"},
      {"0", R"("0")"},
      {"0x10", R"("0x10")"},
      {"99999999999999", R"("99999999999999")"},
      {"1 2", R"("1 2")"},
      {"12\n34\n", R"("12\n34")"},
  };
  for (const auto& [content, shown] : cases) {
    write_file(spec.pidfile, content);
    const auto result = resolve_target(spec);
    EXPECT_TRUE(result.pids.empty()) << content;
    EXPECT_EQ(result.reason, "pidfile " + spec.pidfile + ": " + shown + " is not a PID");
  }
}

TEST(ResolveTarget, PidfileMalformedLongContentIsShortened) {
  temp_dir dir;
  target_spec spec;
  spec.pidfile = (dir.path() / "x.pid").string();
  write_file(spec.pidfile, std::string(100, 'a'));
  const auto result = resolve_target(spec);
  EXPECT_TRUE(result.pids.empty());
  EXPECT_EQ(result.reason,
            "pidfile " + spec.pidfile + ": \"" + std::string(40, 'a') + "\"... is not a PID");
}

TEST(ResolveTarget, PidfileGood) {
  temp_dir dir;
  test_child child({sleep_program, "30"});
  target_spec spec;
  spec.pidfile = (dir.path() / "x.pid").string();
  write_file(spec.pidfile, "  " + std::to_string(child.pid()) + "\n");
  const auto result = resolve_target(spec);
  EXPECT_EQ(result.pids, std::vector<pid_t>{child.pid()});
  EXPECT_EQ(result.reason, "");
}

TEST(ResolveTarget, PidfileOfGoneProcess) {
  temp_dir dir;
  test_child child({"/bin/true"});
  const pid_t pid = child.pid();
  child.reap();
  target_spec spec;
  spec.pidfile = (dir.path() / "x.pid").string();
  write_file(spec.pidfile, std::to_string(pid));
  const auto result = resolve_target(spec);
  EXPECT_TRUE(result.pids.empty());
  EXPECT_EQ(result.reason,
            "pidfile " + spec.pidfile + ": no process with PID " + std::to_string(pid));
}

// --- resolve_target: name -----------------------------------------------------------------------

TEST(ResolveTarget, NameFindsEveryMatchingProcess) {
  const std::string name = unique_name("a");
  const auto first = test_child::named(name);
  const auto second = test_child::named(name);
  const auto other = test_child::named(name + "x");
  target_spec spec;
  spec.name = name;
  const auto result = resolve_target(spec);
  auto expected = std::vector<pid_t>{first->pid(), second->pid()};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(result.pids, expected);
  EXPECT_EQ(result.reason, "");
}

TEST(ResolveTarget, NameLongerThanCommMatchesTruncatedComm) {
  const std::string name = unique_name("b") + "-a-rather-long-program-name";
  ASSERT_GT(name.size(), 15u);
  const auto child = test_child::named(name);
  target_spec spec;
  spec.name = name;
  EXPECT_EQ(resolve_target(spec).pids, std::vector<pid_t>{child->pid()});
  // The comm is only a prefix: a different name with the same first 15 bytes matches too, which
  // is the kernel's limit, not the shim's choice.
  spec.name = name.substr(0, 15) + "-something-else";
  EXPECT_EQ(resolve_target(spec).pids, std::vector<pid_t>{child->pid()});
}

TEST(ResolveTarget, NameFromExecIsFound) {
  // The realistic case: comm comes from the executable's basename at exec. A symlink with a unique
  // name to /bin/true, run to completion, leaves a zombie: the name is certainly set by then.
  temp_dir dir;
  const std::string name = unique_name("c");
  const auto program = link_to(dir, name, "/bin/true");
  test_child child({program.string()});
  child.wait_exited();
  std::ifstream comm_file("/proc/" + std::to_string(child.pid()) + "/comm");
  std::string comm;
  std::getline(comm_file, comm);
  EXPECT_EQ(comm, name.substr(0, 15));
  // ...and as a zombie it is skipped: it cannot react to a signal any more.
  target_spec spec;
  spec.name = name;
  const auto result = resolve_target(spec);
  EXPECT_TRUE(result.pids.empty());
  EXPECT_EQ(result.reason, "no process named " + name);
}

TEST(ResolveTarget, NameSkipsZombies) {
  const std::string name = unique_name("d");
  const auto zombie = test_child::named(name, /*exit_at_once=*/true);
  const auto live = test_child::named(name);
  target_spec spec;
  spec.name = name;
  EXPECT_EQ(resolve_target(spec).pids, std::vector<pid_t>{live->pid()});
}

TEST(ResolveTarget, NameNeverFindsTheShimItself) {
  std::ifstream comm_file("/proc/self/comm");
  std::string comm;
  std::getline(comm_file, comm);
  ASSERT_FALSE(comm.empty());
  target_spec spec;
  spec.name = comm;
  const auto result = resolve_target(spec);
  EXPECT_EQ(std::count(result.pids.begin(), result.pids.end(), ::getpid()), 0);
}

TEST(ResolveTarget, NameWithoutMatch) {
  target_spec spec;
  spec.name = unique_name("-no-such-process");
  const auto result = resolve_target(spec);
  EXPECT_TRUE(result.pids.empty());
  EXPECT_EQ(result.reason, "no process named " + spec.name);
}

TEST(ResolveTarget, FakeProcTree) {
  temp_dir proc;
  const auto& root = proc.path();
  write_file(root / "100" / "comm", "foo\n");
  write_file(root / "100" / "stat", "100 (foo) S 1 100 100 0 -1\n");
  write_file(root / "101" / "comm", "foo\n");
  write_file(root / "101" / "stat", "101 (foo) Z 1 101 101 0 -1\n");
  write_file(root / "102" / "comm", "foobar\n");
  write_file(root / "102" / "stat", "102 (foobar) S 1 102 102 0 -1\n");
  // comm may contain ") Z": the state is the field after the last ')'.
  write_file(root / "103" / "comm", "a) Z\n");
  write_file(root / "103" / "stat", "103 (a) Z) R 1 103 103 0 -1\n");
  write_file(root / "104" / "comm", "foo\n");  // vanished before its stat was read
  write_file(root / "self" / "comm", "foo\n");
  write_file(root / "200" / "comm", "thread\n");
  write_file(root / "200" / "status", "Name:\tthread\nUmask:\t0022\nState:\tS\nTgid:\t199\n");
  write_file(root / std::to_string(::getpid()) / "comm", "foo\n");
  write_file(root / std::to_string(::getpid()) / "stat", "x (foo) S 1\n");

  target_spec spec;
  spec.name = "foo";
  EXPECT_EQ(resolve_target(spec, root.string()).pids, std::vector<pid_t>{100});
  spec.name = "a) Z";
  EXPECT_EQ(resolve_target(spec, root.string()).pids, std::vector<pid_t>{103});

  target_spec by_pid;
  by_pid.pid = 102;
  EXPECT_EQ(resolve_target(by_pid, root.string()).pids, std::vector<pid_t>{102});
  by_pid.pid = 555;
  EXPECT_EQ(resolve_target(by_pid, root.string()).reason, "no process with PID 555");
  by_pid.pid = 200;
  EXPECT_EQ(resolve_target(by_pid, root.string()).reason,
            "PID 200 is a thread of process 199, not a process");
}

TEST(ResolveTarget, MissingProcRoot) {
  target_spec spec;
  spec.name = "foo";
  const auto result = resolve_target(spec, "/nonexistent-proc-root");
  EXPECT_TRUE(result.pids.empty());
  EXPECT_EQ(result.reason, "/nonexistent-proc-root: No such file or directory");
}

TEST(ResolveTarget, NothingConfigured) {
  EXPECT_EQ(resolve_target(target_spec{}).reason, "no target configured");
}

// --- exit_watcher -------------------------------------------------------------------------------

TEST(ExitWatcher, FiresOnceOnExit) {
  boost::asio::io_context io;
  exit_watcher watcher(io);
  test_child child({sleep_program, "30"});
  auto handle = process_handle::open(child.pid());
  ASSERT_TRUE(handle.has_value());
  std::vector<pid_t> exited;
  watcher.watch(std::move(*handle), [&](pid_t pid) { exited.push_back(pid); });
  EXPECT_EQ(watcher.watching(), 1u);
  io.poll();  // the process still runs: nothing to deliver
  EXPECT_TRUE(exited.empty());
  io.restart();
  ::kill(child.pid(), SIGKILL);
  io.run_for(10s);  // returns as soon as the watcher has no more work
  EXPECT_EQ(exited, std::vector<pid_t>{child.pid()});
  EXPECT_EQ(watcher.watching(), 0u);
}

TEST(ExitWatcher, FiresForAlreadyExitedProcess) {
  boost::asio::io_context io;
  exit_watcher watcher(io);
  test_child child({"/bin/true"});
  auto handle = process_handle::open(child.pid());
  ASSERT_TRUE(handle.has_value());
  child.wait_exited();
  int calls = 0;
  watcher.watch(std::move(*handle), [&](pid_t) { ++calls; });
  io.run_for(10s);
  EXPECT_EQ(calls, 1);
}

TEST(ExitWatcher, FiresForReapedProcess) {
  boost::asio::io_context io;
  exit_watcher watcher(io);
  test_child child({sleep_program, "30"});
  auto handle = process_handle::open(child.pid());
  ASSERT_TRUE(handle.has_value());
  ::kill(child.pid(), SIGKILL);
  child.reap();
  int calls = 0;
  watcher.watch(std::move(*handle), [&](pid_t) { ++calls; });
  io.run_for(10s);
  EXPECT_EQ(calls, 1);
}

TEST(ExitWatcher, WatchesSeveralProcessesIndependently) {
  boost::asio::io_context io;
  exit_watcher watcher(io);
  test_child first({sleep_program, "30"});
  test_child second({sleep_program, "30"});
  std::vector<pid_t> exited;
  for (const auto* child : {&first, &second}) {
    auto handle = process_handle::open(child->pid());
    ASSERT_TRUE(handle.has_value());
    watcher.watch(std::move(*handle), [&](pid_t pid) {
      exited.push_back(pid);
      if (exited.size() == 1) ::kill(second.pid(), SIGKILL);
    });
  }
  EXPECT_EQ(watcher.watching(), 2u);
  ::kill(first.pid(), SIGKILL);
  io.run_for(10s);
  EXPECT_EQ(exited, (std::vector<pid_t>{first.pid(), second.pid()}));
  EXPECT_EQ(watcher.watching(), 0u);
}

TEST(ExitWatcher, ClearCancelsEverything) {
  boost::asio::io_context io;
  exit_watcher watcher(io);
  test_child child({sleep_program, "30"});
  auto handle = process_handle::open(child.pid());
  ASSERT_TRUE(handle.has_value());
  int calls = 0;
  watcher.watch(std::move(*handle), [&](pid_t) { ++calls; });
  watcher.clear();
  EXPECT_EQ(watcher.watching(), 0u);
  ::kill(child.pid(), SIGKILL);
  child.wait_exited();
  io.run_for(10s);  // only the aborted wait is left to run
  EXPECT_EQ(calls, 0);
}

TEST(ExitWatcher, HandlerMayClearTheWatcher) {
  boost::asio::io_context io;
  exit_watcher watcher(io);
  test_child first({sleep_program, "30"});
  test_child second({sleep_program, "30"});
  int calls = 0;
  for (const auto* child : {&first, &second}) {
    auto handle = process_handle::open(child->pid());
    ASSERT_TRUE(handle.has_value());
    watcher.watch(std::move(*handle), [&](pid_t) {
      ++calls;
      watcher.clear();
    });
  }
  ::kill(first.pid(), SIGKILL);
  first.wait_exited();
  io.run_for(10s);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(watcher.watching(), 0u);
}

TEST(ExitWatcher, RejectsHandleWithoutFd) {
  boost::asio::io_context io;
  exit_watcher watcher(io);
  EXPECT_THROW(watcher.watch(process_handle(1, unique_fd()), [](pid_t) {}), std::system_error);
  EXPECT_EQ(watcher.watching(), 0u);
}

}  // namespace
}  // namespace shim
