#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/http/status.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <string>
#include <variant>

#include "http/http_limits.hpp"
#include "http/http_request_counts.hpp"
#include "http/request_head_parser.hpp"

namespace shim {

// Who is at the other end of a connection, as the kernel reported it when the connection was
// accepted: read once per connection, never per request.
struct tcp_peer {
  boost::asio::ip::address address;  // from accept() itself: no getpeername() per connection
  std::uint16_t port = 0;
};

// SO_PEERCRED: the credentials the peer had when it called connect().
struct unix_peer {
  uid_t uid = static_cast<uid_t>(-1);
  pid_t pid = 0;
};

using http_peer = std::variant<tcp_peer, unix_peer>;

// An open connection, as the table of connections closes it (eviction, stop).
class http_connection {
 public:
  virtual void close() = 0;

 protected:
  ~http_connection() = default;
};

// What a connection answers, given by its server (the readiness server's endpoints, the control
// socket's routes): a connection reads and writes bytes and knows no endpoint.
struct http_answers {
  // Appends the answer to `request` (method, target, version, keep-alive; it never has a body)
  // from `peer` to `out`; true when the connection stays open.
  std::function<bool(const http_request& request, const http_peer& peer,
                     http_request_counts& counts, std::string& out)>
      respond;
  // Appends the answer to a request refused before routing; the connection closes after it.
  std::function<void(boost::beast::http::status code, http_request_counts& counts,
                     std::string& out)>
      refuse;
};

// A server's open connections and what they share: limits, answers, request counts.
// Held by shared_ptr by every connection, so it outlives the server while their operations are
// still queued on the io_context; after close_all() they see `stopped()` and return.
class http_connections {
 public:
  using position = std::list<http_connection*>::iterator;

  http_connections(boost::asio::io_context& io, http_limits limits, http_answers answers)
      : io_(io), limits_(limits), answers_(std::move(answers)), timerfd_reset_(io) {}

  boost::asio::io_context& io() const { return io_; }
  const http_limits& limits() const { return limits_; }
  http_limits& limits() { return limits_; }
  const http_answers& answers() const { return answers_; }
  http_request_counts& counts() { return counts_; }
  bool stopped() const { return stopped_; }
  void restart() { stopped_ = false; }
  std::size_t size() const { return open_.size(); }
  bool empty() const { return open_.empty(); }

  // Open connections, least recently active first: a connection moves to the back when it is
  // accepted and whenever it completes a request, so slow or idle clients drift to the front.
  position add(http_connection* c) { return open_.insert(open_.end(), c); }
  void touch(position pos) { open_.splice(open_.end(), open_, pos); }
  void remove(position pos);
  void close_oldest();
  void close_all();

 private:
  void reset_timerfd();

  boost::asio::io_context& io_;
  http_limits limits_;
  http_answers answers_;
  http_request_counts counts_;
  bool stopped_ = false;
  std::list<http_connection*> open_;
  boost::asio::steady_timer timerfd_reset_;
};

}  // namespace shim
