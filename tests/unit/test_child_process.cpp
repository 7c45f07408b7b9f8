#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "process/child_process.hpp"

namespace shim {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Generous: every test is event-driven, this only bounds a broken one.
constexpr auto event_timeout = 10s;

// Runs the io_context until the child's exit has been delivered; returns the codes delivered.
std::vector<int> run_until_exit(boost::asio::io_context& io, child_process& child) {
  std::vector<int> codes;
  child.on_exit([&](int code) {
    codes.push_back(code);
    io.stop();  // other children may still keep the io_context busy
  });
  io.restart();
  io.run_for(event_timeout);
  return codes;
}

// Kills and reaps a child the test started, unless it is gone already: no test leaves a process
// behind, even when an assertion fails half-way.
class child_guard {
 public:
  explicit child_guard(pid_t pid) : pid_(pid) {}
  ~child_guard() {
    if (::kill(pid_, 0) == 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  child_guard(const child_guard&) = delete;
  child_guard& operator=(const child_guard&) = delete;

 private:
  pid_t pid_;
};

// send_signal's answer: whether the signal went out. A failure (not "already exited") fails the
// test.
bool delivered(const result<bool>& sent) {
  if (!sent) {
    ADD_FAILURE() << sent.error();
    return false;
  }
  return sent.value();
}

// No child of this process is left, exited or not.
bool no_children_left() {
  siginfo_t info{};
  return ::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) < 0 && errno == ECHILD;
}

// Blocks until the process has exited, leaving it unreaped.
void wait_exited(pid_t pid) {
  siginfo_t info{};
  while (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR) {
  }
}

TEST(ChildProcess, ExitCodeZero) {
  boost::asio::io_context io;
  child_process child(io, {"true"});  // PATH lookup
  EXPECT_GT(child.pid(), 0);
  EXPECT_EQ(run_until_exit(io, child), std::vector<int>{0});
  EXPECT_FALSE(child.running());
  EXPECT_EQ(child.exit_code(), 0);
  EXPECT_TRUE(no_children_left());
}

TEST(ChildProcess, ExitCodeThree) {
  boost::asio::io_context io;
  child_process child(io, {"sh", "-c", "exit 3"});
  EXPECT_EQ(run_until_exit(io, child), std::vector<int>{3});
  EXPECT_EQ(child.exit_code(), 3);
}

TEST(ChildProcess, RunsUntilItExits) {
  boost::asio::io_context io;
  child_process child(io, {"sleep", "30"});
  child_guard guard(child.pid());
  int calls = 0;
  child.on_exit([&](int) { ++calls; });
  io.poll();  // nothing is ready while it runs
  EXPECT_EQ(calls, 0);
  EXPECT_TRUE(child.running());
  EXPECT_EQ(child.exit_code(), std::nullopt);
  EXPECT_TRUE(delivered(child.send_signal(0)));
}

TEST(ChildProcess, KilledBySigkillIs137) {
  boost::asio::io_context io;
  child_process child(io, {"sleep", "30"});
  child_guard guard(child.pid());
  EXPECT_TRUE(delivered(child.send_signal(SIGKILL)));
  EXPECT_EQ(run_until_exit(io, child), std::vector<int>{137});
  EXPECT_FALSE(delivered(child.send_signal(SIGKILL)));  // exited: nothing to signal
}

TEST(ChildProcess, KilledBySigtermIs143) {
  boost::asio::io_context io;
  child_process child(io, {"sleep", "30"});
  child_guard guard(child.pid());
  EXPECT_TRUE(delivered(child.send_signal(SIGTERM)));
  EXPECT_EQ(run_until_exit(io, child), std::vector<int>{143});
}

TEST(ChildProcess, ExecFailureThrowsWithErrnoAndLeavesNoZombie) {
  boost::asio::io_context io;
  for (const std::string program :
       {"/nonexistent/shim-test-no-such-program", "shim-test-no-such-program-in-path"}) {
    try {
      child_process child(io, {program, "arg"});
      ADD_FAILURE() << "started " << program;
    } catch (const std::system_error& e) {
      EXPECT_EQ(e.code().value(), ENOENT);
      EXPECT_STREQ(e.what(), ("start " + program + ": No such file or directory").c_str());
    }
    EXPECT_TRUE(no_children_left());
  }
}

TEST(ChildProcess, ExecOfNonExecutableFileThrowsEacces) {
  const fs::path file =
      fs::temp_directory_path() / ("shim-test-noexec-" + std::to_string(::getpid()));
  std::ofstream(file) << "#!/bin/sh\nexit 0\n";
  fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write);
  boost::asio::io_context io;
  try {
    child_process child(io, {file.string()});
    ADD_FAILURE() << "started a non-executable file";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code().value(), EACCES);
  }
  fs::remove(file);
  EXPECT_TRUE(no_children_left());
}

TEST(ChildProcess, EmptyCommandThrows) {
  boost::asio::io_context io;
  EXPECT_THROW(child_process(io, {}), std::system_error);
  EXPECT_THROW(child_process(io, {""}), std::system_error);
}

