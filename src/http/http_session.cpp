#include "http/http_session.hpp"

#include <algorithm>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/read.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

namespace shim {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

namespace {

// After an error response, how long at most we keep reading (and discarding) before closing:
// closing with unread input makes the kernel send a RST, which can destroy the response in flight.
constexpr std::chrono::milliseconds kLingerTimeout{2000};

// The answer buffer a connection keeps between requests: a probe's answer, even ?verbose, fits;
// a /metrics answer is several times that, so it is given back once written
// (ReadinessServerTest.AnIdleConnectionDoesNotKeepAMetricsAnswer).
constexpr std::size_t kKeptAnswerCapacity = 2048;

}  // namespace

template <typename Protocol>
http_session<Protocol>::http_session(std::shared_ptr<http_connections> connections,
                                     socket_type socket, http_peer peer)
    : connections_(std::move(connections)),
      socket_(std::move(socket)),
      timer_(connections_->io()),
      buffer_(connections_->limits().max_request_bytes),
      peer_(std::move(peer)) {}

template <typename Protocol>
http_session<Protocol>::~http_session() {
  timer_.cancel();
  unregister();
}

template <typename Protocol>
void http_session<Protocol>::start() {
  pos_ = connections_->add(this);
  registered_ = true;
  read_request();
}

template <typename Protocol>
void http_session<Protocol>::start_refused(http::status code) {
  pos_ = connections_->add(this);
  registered_ = true;
  refuse(code);
}

template <typename Protocol>
void http_session<Protocol>::close() {
  unregister();
  beast::error_code ignored;
  socket_.close(ignored);
}

// The connection closes when the deadline passes. Moving it later only updates deadline_: the
// timer still fires at the earlier time and is then re-armed, so a request costs a clock read, not
// a timer cancellation and a new wait (docs/benchmarks.md).
template <typename Protocol>
void http_session<Protocol>::set_deadline(std::chrono::steady_clock::duration timeout) {
  deadline_ = std::chrono::steady_clock::now() + timeout;
  if (!timer_armed_ || deadline_ < timer_.expiry()) arm_timer();
}

template <typename Protocol>
void http_session<Protocol>::arm_timer() {
  timer_.expires_at(deadline_);  // aborts the pending wait, if any
  timer_armed_ = true;
  timer_.async_wait([weak = this->weak_from_this()](beast::error_code ec) {
    auto self = weak.lock();
    if (!self || ec) return;
    self->timer_armed_ = false;
    if (self->closed()) return;
    if (std::chrono::steady_clock::now() < self->deadline_) return self->arm_timer();
    // The pending read or write completes with operation_aborted and the session ends.
    beast::error_code ignored;
    self->socket_.close(ignored);
  });
}

template <typename Protocol>
bool http_session<Protocol>::closed() const {
  return !registered_ || connections_->stopped();
}

template <typename Protocol>
void http_session<Protocol>::unregister() {
  if (!registered_) return;
  registered_ = false;
  connections_->remove(pos_);
}

template <typename Protocol>
void http_session<Protocol>::read_request() {
  const auto& limits = connections_->limits();
  parser_.emplace();
  parser_->header_limit(static_cast<std::uint32_t>(
      std::min<std::size_t>(limits.max_request_bytes, std::numeric_limits<std::uint32_t>::max())));
  parser_->body_limit(0);
  // One deadline for the whole request: a client that trickles bytes does not extend it.
  set_deadline(limits.read_timeout);
  // The head only: whatever follows it stays in buffer_, unparsed, until on_read() has decided.
  http::async_read_header(
      socket_, buffer_, *parser_,
      [self = this->shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
}

template <typename Protocol>
void http_session<Protocol>::on_read(beast::error_code ec) {
  if (closed()) return;
  if (ec == http::error::end_of_stream) {
    // The client closed between requests.
    socket_.shutdown(asio::socket_base::shutdown_send, ec);
    return;
  }
  if (ec == http::error::partial_message) return;  // EOF mid-request: nobody left to answer
  http::status refusal = http::status::ok;
  if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
    refusal = http::status::request_header_fields_too_large;
  } else if (ec == http::error::body_limit) {  // Content-Length > 0
    refusal = http::status::payload_too_large;
  } else if (ec && ec.category() == http::make_error_code(http::error::bad_method).category()) {
    refusal = http::status::bad_request;
  } else if (ec) {
    return;  // deadline (arm_timer() has closed the socket), reset, another socket error
  } else if (!parser_->is_done() || parser_->transfer_coded()) {
    // A chunked (or otherwise transfer-coded) body. Refused here, from the header: Beast 1.74's
    // chunk parser asserts (n >= 5, basic_parser.ipp:688) on a final chunk split across reads,
    // and reads trailers and chunk extensions without a bound.
    refusal = http::status::bad_request;
  }
  out_.clear();
  if (refusal != http::status::ok) return refuse(refusal);
  connections_->touch(pos_);  // most recently active
  const bool keep_alive =
      connections_->answers().respond(parser_->get(), peer_, connections_->counts(), out_);
  write(keep_alive ? then::read_next : then::close);
}

template <typename Protocol>
void http_session<Protocol>::refuse(http::status code) {
  connections_->answers().refuse(code, connections_->counts(), out_);
  write(then::linger);
}

template <typename Protocol>
void http_session<Protocol>::write(then next) {
  parser_.reset();  // the request is answered: its target is not kept while the answer goes out
  // A client that does not read its responses gets the same deadline as one that does not send.
  set_deadline(connections_->limits().read_timeout);
  asio::async_write(socket_, asio::buffer(out_),
                    [self = this->shared_from_this(), next](beast::error_code ec, std::size_t) {
                      self->on_write(next, ec);
                    });
}

template <typename Protocol>
void http_session<Protocol>::on_write(then next, beast::error_code ec) {
  if (out_.capacity() > kKeptAnswerCapacity) std::string().swap(out_);
  if (closed() || ec) return;
  if (next == then::read_next) return read_request();
  socket_.shutdown(asio::socket_base::shutdown_send, ec);
  if (next == then::close) return;
  // What the client sent after a refused request is still unread.
  buffer_.consume(buffer_.size());
  set_deadline(
      std::min<std::chrono::milliseconds>(connections_->limits().read_timeout, kLingerTimeout));
  drain();
}

template <typename Protocol>
void http_session<Protocol>::drain() {
  socket_.async_read_some(buffer_.prepare(buffer_.max_size()),
                          [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
                            // EOF: the client has read our answer and closed.
                            if (self->closed() || ec) return;
                            self->drain();
                          });
}

template class http_session<asio::ip::tcp>;
template class http_session<asio::local::stream_protocol>;

}  // namespace shim
