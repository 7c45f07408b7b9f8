#include "http_session.hpp"

#include <algorithm>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <chrono>
#include <cstdint>
#include <limits>
#include <utility>

namespace shim {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

// After an error response, how long at most we keep reading (and discarding) before closing:
// closing with unread input makes the kernel send a RST, which can destroy the response in flight.
constexpr std::chrono::milliseconds kLingerTimeout{2000};

}  // namespace

http_session::http_session(std::shared_ptr<http_server_state> state, tcp::socket socket)
    : state_(std::move(state)),
      stream_(std::move(socket)),
      buffer_(state_->limits.max_request_bytes) {}

http_session::~http_session() { unregister(); }

void http_session::start() {
  pos_ = state_->sessions.insert(state_->sessions.end(), this);
  registered_ = true;
  read_request();
}

void http_session::close() {
  unregister();
  stream_.close();
}

void http_session::unregister() {
  if (!registered_) return;
  registered_ = false;
  state_->session_closed(pos_);
}

void http_session::read_request() {
  const auto& limits = state_->limits;
  parser_.emplace();
  parser_->header_limit(static_cast<std::uint32_t>(
      std::min<std::size_t>(limits.max_request_bytes, std::numeric_limits<std::uint32_t>::max())));
  parser_->body_limit(0);
  // One deadline for the whole request: a client that trickles bytes does not extend it.
  stream_.expires_after(limits.read_timeout);
  // The head only: whatever follows it stays in buffer_, unparsed, until on_read() has decided.
  http::async_read_header(
      stream_, buffer_, *parser_,
      [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
}

void http_session::on_read(beast::error_code ec) {
  if (closed()) return;
  if (ec == http::error::end_of_stream) {
    // The client closed between requests.
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
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
    return;  // deadline (the stream has closed the socket already), reset, another socket error
  } else if (!parser_->is_done() || parser_->get().count(http::field::transfer_encoding) != 0) {
    // A chunked (or otherwise transfer-coded) body. Refused here, from the header: Beast 1.74's
    // chunk parser asserts (n >= 5, basic_parser.ipp:688) on a final chunk split across reads,
    // and reads trailers and chunk extensions without a bound.
    refusal = http::status::bad_request;
  }
  if (refusal != http::status::ok) {
    response_ = error_response(state_->counts, refusal);
    return write(then::linger);
  }
  state_->sessions.splice(state_->sessions.end(), state_->sessions, pos_);  // most recently active
  response_ = handle_request(state_->status, state_->counts, parser_->get());
  write(response_.keep_alive() ? then::read_next : then::close);
}

void http_session::write(then next) {
  // A client that does not read its responses gets the same deadline as one that does not send.
  stream_.expires_after(state_->limits.read_timeout);
  http::async_write(stream_, response_,
                    [self = shared_from_this(), next](beast::error_code ec, std::size_t) {
                      self->on_write(next, ec);
                    });
}

void http_session::on_write(then next, beast::error_code ec) {
  if (closed() || ec) return;
  if (next == then::read_next) return read_request();
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  if (next == then::close) return;
  // What the client sent after a refused request is still unread.
  buffer_.consume(buffer_.size());
  stream_.expires_after(
      std::min<std::chrono::milliseconds>(state_->limits.read_timeout, kLingerTimeout));
  drain();
}

void http_session::drain() {
  stream_.async_read_some(buffer_.prepare(buffer_.max_size()),
                          [self = shared_from_this()](beast::error_code ec, std::size_t) {
                            // EOF: the client has read our answer and closed.
                            if (self->closed() || ec) return;
                            self->drain();
                          });
}

}  // namespace shim
