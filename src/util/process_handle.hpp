#pragma once

#include <sys/types.h>

#include <optional>

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

  result<bool> send_signal(int signal) const {
    return send_signal_through(fd_.get(), pid_, signal);
  }
  // pidfd_send_signal: false when the process has already exited; a failure on other errors
  // (EINVAL, EPERM).
  static result<bool> send_signal_through(int pidfd, pid_t pid, int signal);

 private:
  pid_t pid_;
  unique_fd fd_;
};

}  // namespace shim
