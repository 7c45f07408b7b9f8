#include "process.hpp"

#include <fcntl.h>
#include <fmt/core.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

namespace sandbox {

namespace {

// PIDs owned by a live child_process: reap_orphans leaves them to their owner.
std::mutex tracked_mutex;
std::set<pid_t> tracked_pids;

void track(pid_t pid) {
  std::lock_guard lock(tracked_mutex);
  tracked_pids.insert(pid);
}

void untrack(pid_t pid) {
  std::lock_guard lock(tracked_mutex);
  tracked_pids.erase(pid);
}

bool is_tracked(pid_t pid) {
  std::lock_guard lock(tracked_mutex);
  return tracked_pids.contains(pid);
}

std::set<std::filesystem::path>& cleanup_dirs() {
  static std::set<std::filesystem::path> dirs;
  return dirs;
}

int open_pidfd(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

// What the child reports through the exec-status pipe when it fails before exec.
struct child_failure {
  int stage;
  int error;
};

enum stage : int {
  kStageSetpgid = 1,
  kStageCredentials,
  kStagePdeathsig,
  kStageUnshare,
  kStageMakePrivate,
  kStageBindMount,
  kStageStdio,
  kStagePassFd,
  kStageExec,
};

const char* stage_name(int s) {
  switch (s) {
    case kStageSetpgid:
      return "setpgid";
    case kStageCredentials:
      return "setgroups/setgid/setuid";
    case kStagePdeathsig:
      return "prctl(PR_SET_PDEATHSIG)";
    case kStageUnshare:
      return "unshare(CLONE_NEWNS)";
    case kStageMakePrivate:
      return "mount(/, MS_REC|MS_PRIVATE)";
    case kStageBindMount:
      return "bind mount";
    case kStageStdio:
      return "redirecting stdio";
    case kStagePassFd:
      return "passing a descriptor";
    case kStageExec:
      return "execve";
    default:
      return "?";
  }
}

[[noreturn]] void child_fail(int pipe_fd, int s) {
  child_failure f{s, errno};
  // Best effort: the parent treats a short read as a failure too.
  [[maybe_unused]] ssize_t n = write(pipe_fd, &f, sizeof f);
  _exit(127);
}

int open_output(const std::filesystem::path& path) {
  if (path.empty()) return open("/dev/null", O_WRONLY | O_CLOEXEC);
  return open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

}  // namespace

std::uint64_t monotonic_us() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000u +
         static_cast<std::uint64_t>(ts.tv_nsec) / 1000u;
}

user_ids lookup_user(const std::string& name) {
  passwd pw{};
  passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found) != 0 || !found) {
    throw std::runtime_error(fmt::format("no user named {} on this machine", name));
  }
  return {found->pw_uid, found->pw_gid};
}

int shell_exit_code(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return -1;
}

std::string describe_wait_status(int wait_status) {
  if (WIFEXITED(wait_status)) return fmt::format("exited with {}", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    return fmt::format("killed by signal {} ({})", WTERMSIG(wait_status),
                       strsignal(WTERMSIG(wait_status)));
  }
  return fmt::format("wait status {:#x}", wait_status);
}

