#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/error.hpp>
#include <cstddef>
#include <list>
#include <memory>
#include <vector>

#include "http_session.hpp"
#include "readiness_server.hpp"
#include "shim_status.hpp"

namespace shim {

// Everything the readiness server's asynchronous handlers touch: the listeners, the open
// connections and the request counters. Handlers hold it by shared_ptr, so it outlives the
// readiness_server when operations are still queued on the io_context at destruction; after stop()
// they only see `stopped` and return.
struct http_server_state : std::enable_shared_from_this<http_server_state> {
  struct listener {
    explicit listener(boost::asio::io_context& io) : acceptor(io), backoff(io) {}
    boost::asio::ip::tcp::acceptor acceptor;
    boost::asio::steady_timer backoff;
  };

  http_server_state(boost::asio::io_context& io, const shim_status& status, http_limits limits)
      : io(io), status(status), limits(limits), timerfd_reset(io) {}

  void accept(std::shared_ptr<listener> l);
  void stop();
  // A session leaves `sessions`.
  void session_closed(std::list<http_session*>::iterator pos);

  boost::asio::io_context& io;
  const shim_status& status;
  http_limits limits;
  http_request_counts counts;
  bool stopped = false;
  std::vector<std::shared_ptr<listener>> listeners;
  std::vector<boost::asio::ip::tcp::endpoint> endpoints;
  // Open connections, least recently active first: a connection moves to the back when it is
  // accepted and whenever it completes a request, so slow or idle clients drift to the front.
  std::list<http_session*> sessions;

 private:
  void on_accept(const std::shared_ptr<listener>& l, boost::beast::error_code ec,
                 http_session::socket_type socket);
  void evict_oldest();
  void reset_timerfd();

  boost::asio::steady_timer timerfd_reset;
};

}  // namespace shim
