#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cstddef>
#include <functional>
#include <list>

#include "util/process_handle.hpp"
#include "util/result.hpp"

namespace shim {

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
