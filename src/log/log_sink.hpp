#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "util/unique_fd.hpp"

namespace shim {

// Writes whole log lines to a descriptor (stderr) without ever blocking the event loop. What
// cannot be written at once waits in a queue bounded in bytes; when the queue is full, new lines
// are dropped whole and counted, and once the queue has drained a notice says how many. A line
// partly written is always finished before the next one starts.
//
// Not thread-safe: one thread, the loop's, writes (the shim has no other).
class log_sink {
 public:
  // How a line reaches the descriptor without blocking, and without changing flags that another
  // process sharing the open file description would see.
  enum class method {
    write,            // write(): a regular file, or our own O_NONBLOCK open file description
    send,             // send(MSG_DONTWAIT): a socket (the journal's stream)
    poll_then_write,  // poll() for room, then at most PIPE_BUF bytes: see writable_copy()
  };

  struct target {
    unique_fd fd;
    method how = method::write;
  };

  struct handlers {
    // The line that reports `dropped` lines, written once the queue has drained.
    std::function<std::string(std::uint64_t dropped)> dropped_notice;
  };

  // 64 KiB, the default capacity of a Linux pipe: a burst of a few hundred lines during a
  // shutdown fits, and the memory stays bounded however long the reader stalls.
  static constexpr std::size_t kDefaultCapacity = 64 * 1024;

  // A descriptor for fd that can be written without blocking; fd itself is left as it is.
  static target writable_copy(int fd);

  log_sink(target t, std::size_t capacity, handlers h);
  ~log_sink();
  log_sink(const log_sink&) = delete;
  log_sink& operator=(const log_sink&) = delete;

  // Lets the sink wait on io for the descriptor to become writable; until then, what does not fit
  // at once is queued, and dropped when the queue is full. Call once; io must outlive the sink.
  // Throws std::system_error if the wait cannot be set up.
  void attach(boost::asio::io_context& io);

  // Queues one line (ending in '\n') and writes what it can at once. Never blocks.
  void write(std::string_view line);

  // Lines dropped so far: queue full, or the descriptor failed (a reader that went away).
  std::uint64_t dropped_lines() const { return dropped_; }
  std::size_t queued_bytes() const { return queue_.size(); }

 private:
  void flush() noexcept;
  std::size_t next_chunk() const;
  ssize_t put(std::string_view bytes) const;
  void drop_front_line() noexcept;
  void wait_writable();

  target target_;
  std::size_t capacity_;
  handlers handlers_;
  std::string queue_;  // bytes not written yet, whole lines but for a partly written first one
  std::uint64_t dropped_ = 0;
  std::uint64_t unreported_ = 0;                                 // dropped since the last notice
  std::optional<boost::asio::posix::stream_descriptor> waiter_;  // an epoll set: room in target_
  bool waiting_ = false;
};

}  // namespace shim
