#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/error.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "http/http_connections.hpp"
#include "http/http_session.hpp"

namespace shim {

// A server's listening sockets and their accept loop, for TCP (the readiness server) and Unix
// stream sockets (the control socket); instantiated for both in http_listeners.cpp. Handlers hold
// it by shared_ptr, so it outlives its server when operations are still queued on the io_context
// at destruction; after stop() they see the connections stopped and return.
template <typename Protocol>
struct http_listeners : std::enable_shared_from_this<http_listeners<Protocol>> {
  using acceptor_type = typename Protocol::acceptor;
  using endpoint_type = typename Protocol::endpoint;
  using session_type = http_session<Protocol>;

  struct listener {
    explicit listener(boost::asio::io_context& io) : acceptor(io), backoff(io) {}
    acceptor_type acceptor;
    boost::asio::steady_timer backoff;
    endpoint_type peer;  // filled by the pending accept
  };

  http_listeners(boost::asio::io_context& io, std::shared_ptr<http_connections> connections)
      : io(io), connections(std::move(connections)) {}

  void accept(std::shared_ptr<listener> l);
  // Closes the listeners and every connection.
  void stop();

  boost::asio::io_context& io;
  std::shared_ptr<http_connections> connections;
  std::vector<std::shared_ptr<listener>> listeners;
  std::vector<endpoint_type> endpoints;
  // Whether a connection from `peer` is served; one it refuses gets the answers' refusal 403 and
  // is closed once the client has read it. Empty: every peer is served.
  std::function<bool(const http_peer& peer)> admits;
  std::uint64_t refused = 0;  // connections refused by `admits`

 private:
  void on_accept(const std::shared_ptr<listener>& l, boost::beast::error_code ec,
                 typename session_type::socket_type socket);
};

// Throws `ec` as std::system_error saying `what`; an errno value stays comparable with std::errc.
[[noreturn]] void throw_listen_error(const boost::beast::error_code& ec, const std::string& what);

}  // namespace shim
