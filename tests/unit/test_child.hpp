#pragma once
// A child process owned by a test (test_target, test_target_watch): killed and reaped at the end.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "util/unique_fd.hpp"

namespace shim {

// A child owned by the test; killed and reaped at the end, whatever happens.
class test_child {
 public:
  static constexpr char kTerm = 'T';  // what a counting child writes per SIGTERM
  static constexpr char kMark = 'M';  // ...and per SIGRTMIN, the test's marker

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
  static std::unique_ptr<test_child> named(const std::string& name, bool exit_at_once = false,
                                           std::optional<uid_t> uid = std::nullopt) {
    int ready[2];
    if (::pipe2(ready, O_CLOEXEC) != 0) {
      throw std::system_error(errno, std::generic_category(), "pipe2");
    }
    auto child = std::unique_ptr<test_child>(new test_child());
    child->pid_ = ::fork();
    if (child->pid_ == 0) {
      ::prctl(PR_SET_NAME, name.c_str());
      if (uid && ::setresuid(*uid, *uid, *uid) != 0) ::_exit(126);
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

  // A forked child named `name` that survives SIGTERM and writes kTerm to a pipe for each one it
  // gets, and kMark for each SIGRTMIN. Standard signals are delivered before real-time ones, so
  // the bytes read before a mark() came back are every SIGTERM sent before it.
  static std::unique_ptr<test_child> counting(const std::string& name) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      throw std::system_error(errno, std::generic_category(), "pipe2");
    }
    auto child = std::unique_ptr<test_child>(new test_child());
    child->pid_ = ::fork();
    if (child->pid_ == 0) {
      ::close(fds[0]);
      counting_fd() = fds[1];
      struct sigaction sa {};
      // Every signal blocked in the handler: the kernel sets up the frames of all pending signals
      // at once, the last on top, so without it a mark could be written before a SIGTERM taken
      // before it.
      sigfillset(&sa.sa_mask);
      sa.sa_handler = [](int signal) {
        const char byte = signal == SIGTERM ? kTerm : kMark;
        [[maybe_unused]] const auto n = ::write(counting_fd(), &byte, 1);
      };
      ::sigaction(SIGTERM, &sa, nullptr);
      ::sigaction(SIGRTMIN, &sa, nullptr);
      ::prctl(PR_SET_NAME, name.c_str());
      ::raise(SIGRTMIN);  // the parent's first mark: the handlers and the name are in place
      for (;;) ::pause();
    }
    const int fork_error = errno;
    ::close(fds[1]);
    child->signals_.reset(fds[0]);
    if (child->pid_ < 0) throw std::system_error(fork_error, std::generic_category(), "fork");
    child->read_until_mark();
    return child;
  }

  // Counting child: how many SIGTERMs it had since the last call, every one sent before now.
  int sigterms_so_far() {
    ::kill(pid_, SIGRTMIN);
    const std::string seen = read_until_mark();
    return static_cast<int>(std::count(seen.begin(), seen.end(), kTerm));
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
  static int& counting_fd() {
    static int fd = -1;
    return fd;
  }
  // Bounded: a child that stopped answering fails the test after 10 s instead of hanging it.
  std::string read_until_mark() {
    std::string seen;
    for (;;) {
      pollfd p{.fd = signals_.get(), .events = POLLIN, .revents = 0};
      const int r = ::poll(&p, 1, 10'000);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) throw std::runtime_error("the counting child did not answer within 10 s");
      char byte = 0;
      if (::read(signals_.get(), &byte, 1) != 1) {
        throw std::runtime_error("the counting child's pipe closed");
      }
      if (byte == kMark) return seen;
      seen.push_back(byte);
    }
  }

  pid_t pid_ = -1;
  unique_fd signals_;  // counting(): the read end of the child's pipe
};

}  // namespace shim
