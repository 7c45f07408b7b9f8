#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <list>
#include <memory>
#include <optional>

#include "http_server_state.hpp"
#include "readiness_server.hpp"

namespace shim {

// One HTTP/1.1 connection of the readiness server: reads a request head, answers it, and goes on
// while the client keeps the connection alive. A request is at most max_request_bytes; one that
// announces a body is refused from its header, so Beast's body and chunk parsers never run.
class http_session : public std::enable_shared_from_this<http_session> {
 public:
  http_session(std::shared_ptr<http_server_state> state, boost::asio::ip::tcp::socket socket);
  ~http_session();
  http_session(const http_session&) = delete;
  http_session& operator=(const http_session&) = delete;

  void start();
  // Eviction or stop: pending operations complete with operation_aborted and the session ends.
  void close();

 private:
  bool closed() const { return !registered_ || state_->stopped; }
  void unregister();
  void read_request();
  void on_read(boost::beast::error_code ec);
  // What follows a response: the next request, a close, or, after a refused request, a close once
  // the client has read the answer (see kLingerTimeout).
  enum class then { read_next, close, linger };
  void write(then next);
  void on_write(then next, boost::beast::error_code ec);
  void drain();

  std::shared_ptr<http_server_state> state_;
  boost::beast::tcp_stream stream_;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  http_response response_;
  std::list<http_session*>::iterator pos_;
  bool registered_ = false;
};

}  // namespace shim
