#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <functional>
#include <list>
#include <optional>
#include <string>
#include <vector>

#include "config/target_spec.hpp"
#include "util/result.hpp"
#include "util/unique_fd.hpp"

namespace shim {

// A process reached through a pidfd (pidfd_open + pidfd_send_signal), so that a signal can never
// hit a process that reused the PID.
class process_handle {
 public:
  // nullopt when no such process exists (ESRCH); a failure on other errors (EMFILE, EINVAL).
  static result<std::optional<process_handle>> open(pid_t pid);
  process_handle(pid_t pid, unique_fd pidfd) : pid_(pid), fd_(std::move(pidfd)) {}

  pid_t pid() const { return pid_; }
  int fd() const { return fd_.get(); }
  unique_fd release_fd() { return std::move(fd_); }

  // false when the process has already exited; a failure on other errors (EINVAL, EPERM).
  result<bool> send_signal(int signal) const;

 private:
  pid_t pid_;
  unique_fd fd_;
};

// Finds the attach-mode target now: the PID given, the PID in a trusted pidfile (see
// open_trusted_file), or every process whose /proc/PID/comm equals the name and whose real and
// effective uid are spec.name_uid. Never PID 1, the shim itself or its parent, whatever the kind
// of target. An empty result carries the reason, for the log.
struct resolved_target {
  std::vector<pid_t> pids;
  std::string reason;
};
resolved_target resolve_target(const target_spec& spec, const std::string& proc_root = "/proc");

// A process's command line, /proc/PID/cmdline's NUL-separated words; nullopt when it is gone (a
// zombie's is empty).
std::optional<std::vector<std::string>> read_command_line(pid_t pid,
                                                          const std::string& proc_root = "/proc");

// What main() checks before the shim starts: a pidfile that exists now and may not be trusted, a
// path to it that cannot be walked, or --target-pid naming the shim or its parent. A failure is
// one line naming the file or PID and the reason (main() logs it and exits 1).
result<> check_target_at_start(const target_spec& spec);

// Watches processes for exit through their pidfds on the io_context; no polling.
class exit_watcher {
 public:
  explicit exit_watcher(boost::asio::io_context& io) : io_(io) {}
  // Calls on_exit(pid) once when that process has exited. Takes ownership of the pidfd (closed
  // at once on a failure: a handle without a pidfd, or one the io_context cannot watch).
  result<> watch(process_handle process, std::function<void(pid_t)> on_exit);
  std::size_t watching() const { return watched_.size(); }
  void clear();

 private:
  boost::asio::io_context& io_;
  std::list<boost::asio::posix::stream_descriptor> watched_;
};

}  // namespace shim
