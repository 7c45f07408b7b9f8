#include "log/log_sink.hpp"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "util/errno_error.hpp"

namespace shim {

log_sink::target log_sink::writable_copy(int fd) {
  struct stat st {};
  // A closed descriptor: every line fails with EBADF and is counted as dropped.
  if (::fstat(fd, &st) != 0) return {};
  if (S_ISREG(st.st_mode)) {
    // write() to a regular file never waits for a reader. Share the description: its offset is
    // the one `2>file` and the child (wrapper mode) write at, so nothing is overwritten.
    return {unique_fd(::fcntl(fd, F_DUPFD_CLOEXEC, 3)), method::write};
  }
  if (S_ISSOCK(st.st_mode)) {
    // A socket cannot be opened again through /proc, and needs not be: MSG_DONTWAIT makes each
    // send() non-blocking without touching the description's flags.
    return {unique_fd(::fcntl(fd, F_DUPFD_CLOEXEC, 3)), method::send};
  }
  // A pipe, FIFO, tty or device. O_NONBLOCK belongs to the open file description, which the child
  // inherits in wrapper mode and other processes may share (a container runtime's, a shell's):
  // set on fd 2 it would make their writes fail with EAGAIN. Opening /proc/self/fd/N gives us a
  // description of our own on the same pipe or tty, with O_NONBLOCK for us alone.
  const std::string own_path = "/proc/self/fd/" + std::to_string(fd);
  const int own = ::open(own_path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (own >= 0) return {unique_fd(own), method::write};
  // No /proc, or the pipe belongs to another user: poll for room first (see put()).
  return {unique_fd(::fcntl(fd, F_DUPFD_CLOEXEC, 3)), method::poll_then_write};
}

log_sink::log_sink(target t, std::size_t capacity, handlers h)
    : target_(std::move(t)), capacity_(capacity), handlers_(std::move(h)) {}

log_sink::~log_sink() {
  waiter_.reset();  // cancels the wait, which then touches nothing
  // One last attempt, without waiting: what a stalled reader has not taken by now is lost.
  flush();
}

// Asio makes every descriptor it waits on non-blocking (FIONBIO in start_op, even for a mere
// async_wait), and the target may share its description with fd 2. So asio never sees the target:
// an epoll set of our own watches it for room, and asio waits for that set to become readable.
void log_sink::attach(boost::asio::io_context& io) {
  if (waiter_ || !target_.fd) return;
  unique_fd watch(::epoll_create1(EPOLL_CLOEXEC));
  if (!watch) throw_errno(errno, "epoll_create1 for stderr");
  epoll_event room{};
  room.events = EPOLLOUT;
  if (::epoll_ctl(watch.get(), EPOLL_CTL_ADD, target_.fd.get(), &room) != 0) {
    // A regular file or /dev/null, which epoll refuses: writing to it never has to wait.
    if (errno == EPERM) return;
    throw_errno(errno, "epoll_ctl for stderr");
  }
  waiter_.emplace(io, watch.release());
  if (!queue_.empty()) flush();
}

void log_sink::write(std::string_view line) {
  if (line.size() > capacity_ - std::min(capacity_, queue_.size())) {
    ++dropped_;
    ++unreported_;
    return;
  }
  queue_.append(line);
  if (!waiting_) flush();
}

// Up to PIPE_BUF bytes ending at a line's end: on a pipe, a write of at most PIPE_BUF bytes is
// atomic, so our lines never interleave with what the child writes to the same pipe. Only a line
// longer than PIPE_BUF goes out in pieces.
std::size_t log_sink::next_chunk() const {
  if (queue_.size() <= PIPE_BUF) return queue_.size();
  const std::size_t end = queue_.rfind('\n', PIPE_BUF - 1);
  return end == std::string::npos ? PIPE_BUF : end + 1;
}

ssize_t log_sink::put(std::string_view bytes) const {
  const int fd = target_.fd.get();
  switch (target_.how) {
    case method::write:
      return ::write(fd, bytes.data(), bytes.size());
    case method::send:
      return ::send(fd, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    case method::poll_then_write: {
      // With room for a page, a write of at most PIPE_BUF bytes (next_chunk) completes at once.
      // It could still wait if another writer filled the pipe between the two calls: this
      // fallback is for a stderr that cannot be opened again, and is weaker than the others.
      pollfd p{fd, POLLOUT, 0};
      const int ready = ::poll(&p, 1, 0);
      if (ready < 0) return -1;
      if (ready == 0) {
        errno = EAGAIN;
        return -1;
      }
      return ::write(fd, bytes.data(), bytes.size());
    }
  }
  errno = EINVAL;
  return -1;
}

void log_sink::flush() noexcept {
  while (!queue_.empty()) {
    const ssize_t written = put(std::string_view(queue_).substr(0, next_chunk()));
    if (written > 0) {
      queue_.erase(0, static_cast<std::size_t>(written));
      if (queue_.empty() && unreported_ > 0 && handlers_.dropped_notice) {
        try {
          queue_ = handlers_.dropped_notice(unreported_);
          unreported_ = 0;
        } catch (...) {
          // No memory for the notice: it comes with the next drain.
        }
      }
      continue;
    }
    if (written < 0 && errno == EINTR) continue;
    if (written < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      wait_writable();
      return;
    }
    // The reader went away (EPIPE) or the descriptor is broken: this line cannot go out.
    drop_front_line();
  }
}

void log_sink::drop_front_line() noexcept {
  const std::size_t end = queue_.find('\n');
  queue_.erase(0, end == std::string::npos ? queue_.size() : end + 1);
  ++dropped_;
  ++unreported_;
}

void log_sink::wait_writable() {
  if (!waiter_ || waiting_) return;  // not attached yet: the next line or attach() tries again
  try {
    waiter_->async_wait(boost::asio::posix::stream_descriptor::wait_read,
                        [this](const boost::system::error_code& ec) {
                          // Aborted: the sink is being destroyed; touch nothing.
                          if (ec == boost::asio::error::operation_aborted) return;
                          waiting_ = false;
                          // A descriptor epoll cannot watch: the next line tries again, rather
                          // than a loop of failed waits.
                          if (!ec) flush();
                        });
    waiting_ = true;
  } catch (...) {
    // No memory for the wait: the next line tries again.
  }
}

}  // namespace shim