child_process::child_process(std::string name, const std::vector<std::string>& argv,
                             const spawn_options& opts)
    : name_(std::move(name)) {
  if (argv.empty()) throw std::invalid_argument("child_process: empty argv");

  // Everything the child needs is prepared here: after fork only async-signal-safe calls.
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  std::vector<char*> cenv;
  for (const auto& e : opts.env) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);

  const int out_fd = open_output(opts.stdout_path);
  if (out_fd < 0) {
    throw std::runtime_error(
        fmt::format("{}: cannot open {}: {}", name_, opts.stdout_path.string(), strerror(errno)));
  }
  const int err_fd = opts.stderr_path.empty() ? dup(out_fd) : open_output(opts.stderr_path);
  if (err_fd < 0) {
    close(out_fd);
    throw std::runtime_error(
        fmt::format("{}: cannot open stderr file: {}", name_, strerror(errno)));
  }
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

  int status_pipe[2];
  if (pipe2(status_pipe, O_CLOEXEC) < 0) {
    close(out_fd);
    close(err_fd);
    close(null_fd);
    throw std::runtime_error(fmt::format("{}: pipe2: {}", name_, strerror(errno)));
  }
  // Passed descriptors are first moved above every target number, so dup2 cannot clobber one.
  std::vector<std::pair<int, int>> pass;
  for (auto [from, to] : opts.pass_fds) {
    pass.emplace_back(fcntl(from, F_DUPFD_CLOEXEC, 100), to);
  }

  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int e = errno;
    close(status_pipe[0]);
    close(status_pipe[1]);
    close(out_fd);
    close(err_fd);
    close(null_fd);
    for (auto [fd, to] : pass) close(fd);
    throw std::runtime_error(fmt::format("{}: fork: {}", name_, strerror(e)));
  }
  if (pid == 0) {
    const int report = status_pipe[1];
    if (setpgid(0, 0) < 0) child_fail(report, kStageSetpgid);
    if (opts.user &&
        (setgroups(0, nullptr) < 0 || setgid(opts.user->gid) < 0 || setuid(opts.user->uid) < 0)) {
      child_fail(report, kStageCredentials);
    }
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) child_fail(report, kStagePdeathsig);
    if (getppid() != parent) _exit(127);  // the harness is already gone
    // The harness may block signals in threads; the child starts with a clean slate.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int s = 1; s < NSIG; ++s) ::signal(s, SIG_DFL);
    if (!opts.private_mounts.empty()) {
      if (unshare(CLONE_NEWNS) < 0) child_fail(report, kStageUnshare);
      if (mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) < 0) {
        child_fail(report, kStageMakePrivate);
      }
      for (const auto& m : opts.private_mounts) {
        if (mount(m.source.c_str(), m.target.c_str(), nullptr, MS_BIND, nullptr) < 0) {
          child_fail(report, kStageBindMount);
        }
      }
    }
    if (dup2(null_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0) {
      child_fail(report, kStageStdio);
    }
    for (auto [fd, to] : pass) {
      if (dup2(fd, to) < 0) child_fail(report, kStagePassFd);  // dup2 clears FD_CLOEXEC
    }
    execve(cargv[0], cargv.data(), cenv.data());
    child_fail(report, kStageExec);
  }

  close(status_pipe[1]);
  close(out_fd);
  close(err_fd);
  close(null_fd);
  for (auto [fd, to] : pass) close(fd);
  pid_ = pid;
  start_us_ = monotonic_us();
  pidfd_ = open_pidfd(pid);
  track(pid);

  // EOF means exec succeeded (the pipe is close-on-exec); a record means it failed.
  child_failure failure{};
  ssize_t n;
  do {
    n = read(status_pipe[0], &failure, sizeof failure);
  } while (n < 0 && errno == EINTR);
  close(status_pipe[0]);
  if (n != 0) {
    kill_and_reap();
    const std::string what =
        n == static_cast<ssize_t>(sizeof failure)
            ? fmt::format("{} failed: {}", stage_name(failure.stage), strerror(failure.error))
            : std::string("child failed before exec");
    throw std::runtime_error(fmt::format("{}: starting {}: {}", name_, argv[0], what));
  }
}

child_process::~child_process() { kill_and_reap(); }

child_process::child_process(child_process&& other) noexcept { *this = std::move(other); }

child_process& child_process::operator=(child_process&& other) noexcept {
  if (this != &other) {
    kill_and_reap();
    name_ = std::move(other.name_);
    pid_ = std::exchange(other.pid_, -1);
    pidfd_ = std::exchange(other.pidfd_, -1);
    start_us_ = other.start_us_;
    exit_seen_us_ = other.exit_seen_us_;
    status_ = std::exchange(other.status_, std::nullopt);
  }
  return *this;
}

