#include "process/child_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <utility>

#include "util/errno_error.hpp"
#include "util/process_handle.hpp"

namespace shim {
namespace {

// Exit code when the child's status was collected by someone else (a waitpid(-1) outside
// reap_all): the exit is certain, its status is not.
constexpr int kStatusUnknown = 255;

// Runs in the forked child: only async-signal-safe calls, no allocation. Reports the errno of
// whatever failed through `report_fd` (close-on-exec, so a successful exec reports nothing).
[[noreturn]] void exec_child(char* const* argv, int report_fd) noexcept {
  // All signals are still blocked (see start()), so none of the shim's handlers can run here
  // while the dispositions are reset. exec would reset caught signals by itself, but ignored
  // ones would stay ignored. sigaction fails harmlessly for SIGKILL, SIGSTOP and libc's own.
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  for (int number = 1; number < NSIG; ++number) ::sigaction(number, &default_action, nullptr);

  int error = 0;
  // Its own process group, so that a terminal's or the shim's group signals don't reach it and
  // the shim alone decides what it receives.
  if (::setpgid(0, 0) != 0) {
    error = errno;
  } else {
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execvp(argv[0], argv);
    error = errno;
  }
  ssize_t written;
  do {
    written = ::write(report_fd, &error, sizeof error);
  } while (written < 0 && errno == EINTR);
  ::_exit(127);
}

void kill_and_reap(pid_t pid) noexcept {
  ::kill(pid, SIGKILL);
  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
}

int exit_code_from_siginfo(const siginfo_t& info) {
  switch (info.si_code) {
    case CLD_EXITED:
      return info.si_status;
    case CLD_KILLED:
    case CLD_DUMPED:
      return 128 + info.si_status;
    default:
      return kStatusUnknown;
  }
}

}  // namespace

child_process::child_process(boost::asio::io_context& io, const std::vector<std::string>& argv)
    : pidfd_(io) {
  if (argv.empty() || argv.front().empty()) throw_errno(EINVAL, "start: empty command");
  const std::string context = "start " + argv.front();

  // Everything the child needs is prepared before fork: the child must not allocate.
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);

  int pipe_fds[2];
  check_libc(::pipe2(pipe_fds, O_CLOEXEC), context);
  unique_fd report_read(pipe_fds[0]);
  unique_fd report_write(pipe_fds[1]);

  // Block every signal across fork: a handler of the shim (asio's signal_set writes to a pipe it
  // shares with the parent) must never run in the child before the dispositions are reset.
  sigset_t all;
  sigset_t saved;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &saved);
  const pid_t pid = ::fork();
  if (pid == 0) exec_child(args.data(), report_write.get());
  const int fork_error = errno;
  ::pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  if (pid < 0) throw_errno(fork_error, context);
  report_write.reset();

  // Race-free: the child stays a zombie until we wait for it, so its PID cannot be reused before
  // this. (It requires that nothing else in the shim reaps children behind our back and that
  // SIGCHLD is not SIG_IGN.)
  const long fd = ::syscall(SYS_pidfd_open, pid, 0);
  if (fd < 0) {
    const int error = errno;
    kill_and_reap(pid);
    throw_errno(error, context + ": pidfd_open");
  }
  unique_fd pidfd(static_cast<int>(fd));

  // EOF means exec succeeded (the close-on-exec pipe closed); an int is the child's errno.
  int child_error = 0;
  ssize_t n;
  do {
    n = ::read(report_read.get(), &child_error, sizeof child_error);
  } while (n < 0 && errno == EINTR);
  if (n != 0) {
    const int error = n == sizeof child_error ? child_error : (n < 0 ? errno : EPROTO);
    kill_and_reap(pid);
    throw_errno(error, context);
  }

  boost::system::error_code assign_error;
  pidfd_.assign(pidfd.get(), assign_error);
  if (assign_error) {
    kill_and_reap(pid);
    throw_errno(assign_error.value(), context + ": watch pidfd");
  }
  pidfd.release();
  pid_ = pid;
  wait_for_exit();
}

// The pidfd closes with pidfd_; the child is left running: the daemon decides its fate.
child_process::~child_process() = default;

result<bool> child_process::send_signal(int signal) {
  if (exit_code_ || !pidfd_.is_open()) return result<bool>::success(false);
  return process_handle::send_signal_through(pidfd_.native_handle(), pid_, signal);
}

void child_process::on_exit(std::function<void(int exit_code)> handler) {
  if (!exit_code_) {
    on_exit_ = std::move(handler);
    return;
  }
  // Already exited: still from the io_context, and without touching *this later.
  if (handler) {
    boost::asio::post(pidfd_.get_executor(),
                      [handler = std::move(handler), code = *exit_code_] { handler(code); });
  }
}

void child_process::reap_all() {
  std::optional<int> own_exit;
  for (;;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid < 0 && errno == EINTR) continue;
    if (pid <= 0) break;  // 0: none exited yet; ECHILD: no children left
    if (pid == pid_ && !exit_code_) own_exit = exit_code_from_status(status);
  }
  // Last: the handler may destroy *this.
  if (own_exit) reaped(*own_exit);
}

void child_process::wait_for_exit() {
  // A pidfd becomes readable when the process exits.
  pidfd_.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                    [this](const boost::system::error_code& ec) {
                      // Aborted by reaped() or by destruction: `this` may be gone.
                      if (ec == boost::asio::error::operation_aborted || exit_code_) return;
                      siginfo_t info{};
                      int r;
                      do {
                        r = ::waitid(P_PIDFD, static_cast<id_t>(pidfd_.native_handle()), &info,
                                     WEXITED | WNOHANG);
                      } while (r < 0 && errno == EINTR);
                      if (r < 0) {
                        // ECHILD: reaped elsewhere (not through reap_all), so the status is lost.
                        reaped(kStatusUnknown);
                        return;
                      }
                      // Readable should mean waitable; WNOHANG only guards the io_context against
                      // blocking.
                      if (info.si_pid == 0) {
                        wait_for_exit();
                        return;
                      }
                      reaped(exit_code_from_siginfo(info));
                    });
}

void child_process::reaped(int exit_code) {
  exit_code_ = exit_code;
  // The process is gone for good; this also cancels a pending wait, so the status is delivered
  // exactly once whichever of reap_all and the pidfd saw it first.
  boost::system::error_code ignored;
  pidfd_.close(ignored);
  auto handler = std::exchange(on_exit_, nullptr);
  if (handler) handler(exit_code);
}

int exit_code_from_status(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return kStatusUnknown;
}

}  // namespace shim