TEST(ChildProcess, RunsInItsOwnProcessGroup) {
  boost::asio::io_context io;
  child_process child(io, {"sleep", "30"});
  child_guard guard(child.pid());
  EXPECT_EQ(::getpgid(child.pid()), child.pid());
  EXPECT_NE(::getpgid(child.pid()), ::getpgrp());
}

// Restores the test process's mask and dispositions even when an assertion fails.
class signal_state_guard {
 public:
  signal_state_guard() {
    ::pthread_sigmask(SIG_SETMASK, nullptr, &mask_);
    ::sigaction(SIGUSR1, nullptr, &usr1_);
    ::sigaction(SIGUSR2, nullptr, &usr2_);
  }
  ~signal_state_guard() {
    ::pthread_sigmask(SIG_SETMASK, &mask_, nullptr);
    ::sigaction(SIGUSR1, &usr1_, nullptr);
    ::sigaction(SIGUSR2, &usr2_, nullptr);
  }
  signal_state_guard(const signal_state_guard&) = delete;
  signal_state_guard& operator=(const signal_state_guard&) = delete;

 private:
  sigset_t mask_;
  struct sigaction usr1_ {};
  struct sigaction usr2_ {};
};

// A /proc/PID/status field as a number ("SigBlk:\t0000000000000000").
unsigned long long status_mask(pid_t pid, const std::string& field) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind(field + ":", 0) == 0)
      return std::stoull(line.substr(field.size() + 1), nullptr, 16);
  }
  ADD_FAILURE() << "no " << field << " for PID " << pid;
  return ~0ull;
}

void handle_nothing(int) {}

TEST(ChildProcess, SignalMaskAndDispositionsAreReset) {
  signal_state_guard restore;
  // What a daemon typically does: block SIGTERM (for a signalfd / signal_set), ignore SIGUSR1.
  sigset_t blocked;
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGTERM);
  ASSERT_EQ(::pthread_sigmask(SIG_BLOCK, &blocked, nullptr), 0);
  ASSERT_NE(::signal(SIGUSR1, SIG_IGN), SIG_ERR);
  ASSERT_NE(::signal(SIGUSR2, handle_nothing), SIG_ERR);

  boost::asio::io_context io;
  child_process by_term(io, {"sleep", "30"});
  child_guard term_guard(by_term.pid());
  child_process by_usr1(io, {"sleep", "30"});
  child_guard usr1_guard(by_usr1.pid());

  // The resets happen before exec, so the status is final once the constructor returns.
  EXPECT_EQ(status_mask(by_term.pid(), "SigBlk"), 0u);
  EXPECT_EQ(status_mask(by_term.pid(), "SigIgn"), 0u);

  // ...and they work: both signals kill, neither is held back nor ignored.
  EXPECT_TRUE(delivered(by_term.send_signal(SIGTERM)));
  EXPECT_EQ(run_until_exit(io, by_term), std::vector<int>{128 + SIGTERM});
  EXPECT_TRUE(delivered(by_usr1.send_signal(SIGUSR1)));
  EXPECT_EQ(run_until_exit(io, by_usr1), std::vector<int>{128 + SIGUSR1});
}

TEST(ChildProcess, CloexecFdIsNotInherited) {
  // Two marker files: one opened close-on-exec (like every fd of the shim, the inhibitor lock
  // among them), one deliberately inheritable to prove the check can see an inherited fd.
  const auto base = fs::temp_directory_path() / ("shim-test-fd-" + std::to_string(::getpid()));
  const std::string hidden = base.string() + "-cloexec";
  const std::string visible = base.string() + "-inherited";
  std::ofstream(hidden).put('x');
  std::ofstream(visible).put('x');
  const int hidden_fd = ::open(hidden.c_str(), O_RDONLY | O_CLOEXEC);
  const int visible_fd = ::open(visible.c_str(), O_RDONLY);
  ASSERT_GE(hidden_fd, 0);
  ASSERT_GE(visible_fd, 0);

  // The child looks at its own fd table after exec: exit 1 if the close-on-exec file is there,
  // 2 if the inheritable one is missing.
  const std::string script =
      "fds=$(ls -l /proc/$$/fd/); "
      "case \"$fds\" in *\"" +
      hidden +
      "\"*) exit 1;; esac; "
      "case \"$fds\" in *\"" +
      visible +
      "\"*) ;; *) exit 2;; esac; "
      "exit 0";
  boost::asio::io_context io;
  std::vector<int> codes;
  {
    child_process child(io, {"sh", "-c", script});
    child_guard guard(child.pid());
    codes = run_until_exit(io, child);
  }
  ::close(hidden_fd);
  ::close(visible_fd);
  fs::remove(hidden);
  fs::remove(visible);
  EXPECT_EQ(codes, std::vector<int>{0});
}