bool child_process::try_reap(bool block) {
  if (pid_ <= 0) return true;
  if (status_) return true;
  int st = 0;
  pid_t r;
  do {
    r = waitpid(pid_, &st, block ? 0 : WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == pid_) {
    status_ = st;
    exit_seen_us_ = monotonic_us();
    untrack(pid_);
    if (pidfd_ >= 0) {
      close(pidfd_);
      pidfd_ = -1;
    }
    return true;
  }
  if (r < 0 && errno == ECHILD) {
    // Someone else reaped it; nothing left to wait for.
    status_ = 0;
    exit_seen_us_ = monotonic_us();
    untrack(pid_);
    return true;
  }
  return false;
}

bool child_process::running() { return pid_ > 0 && !try_reap(false); }

void child_process::signal(int sig) {
  if (pid_ > 0 && !status_) ::kill(pid_, sig);  // unreaped: the PID cannot have been reused
}

std::optional<int> child_process::wait_for_exit(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return std::nullopt;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!try_reap(false)) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    if (pidfd_ >= 0) {
      pollfd p{pidfd_, POLLIN, 0};
      poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 1000)) + 1);
    } else {
      std::this_thread::sleep_for(std::min(left, std::chrono::milliseconds(5)));
    }
  }
  return status_;
}

void child_process::stop(std::chrono::milliseconds grace) {
  if (pid_ <= 0 || status_) return;
  signal(SIGTERM);
  if (!wait_for_exit(grace)) kill_and_reap();
}

void child_process::kill_and_reap() {
  if (pid_ <= 0) return;
  // The group is signalled only while its leader is unreaped: only then is the number surely ours.
  // Descendants left behind after that are orphans, reaped by reap_orphans().
  if (!status_) {
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
    try_reap(true);
  }
  if (pidfd_ >= 0) {
    close(pidfd_);
    pidfd_ = -1;
  }
}

void register_cleanup_dir(const std::filesystem::path& dir) {
  std::lock_guard lock(tracked_mutex);
  cleanup_dirs().insert(dir);
}

void unregister_cleanup_dir(const std::filesystem::path& dir) {
  std::lock_guard lock(tracked_mutex);
  cleanup_dirs().erase(dir);
}

void install_termination_cleanup() {
  static bool installed = false;
  if (installed) return;
  installed = true;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set] {
    int sig = 0;
    while (sigwait(&set, &sig) != 0) {
    }
    // The main thread may be anywhere: take the registries and end everything from here.
    std::lock_guard lock(tracked_mutex);
    for (pid_t pid : tracked_pids) {
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
    }
    for (pid_t pid : tracked_pids) {
      int st;
      waitpid(pid, &st, 0);
    }
    for (const auto& dir : cleanup_dirs()) {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
    std::fprintf(stderr, "terminated by signal %d: killed %zu children, removed %zu sandbox dirs\n",
                 sig, tracked_pids.size(), cleanup_dirs().size());
    _exit(128 + sig);
  }).detach();
}

void become_subreaper() { prctl(PR_SET_CHILD_SUBREAPER, 1); }

void reap_orphans(std::chrono::milliseconds patience) {
  const auto deadline = std::chrono::steady_clock::now() + patience;
  const pid_t self = getpid();
  for (;;) {
    std::vector<pid_t> orphans;
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
      const std::string name = entry.path().filename();
      if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream stat(entry.path() / "stat");
      std::string line;
      if (!std::getline(stat, line)) continue;
      // "pid (comm) state ppid ...": comm may hold spaces, so parse after the last ')'.
      auto close_paren = line.rfind(')');
      if (close_paren == std::string::npos) continue;
      char state = 0;
      int ppid = 0;
      if (std::sscanf(line.c_str() + close_paren + 1, " %c %d", &state, &ppid) != 2) continue;
      const pid_t pid = static_cast<pid_t>(std::stol(name));
      if (ppid == self && !is_tracked(pid)) orphans.push_back(pid);
    }
    if (orphans.empty()) return;
    for (pid_t pid : orphans) {
      ::kill(pid, SIGKILL);
      int st;
      if (std::chrono::steady_clock::now() < deadline) {
        waitpid(pid, &st, 0);
      } else {
        waitpid(pid, &st, WNOHANG);
      }
    }
    if (std::chrono::steady_clock::now() >= deadline) return;
  }
}

}  // namespace sandbox
