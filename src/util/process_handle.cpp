#include "util/process_handle.hpp"

#include <fmt/format.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "util/errno_error.hpp"

namespace shim {

result<std::optional<process_handle>> process_handle::open(pid_t pid) {
  using opened = result<std::optional<process_handle>>;
  const long fd = ::syscall(SYS_pidfd_open, pid, 0);
  if (fd < 0) {
    if (errno == ESRCH) return opened::success(std::nullopt);
    return opened::errno_failure(errno, fmt::format("pidfd_open PID {}", pid));
  }
  return opened::success(process_handle(pid, unique_fd(static_cast<int>(fd))));
}

result<bool> process_handle::send_signal_through(int pidfd, pid_t pid, int signal) {
  if (::syscall(SYS_pidfd_send_signal, pidfd, signal, nullptr, 0) == 0) {
    return result<bool>::success(true);
  }
  if (errno == ESRCH) return result<bool>::success(false);
  return result<bool>::errno_failure(errno, fmt::format("send signal {} to PID {}", signal, pid));
}

}  // namespace shim
