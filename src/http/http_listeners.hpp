#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/error.hpp>
#include <cstddef>
#include <memory>
#include <vector>

#include "http/http_connections.hpp"
#include "http/http_session.hpp"

namespace shim {

// The readiness server's listening sockets and their accept loop. Handlers hold it by shared_ptr,
// so it outlives the readiness_server when operations are still queued on the io_context at
// destruction; after stop() they see the connections stopped and return.
struct http_listeners : std::enable_shared_from_this<http_listeners> {
  struct listener {
    explicit listener(boost::asio::io_context& io) : acceptor(io), backoff(io) {}
    boost::asio::ip::tcp::acceptor acceptor;
    boost::asio::steady_timer backoff;
  };

  http_listeners(boost::asio::io_context& io, std::shared_ptr<http_connections> connections)
      : io(io), connections(std::move(connections)) {}

  void accept(std::shared_ptr<listener> l);
  // Closes the listeners and every connection.
  void stop();

  boost::asio::io_context& io;
  std::shared_ptr<http_connections> connections;
  std::vector<std::shared_ptr<listener>> listeners;
  std::vector<boost::asio::ip::tcp::endpoint> endpoints;

 private:
  void on_accept(const std::shared_ptr<listener>& l, boost::beast::error_code ec,
                 http_session::socket_type socket);
};

}  // namespace shim
