#include "util/exit_watcher.hpp"

#include <fmt/format.h>

#include <boost/asio/error.hpp>
#include <cerrno>
#include <iterator>
#include <utility>

#include "util/errno_error.hpp"

namespace shim {

result<> exit_watcher::watch(process_handle process, std::function<void(pid_t)> on_exit) {
  const pid_t pid = process.pid();
  unique_fd fd = process.release_fd();
  if (!fd) return result<>::errno_failure(EBADF, fmt::format("watch PID {}", pid));
  watched_.emplace_back(io_);
  const auto it = std::prev(watched_.end());
  boost::system::error_code error;
  it->assign(fd.get(), error);
  if (error) {
    watched_.erase(it);
    return result<>::errno_failure(error.value(), fmt::format("watch PID {}", pid));
  }
  fd.release();
  // A pidfd becomes readable once the process has exited (zombie or reaped).
  it->async_wait(
      boost::asio::posix::stream_descriptor::wait_read,
      [this, it, pid, on_exit = std::move(on_exit)](const boost::system::error_code& ec) mutable {
        // Aborted by clear() or by the watcher's destruction: `this` may be gone.
        if (ec == boost::asio::error::operation_aborted) return;
        // Any other completion means the pidfd is done for: treat it as the exit.
        auto handler = std::move(on_exit);
        watched_.erase(it);
        // Last, so that the handler may watch(), clear() or even destroy the watcher.
        if (handler) handler(pid);
      });
  return result<>::success();
}

void exit_watcher::clear() {
  // Destroying a descriptor closes the pidfd and completes its wait with operation_aborted.
  watched_.clear();
}

}  // namespace shim
