#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

#include "config.hpp"
#include "shim_status.hpp"

namespace shim {

struct http_limits {
  std::size_t max_header_bytes = 8 * 1024;
  std::size_t max_body_bytes = 0;  // probes carry no body
  std::chrono::milliseconds read_timeout{10'000};
  std::size_t max_connections = 512;
};

using http_request = boost::beast::http::request<boost::beast::http::string_body>;
using http_response = boost::beast::http::response<boost::beast::http::string_body>;

// The pure part of the server: one request in, one response out. Counts the response's status code
// in status.http_requests_by_code.
http_response handle_request(shim_status& status, const http_request& request);

// Prometheus text exposition format 0.0.4.
std::string render_metrics(const shim_status& status);

// GET/HEAD /readyz[?verbose], /livez, /healthz, /metrics over HTTP/1.1 with keep-alive. Async on
// the io_context; a flood of idle or slow clients never delays the answer to a fresh probe.
class readiness_server {
 public:
  readiness_server(boost::asio::io_context& io, shim_status& status, http_limits limits = {});
  ~readiness_server();

  // Binds and listens on each address (port 0 picks a free one). Throws std::system_error naming
  // the address that failed.
  void listen(const std::vector<listen_address>& addresses);
  std::vector<boost::asio::ip::tcp::endpoint> endpoints() const;

  // Closes listeners and connections.
  void stop();

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace shim