TEST(ChildProcess, OwnFdsAreCloexecAndClosedOnDestruction) {
  auto count_fds = [] {
    return std::distance(fs::directory_iterator("/proc/self/fd"), fs::directory_iterator{});
  };
  boost::asio::io_context io;
  // The reactor's own fds (epoll, eventfd, timerfd) come with the first descriptor: open them
  // first.
  boost::asio::posix::stream_descriptor warm_up(io);
  const auto before = count_fds();
  pid_t pid;
  {
    child_process child(io, {"sleep", "30"});
    pid = child.pid();
    // Only the pidfd is left open, and it is close-on-exec.
    EXPECT_EQ(count_fds(), before + 1);
    for (const auto& entry : fs::directory_iterator("/proc/self/fd")) {
      const int fd = std::stoi(entry.path().filename().string());
      if (fs::read_symlink(entry.path()).string() == "anon_inode:[pidfd]") {
        EXPECT_TRUE(::fcntl(fd, F_GETFD) & FD_CLOEXEC);
      }
    }
  }
  // The destructor leaves the child running (the daemon decides) but closes the pidfd.
  child_guard guard(pid);
  EXPECT_EQ(::kill(pid, 0), 0);
  EXPECT_EQ(count_fds(), before);
}

TEST(ChildProcess, OnExitSetAfterTheExitIsStillDelivered) {
  boost::asio::io_context io;
  child_process child(io, {"true"});
  io.run_for(event_timeout);  // exits and is reaped with no handler set
  ASSERT_EQ(child.exit_code(), 0);
  std::vector<int> codes;
  child.on_exit([&](int code) { codes.push_back(code); });
  EXPECT_TRUE(codes.empty());  // not from inside on_exit: from the io_context
  io.restart();
  io.run_for(event_timeout);
  EXPECT_EQ(codes, std::vector<int>{0});
}

TEST(ChildProcess, ReapAllCollectsOthersAndDeliversOwnStatusOnce) {
  boost::asio::io_context io;
  child_process child(io, {"sleep", "30"});
  child_guard guard(child.pid());
  // An orphan-like extra child, as PID 1 inherits them: nobody waits for it but reap_all.
  const pid_t extra = ::fork();
  if (extra == 0) ::_exit(7);
  ASSERT_GT(extra, 0);

  std::vector<int> codes;
  child.on_exit([&](int code) { codes.push_back(code); });
  ASSERT_TRUE(delivered(child.send_signal(SIGTERM)));
  wait_exited(child.pid());
  wait_exited(extra);

  // As on SIGCHLD, before the pidfd readiness had a chance to run.
  child.reap_all();
  EXPECT_EQ(codes, std::vector<int>{143});
  EXPECT_EQ(child.exit_code(), 143);
  EXPECT_TRUE(no_children_left());

  // The pidfd path must neither deliver again nor fail.
  io.run_for(event_timeout);
  child.reap_all();
  EXPECT_EQ(codes, std::vector<int>{143});
  EXPECT_FALSE(delivered(child.send_signal(SIGTERM)));
}

TEST(ChildProcess, ReapAllAfterThePidfdPathDeliversNothingMore) {
  boost::asio::io_context io;
  child_process child(io, {"sh", "-c", "exit 5"});
  const pid_t extra = ::fork();
  if (extra == 0) ::_exit(0);
  ASSERT_GT(extra, 0);
  EXPECT_EQ(run_until_exit(io, child), std::vector<int>{5});

  int calls = 0;
  child.on_exit([&](int) { ++calls; });  // posted once, since it has exited
  wait_exited(extra);
  child.reap_all();
  EXPECT_TRUE(no_children_left());
  io.restart();
  io.run_for(event_timeout);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(child.exit_code(), 5);
}

TEST(ChildProcess, ReapAllWithRunningChildReapsNothingOfIt) {
  boost::asio::io_context io;
  child_process child(io, {"sleep", "30"});
  child_guard guard(child.pid());
  int calls = 0;
  child.on_exit([&](int) { ++calls; });
  child.reap_all();  // nothing has exited: WNOHANG returns at once
  EXPECT_EQ(calls, 0);
  EXPECT_TRUE(child.running());
  ASSERT_TRUE(delivered(child.send_signal(SIGKILL)));
  io.run_for(event_timeout);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(child.exit_code(), 137);
}

TEST(ChildProcess, ExitCodeFromStatus) {
  EXPECT_EQ(exit_code_from_status(0), 0);
  EXPECT_EQ(exit_code_from_status(3 << 8), 3);
  EXPECT_EQ(exit_code_from_status(255 << 8), 255);
  EXPECT_EQ(exit_code_from_status(SIGKILL), 137);
  EXPECT_EQ(exit_code_from_status(SIGTERM), 143);
  EXPECT_EQ(exit_code_from_status(SIGSEGV | 0x80), 128 + SIGSEGV);  // core dumped
}

TEST(ChildProcess, ExitCodeFromRealStatuses) {
  for (const auto& [script, expected] : std::vector<std::pair<std::string, int>>{
           {"exit 0", 0}, {"exit 42", 42}, {"kill -KILL $$", 137}}) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::execl("/bin/sh", "sh", "-c", script.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ASSERT_GT(pid, 0);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_EQ(exit_code_from_status(status), expected) << script;
  }
}

}  // namespace
}  // namespace shim
