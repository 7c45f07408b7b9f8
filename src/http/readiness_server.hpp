#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <memory>
#include <vector>

#include "http/http_answer.hpp"
#include "http/http_limits.hpp"
#include "http/http_request_counts.hpp"
#include "http/listen_address.hpp"
#include "readiness/shim_status.hpp"

namespace shim {

template <typename Protocol>
struct http_listeners;

// GET/HEAD /readyz[?verbose], /livez, /healthz, /metrics over HTTP/1.1 with keep-alive. Async on
// the io_context; a flood of idle, slow or hostile clients never delays the answer to a fresh
// probe, and never makes the shim hold more than max_request_bytes per connection.
class readiness_server {
 public:
  readiness_server(boost::asio::io_context& io, const shim_status& status, http_limits limits = {},
                   readyz_observer observer = {});
  ~readiness_server();

  // Binds and listens on each address (port 0 picks a free one). Throws std::system_error naming
  // the address that failed.
  void listen(const std::vector<listen_address>& addresses);
  std::vector<boost::asio::ip::tcp::endpoint> endpoints() const;
  const http_request_counts& request_counts() const;

  // Closes listeners and connections.
  void stop();

 private:
  std::shared_ptr<http_listeners<boost::asio::ip::tcp>> state_;
};

}  // namespace shim
