#pragma once

#include <boost/asio/basic_stream_socket.hpp>
#include <boost/asio/basic_waitable_timer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/wait_traits.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/status.hpp>
#include <chrono>
#include <list>
#include <memory>
#include <optional>
#include <string>

#include "http/http_connections.hpp"
#include "http/request_head_parser.hpp"

namespace shim {

// One HTTP/1.1 connection: reads a request head, has it answered (http_answers), and goes on while
// the client keeps the connection alive. A request is at most max_request_bytes; one that
// announces a body is refused from its header, so Beast's body and chunk parsers never run. Its
// deadline, executor and hand-written answer make it far cheaper per keep-alive /readyz than
// Beast's plain session (docs/benchmarks.md).
//
// A template on the socket's protocol, instantiated for TCP (the readiness server) and Unix
// stream sockets (the control socket): no indirection per read or write on the TCP path, as a
// generic::stream_protocol socket would have.
template <typename Protocol>
class http_session final : public http_connection,
                           public std::enable_shared_from_this<http_session<Protocol>> {
 public:
  // The io_context's own executor: any_io_executor's type-erased copies cost each request
  // (docs/benchmarks.md).
  using socket_type =
      boost::asio::basic_stream_socket<Protocol, boost::asio::io_context::executor_type>;
  using timer_type =
      boost::asio::basic_waitable_timer<std::chrono::steady_clock,
                                        boost::asio::wait_traits<std::chrono::steady_clock>,
                                        boost::asio::io_context::executor_type>;

  http_session(std::shared_ptr<http_connections> connections, socket_type socket, http_peer peer);
  ~http_session();
  http_session(const http_session&) = delete;
  http_session& operator=(const http_session&) = delete;

  void start();
  // Answers `code` (the answers' refusal) before reading anything, then closes once the client
  // has read it: a peer the server does not admit.
  void start_refused(boost::beast::http::status code);
  // Eviction or stop: pending operations complete with operation_aborted and the session ends.
  void close() override;

 private:
  bool closed() const;
  void unregister();
  void set_deadline(std::chrono::steady_clock::duration timeout);
  void arm_timer();
  void read_request();
  void on_read(boost::beast::error_code ec);
  void refuse(boost::beast::http::status code);
  // What follows a response: the next request, a close, or, after a refused request, a close once
  // the client has read the answer (see kLingerTimeout).
  enum class then { read_next, close, linger };
  void write(then next);
  void on_write(then next, boost::beast::error_code ec);
  void drain();

  std::shared_ptr<http_connections> connections_;
  socket_type socket_;
  timer_type timer_;
  std::chrono::steady_clock::time_point deadline_;
  bool timer_armed_ = false;
  boost::beast::flat_buffer buffer_;
  std::optional<request_head_parser> parser_;  // the request being read
  std::string out_;  // the answer being written; a probe-sized capacity is reused
  http_connections::position pos_;
  bool registered_ = false;
  http_peer peer_;
};

}  // namespace shim
