#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "util/result.hpp"
#include "util/unique_fd.hpp"

namespace shim {

// The command run in wrapper mode. It starts in its own process group with default signal
// dispositions and an empty signal mask; every fd of the shim except 0, 1 and 2 is close-on-exec,
// so it never inherits the inhibitor lock.
class child_process {
 public:
  // Throws std::system_error when the command cannot be started (fork failure, or exec failure with
  // exec's errno, e.g. ENOENT for a missing program).
  child_process(boost::asio::io_context& io, const std::vector<std::string>& argv);
  ~child_process();
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  pid_t pid() const { return pid_; }
  bool running() const { return !exit_code_; }
  // The shell convention: the exit status, or 128 + signal number when killed by a signal.
  std::optional<int> exit_code() const { return exit_code_; }

  // Through the pidfd. false when the child has already exited; a failure on other errors
  // (EINVAL, EPERM).
  result<bool> send_signal(int signal);

  // Called once, from the io_context, when the child has exited and been reaped.
  void on_exit(std::function<void(int exit_code)> handler);

  // When the shim is PID 1: reap every exited process (call it on SIGCHLD). The child's own status
  // is delivered to the on_exit handler.
  void reap_all();

 private:
  void wait_for_exit();
  void reaped(int exit_code);

  pid_t pid_ = -1;
  boost::asio::posix::stream_descriptor pidfd_;
  std::optional<int> exit_code_;
  std::function<void(int)> on_exit_;
};

// A wait status (as from waitpid) -> the exit code above.
int exit_code_from_status(int wait_status);

}  // namespace shim
