#include "lb/new_connection_sampler.hpp"

#include <linux/netlink.h>
#include <sys/socket.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <span>

#include "lb/inet_diag_dump.hpp"
#include "util/errno_error.hpp"
#include "util/unique_fd.hpp"

namespace shim {
namespace {

// The kernel caps a dump's datagrams at 32 KiB (netlink_recvmsg() bounds max_recvmsg_len so): a
// larger one would come MSG_TRUNC, and is refused.
constexpr std::size_t kDatagram = 32 * 1024;

// How many of `now` (sorted, unique) are not in `before` (sorted, unique).
std::size_t not_in(const std::vector<std::uint64_t>& now,
                   const std::vector<std::uint64_t>& before) {
  std::size_t fresh = 0;
  auto b = before.begin();
  for (std::uint64_t key : now) {
    while (b != before.end() && *b < key) ++b;
    if (b == before.end() || *b != key) ++fresh;
  }
  return fresh;
}

}  // namespace

new_connection_sampler::new_connection_sampler(boost::asio::io_context& io, std::uint16_t port,
                                               std::size_t max_sockets)
    : port_(port), max_sockets_(max_sockets), socket_(io) {
  open();
}

void new_connection_sampler::open() {
  unique_fd fd(
      check_libc(::socket(AF_NETLINK, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, NETLINK_SOCK_DIAG),
                 "socket(AF_NETLINK, NETLINK_SOCK_DIAG)"));
  socket_.assign(fd.get());  // may throw: fd is still ours to close
  fd.release();
}

void new_connection_sampler::sample(handler done) {
  if (running_)
    return fail_later(std::move(done),
                      result<counts>::failure("sock_diag: a sample is already running"));
  if (!socket_.is_open()) {
    try {
      open();
    } catch (const std::exception& e) {
      return fail_later(std::move(done), result<counts>::failure(e.what()));
    }
  }
  const auto request = inet_diag_dump::request(port_, ++sequence_);
  ssize_t sent;
  do {
    sent = ::send(socket_.native_handle(), request.data(), request.size(), MSG_DONTWAIT);
  } while (sent < 0 && errno == EINTR);
  if (sent < 0)
    return fail_later(std::move(done), result<counts>::errno_failure(errno, "sock_diag: send"));
  running_.emplace(dump{.done = std::move(done), .keys = {}, .truncated = false});
  if (buffer_.empty()) buffer_.resize(kDatagram);
  wait();
}

void new_connection_sampler::fail_later(handler done, result<counts> failure) {
  // Through the loop: the caller of sample() is not re-entered.
  boost::asio::post(socket_.get_executor(),
                    [done = std::move(done), failure = std::move(failure)] { done(failure); });
}

void new_connection_sampler::wait() {
  socket_.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                     [this](const boost::system::error_code& ec) {
                       // Aborted by destruction: `this` is gone.
                       if (ec == boost::asio::error::operation_aborted) return;
                       if (ec)
                         return finish(result<counts>::errno_failure(ec.value(), "sock_diag"));
                       receive();
                     });
}

// One datagram a turn of the loop, then back to it: the kernel makes the next one during this
// recvmsg(), so reading on would hold the loop for the whole dump (docs/benchmarks.md).
void new_connection_sampler::receive() {
  for (;;) {
    iovec io{.iov_base = buffer_.data(), .iov_len = buffer_.size()};
    msghdr message{};
    message.msg_iov = &io;
    message.msg_iovlen = 1;
    const ssize_t n = ::recvmsg(socket_.native_handle(), &message, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return wait();
    if (n < 0) return finish(result<counts>::errno_failure(errno, "sock_diag: recvmsg"));
    if (n == 0 || (message.msg_flags & MSG_TRUNC)) {
      return finish(result<counts>::failure("sock_diag: an empty or truncated reply"));
    }
    dump& d = *running_;
    const auto parsed = inet_diag_dump::read(
        std::span<const std::uint8_t>(buffer_.data(), static_cast<std::size_t>(n)), sequence_,
        [&](const inet_diag_dump::socket_entry& e) {
          // The kernel's filter, checked again.
          if (e.local_port != port_) return;
          if (d.keys.size() < max_sockets_) {
            d.keys.push_back(e.key);
          } else {
            d.truncated = true;
          }
        });
    if (parsed.state == inet_diag_dump::outcome::failed) {
      return finish(result<counts>::failure(parsed.error));
    }
    if (d.truncated) {
      // The rest of the dump is not read: the socket it holds is closed, the next sample opens
      // a new one and starts over as a first.
      socket_.close();
      previous_.clear();
      sampled_ = false;
      return finish(result<counts>::success(counts{.open = max_sockets_, .truncated = true}));
    }
    if (parsed.state == inet_diag_dump::outcome::done) {
      std::sort(d.keys.begin(), d.keys.end());
      d.keys.erase(std::unique(d.keys.begin(), d.keys.end()), d.keys.end());
      const counts c{.open = d.keys.size(),
                     .fresh = sampled_ ? not_in(d.keys, previous_) : d.keys.size(),
                     .first = !sampled_};
      previous_ = std::move(d.keys);
      sampled_ = true;
      return finish(result<counts>::success(c));
    }
    return wait();
  }
}

void new_connection_sampler::finish(result<counts> outcome) {
  auto done = std::move(running_->done);
  running_.reset();
  // An abandoned dump would hold the socket (EBUSY) until read to its end: the next sample opens
  // a new one instead.
  if (!outcome.ok()) socket_.close();
  // Last: the handler may destroy *this.
  done(std::move(outcome));
}

}  // namespace shim
