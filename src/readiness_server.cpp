#include "readiness_server.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>

#include <algorithm>
#include <boost/asio/basic_socket_acceptor.hpp>
#include <boost/asio/basic_stream_socket.hpp>
#include <boost/asio/basic_waitable_timer.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/wait_traits.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <cerrno>
#include <chrono>
#include <iterator>
#include <limits>
#include <list>
#include <optional>
#include <string_view>
#include <system_error>
#include <utility>

namespace shim {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr std::string_view kTextPlain = "text/plain; charset=utf-8";
constexpr std::string_view kPrometheusText = "text/plain; version=0.0.4; charset=utf-8";

// A pause after an accept error such as EMFILE: the listening socket stays readable, so retrying at
// once would spin.
constexpr std::chrono::milliseconds kAcceptBackoff{100};

// After an error response, how long at most we keep reading (and discarding) before closing:
// closing with unread input makes the kernel send a RST, which can destroy the response in flight.
constexpr std::chrono::milliseconds kLingerTimeout{2000};

std::string_view path_of(std::string_view target) { return target.substr(0, target.find('?')); }

// "?verbose", "?verbose=1", "?verbose=true" (any case); every other parameter is ignored.
bool verbose_requested(std::string_view target) {
  const auto question = target.find('?');
  if (question == std::string_view::npos) return false;
  std::string_view query = target.substr(question + 1);
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view param = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    const auto eq = param.find('=');
    if (param.substr(0, eq) != "verbose") continue;
    if (eq == std::string_view::npos) return true;
    const std::string_view value = param.substr(eq + 1);
    if (value.empty() || value == "1" || beast::iequals(value, "true")) return true;
  }
  return false;
}

// What route() decides; turned into bytes by append_answer() for the server and into an
// http_response by to_response() for handle_request().
struct answer {
  http::status code = http::status::ok;
  std::string body;
  std::string_view content_type = kTextPlain;
};

// The parts of a request the answer depends on.
struct request_line {
  http::verb method = http::verb::unknown;
  std::string_view target;
  unsigned version = 11;
  bool keep_alive = true;
};

void set_common_headers(http_response& response, std::string_view content_type) {
  response.set(http::field::content_type, content_type);
  response.set("X-Content-Type-Options", "nosniff");
  response.set(http::field::cache_control, "no-store");
}

// HEAD gets the status and Content-Length of the GET response and no body.
http_response to_response(const request_line& request, answer a) {
  http_response response{a.code, request.version};
  set_common_headers(response, a.content_type);
  response.keep_alive(request.keep_alive);
  if (request.method == http::verb::head) {
    response.content_length(a.body.size());
  } else {
    response.body() = std::move(a.body);
    response.prepare_payload();
  }
  if (a.code == http::status::method_not_allowed) response.set(http::field::allow, "GET, HEAD");
  return response;
}

// The bytes Beast's serializer writes for to_response(request, a), without building the message:
// the server's hot path. The unit tests compare the two byte for byte.
void append_answer(std::string& out, const request_line& request, const answer& a) {
  const auto code = static_cast<unsigned>(a.code);
  out += request.version == 10 ? "HTTP/1.0 " : "HTTP/1.1 ";
  const char digits[3] = {static_cast<char>('0' + code / 100 % 10),
                          static_cast<char>('0' + code / 10 % 10),
                          static_cast<char>('0' + code % 10)};
  out.append(digits, 3);
  out += ' ';
  const auto reason = http::obsolete_reason(a.code);
  out.append(reason.data(), reason.size());
  out += "\r\nContent-Type: ";
  out += a.content_type;
  out += "\r\nX-Content-Type-Options: nosniff\r\nCache-Control: no-store\r\n";
  // Beast's keep_alive(): HTTP/1.1 says only "close", HTTP/1.0 only "keep-alive".
  if (request.version < 11 && request.keep_alive) out += "Connection: keep-alive\r\n";
  if (request.version >= 11 && !request.keep_alive) out += "Connection: close\r\n";
  fmt::format_to(std::back_inserter(out), "Content-Length: {}\r\n", a.body.size());
  if (a.code == http::status::method_not_allowed) out += "Allow: GET, HEAD\r\n";
  out += "\r\n";
  if (request.method != http::verb::head) out += a.body;
}

std::string readyz_body(const shim_status& status, bool ready, bool verbose) {
  if (ready && !verbose) return "ok";
  std::string body;
  for (const auto& check : status.checks()) {
    if (check.ok) {
      body += fmt::format("[+]{} ok", check.name);
      // Passing checks can carry news too, such as the logind delay warning.
      if (verbose && !check.detail.empty()) body += fmt::format(": {}", check.detail);
    } else if (!verbose) {
      // Like kube: the plain form only says which check failed.
      body += fmt::format("[-]{} failed: reason withheld", check.name);
    } else if (check.detail.empty()) {
      body += fmt::format("[-]{} failed", check.name);
    } else {
      body += fmt::format("[-]{} failed: {}", check.name, check.detail);
    }
    body += '\n';
  }
  body += ready ? "readyz check passed\n" : "readyz check failed\n";
  return body;
}

// Counts the answer's status code in status.http_requests_by_code.
answer route(shim_status& status, const request_line& request) {
  const std::string_view target = request.target;
  const std::string_view path = path_of(target);
  const bool readyz = path == "/readyz";
  const bool metrics = path == "/metrics";
  answer a;
  if (!readyz && !metrics && path != "/livez" && path != "/healthz") {
    a = {http::status::not_found, "404 page not found\n"};
  } else if (request.method != http::verb::get && request.method != http::verb::head) {
    a = {http::status::method_not_allowed, "405 method not allowed\n"};
  } else if (metrics) {
    a = {http::status::ok, render_metrics(status), kPrometheusText};
  } else if (readyz) {
    // No caching: every probe reads the status as it is now.
    const bool ready = status.ready();
    a = {ready ? http::status::ok : http::status::service_unavailable,
         readyz_body(status, ready, verbose_requested(target))};
  } else {
    // Liveness only says the event loop turns, which it does while it answers this.
    a = {http::status::ok, "ok"};
  }
  ++status.http_requests_by_code[static_cast<unsigned>(a.code)];
  return a;
}

void append_metric(std::string& out, std::string_view name, std::string_view type,
                   std::string_view help, double value) {
  fmt::format_to(std::back_inserter(out), "# HELP {0} {1}\n# TYPE {0} {2}\n{0} {3}\n", name, help,
                 type, value);
}

double seconds(std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); }

// Asio opens and accepts sockets without SOCK_CLOEXEC; a child started in wrapper mode must not
// inherit them. There is only one thread, so nothing can fork between the accept and this.
// FD_CLOEXEC is the only descriptor flag, so there is nothing to read first.
void set_cloexec(int fd) { ::fcntl(fd, F_SETFD, FD_CLOEXEC); }

// The io_context's own executor rather than any_io_executor: no type-erased executor copied and
// destroyed on every operation.
using executor = asio::io_context::executor_type;
using socket_type = asio::basic_stream_socket<tcp, executor>;
using acceptor_type = asio::basic_socket_acceptor<tcp, executor>;
using timer_type =
    asio::basic_waitable_timer<std::chrono::steady_clock,
                               asio::wait_traits<std::chrono::steady_clock>, executor>;

// Whether a connection waits in the listen queue; never blocks.
bool connection_pending(acceptor_type& acceptor) {
  pollfd fd{acceptor.native_handle(), POLLIN, 0};
  return ::poll(&fd, 1, 0) == 1 && (fd.revents & POLLIN) != 0;
}

[[noreturn]] void throw_listen_error(const listen_address& address, const beast::error_code& ec) {
  const std::string what = "listen on " + format_listen_address(address);
  if (ec.category() == boost::system::system_category() ||
      ec.category() == boost::system::generic_category()) {
    // errno values: keep them comparable with std::errc.
    throw std::system_error(ec.value(), std::system_category(), what);
  }
  throw std::system_error(std::error_code(ec), what);
}

// Beast's request parser without the message: keeps only what route() reads, so a request
// allocates nothing once the session's buffers have grown. The limits, the framing and the errors
// are basic_parser's, as with http::request_parser.
class request_head_parser : public http::basic_parser<true> {
 public:
  explicit request_head_parser(std::string& target) : target_(target) {}

  request_line line() const {
    // Like http::message::keep_alive(): the first Connection field decides.
    const bool keep_alive = version_ < 11 ? connection_keep_alive_ : !connection_close_;
    return {method_, target_, version_, keep_alive};
  }

 private:
  void on_request_impl(http::verb method, beast::string_view /*method_str*/,
                       beast::string_view target, int version, beast::error_code& /*ec*/) override {
    method_ = method;
    target_.assign(target.data(), target.size());
    version_ = static_cast<unsigned>(version);
  }
  void on_response_impl(int, beast::string_view, int, beast::error_code&) override {}
  void on_field_impl(http::field name, beast::string_view /*name_string*/, beast::string_view value,
                     beast::error_code& /*ec*/) override {
    if (name != http::field::connection || seen_connection_) return;
    seen_connection_ = true;
    http::token_list tokens{value};  // exists() is not const
    connection_close_ = tokens.exists("close");
    connection_keep_alive_ = tokens.exists("keep-alive");
  }
  void on_header_impl(beast::error_code& /*ec*/) override {}
  void on_body_init_impl(const boost::optional<std::uint64_t>& /*content_length*/,
                         beast::error_code& /*ec*/) override {}
  // Bodies (within the body limit) are read and ignored: no endpoint takes one.
  std::size_t on_body_impl(beast::string_view body, beast::error_code& /*ec*/) override {
    return body.size();
  }
  void on_chunk_header_impl(std::uint64_t, beast::string_view, beast::error_code&) override {}
  std::size_t on_chunk_body_impl(std::uint64_t /*remain*/, beast::string_view body,
                                 beast::error_code& /*ec*/) override {
    return body.size();
  }
  void on_finish_impl(beast::error_code& /*ec*/) override {}

  std::string& target_;
  http::verb method_ = http::verb::unknown;
  unsigned version_ = 11;
  bool seen_connection_ = false;
  bool connection_close_ = false;
  bool connection_keep_alive_ = false;
};

class session;

struct listener {
  explicit listener(asio::io_context& io) : acceptor(io), backoff(io) {}
  acceptor_type acceptor;
  timer_type backoff;
};

// Everything the asynchronous handlers touch. Handlers hold it by shared_ptr, so it outlives the
// readiness_server when operations are still queued on the io_context at destruction; after stop()
// they only see `stopped` and return.
struct server_state : std::enable_shared_from_this<server_state> {
  server_state(asio::io_context& io, shim_status& status, http_limits limits)
      : io(io), status(status), limits(limits), timerfd_reset(io) {}

  void accept(std::shared_ptr<listener> l);
  void on_accept(const std::shared_ptr<listener>& l, beast::error_code ec, socket_type socket);
  void evict_oldest();
  void stop();
  void last_session_closed();

  asio::io_context& io;
  shim_status& status;
  const http_limits limits;
  bool stopped = false;
  std::vector<std::shared_ptr<listener>> listeners;
  std::vector<tcp::endpoint> endpoints;
  // Open connections, least recently active first: a connection moves to the back when it is
  // accepted and whenever it completes a request, so slow or idle clients drift to the front.
  std::list<session*> sessions;
  bool session_timer_used = false;  // since the last last_session_closed()
  timer_type timerfd_reset;
};

class session : public std::enable_shared_from_this<session> {
 public:
  session(std::shared_ptr<server_state> state, socket_type socket)
      : state_(std::move(state)), socket_(std::move(socket)), timer_(state_->io) {}

  ~session() {
    timer_.cancel();
    unregister();
  }

  session(const session&) = delete;
  session& operator=(const session&) = delete;

  void start() {
    pos_ = state_->sessions.insert(state_->sessions.end(), this);
    registered_ = true;
    // For read_some() and write_some(); Asio would make the socket non-blocking anyway.
    beast::error_code ignored;
    socket_.non_blocking(true, ignored);
    read_request(true);
  }

  // Eviction or stop: pending operations complete with operation_aborted and the session ends.
  void close() {
    timer_.cancel();
    unregister();
    beast::error_code ignored;
    socket_.close(ignored);
  }

 private:
  using clock = std::chrono::steady_clock;

  bool closed() const { return !registered_ || state_->stopped; }

  void unregister() {
    if (!registered_) return;
    registered_ = false;
    state_->sessions.erase(pos_);
    if (state_->sessions.empty()) state_->last_session_closed();
  }

  void touch() {
    if (registered_) state_->sessions.splice(state_->sessions.end(), state_->sessions, pos_);
  }

  // The connection closes when the deadline passes. Moving it later only updates deadline_: the
  // timer still fires at the earlier time and is then re-armed, so a request costs a clock read,
  // not a timerfd_settime. The timer is armed only once the session has to wait for its client
  // (ensure_timer): a request that is there at once and answered at once costs no timer at all.
  void set_deadline(clock::duration timeout) {
    deadline_ = clock::now() + timeout;
    if (timer_armed_ && deadline_ < timer_.expiry()) arm_timer();
  }

  // Before every asynchronous operation.
  void ensure_timer() {
    if (!timer_armed_) arm_timer();
  }

  void arm_timer() {
    timer_.expires_at(deadline_);  // aborts the pending wait, if any
    timer_armed_ = true;
    state_->session_timer_used = true;
    timer_.async_wait([weak = weak_from_this()](beast::error_code ec) {
      if (auto self = weak.lock(); self && !ec) self->on_timer();
    });
  }

  void on_timer() {
    timer_armed_ = false;
    if (closed()) return;
    if (clock::now() < deadline_) return arm_timer();
    // The pending read or write completes with operation_aborted and the session ends.
    beast::error_code ignored;
    socket_.close(ignored);
  }

  void read_request(bool read_now = false) {
    const auto& limits = state_->limits;
    parser_.emplace(target_);
    parser_->header_limit(static_cast<std::uint32_t>(
        std::min<std::size_t>(limits.max_header_bytes, std::numeric_limits<std::uint32_t>::max())));
    parser_->body_limit(limits.max_body_bytes);
    parser_->eager(true);  // as http::async_read does
    // One deadline for the whole request: a client that trickles bytes does not extend it.
    set_deadline(limits.read_timeout);
    parse(read_now);
  }

  // http::async_read's loop: parse what is buffered (a pipelined request may be there already),
  // read more while the parser needs it.
  void parse(bool read_now = false) {
    while (buffer_.size() != 0) {
      beast::error_code ec;
      buffer_.consume(parser_->put(buffer_.data(), ec));
      if (ec == http::error::need_more) break;
      if (ec || parser_->is_done()) return on_read(ec);
    }
    const std::size_t size = beast::read_size(buffer_, 65536);
    if (size == 0) return on_read(http::error::buffer_overflow);
    if (read_now) {
      // A new connection's request is usually there already: read without a trip through the loop.
      beast::error_code ec;
      const std::size_t bytes = socket_.read_some(buffer_.prepare(size), ec);
      if (ec != asio::error::would_block && ec != asio::error::try_again) {
        return on_read_some(ec, bytes);
      }
    }
    ensure_timer();
    socket_.async_read_some(buffer_.prepare(size),
                            [self = shared_from_this()](beast::error_code ec, std::size_t n) {
                              self->on_read_some(ec, n);
                            });
  }

  void on_read_some(beast::error_code ec, std::size_t bytes) {
    if (closed()) return;
    buffer_.commit(bytes);
    if (ec == asio::error::eof) {
      if (!parser_->got_some()) return on_read(http::error::end_of_stream);
      ec = {};
      parser_->put_eof(ec);
      return on_read(ec);
    }
    if (ec) return on_read(ec);
    parse();
  }

  void on_read(beast::error_code ec) {
    if (ec == http::error::end_of_stream) {
      // The client closed between requests.
      socket_.shutdown(tcp::socket::shutdown_send, ec);
      return;
    }
    if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
      return send_error(http::status::request_header_fields_too_large,
                        "431 request header fields too large\n");
    }
    if (ec == http::error::body_limit) {
      return send_error(http::status::payload_too_large, "413 request entity too large\n");
    }
    if (ec == http::error::partial_message) return;  // EOF mid-request: nobody left to answer
    if (ec && ec.category() == http::make_error_code(http::error::bad_method).category()) {
      return send_error(http::status::bad_request, "400 bad request\n");
    }
    // Deadline (the socket is closed already), reset, or another socket error.
    if (ec) return;

    touch();
    const request_line request = parser_->line();
    keep_alive_ = request.keep_alive;
    out_.clear();
    append_answer(out_, request, route(state_->status, request));
    write_response(false);
  }

  // The server's own answers to requests it could not parse; the connection closes after them.
  void send_error(http::status code, std::string body) {
    ++state_->status.http_requests_by_code[static_cast<unsigned>(code)];
    keep_alive_ = false;
    out_.clear();
    append_answer(out_, {http::verb::get, {}, 11, false}, {code, std::move(body)});
    write_response(true);
  }

  void write_response(bool linger) {
    // A client that does not read its responses gets the same deadline as one that does not send.
    set_deadline(state_->limits.read_timeout);
    std::size_t written = 0;
    if (buffer_.size() == 0) {
      // The answer nearly always fits in the socket's send buffer: written now, it needs no trip
      // through the event loop. Not with pipelined requests waiting: answering them here would
      // recurse.
      beast::error_code ec;
      written = socket_.write_some(asio::buffer(out_), ec);
      if (ec == asio::error::would_block || ec == asio::error::try_again) {
        written = 0;
      } else if (ec || written == out_.size()) {
        return on_write(linger, ec);
      }
    }
    ensure_timer();
    asio::async_write(socket_, asio::buffer(out_) + written,
                      [self = shared_from_this(), linger](beast::error_code ec, std::size_t) {
                        self->on_write(linger, ec);
                      });
  }

  void on_write(bool linger, beast::error_code ec) {
    if (closed() || ec) return;
    touch();
    if (linger) {
      socket_.shutdown(tcp::socket::shutdown_send, ec);
      buffer_.consume(buffer_.size());
      set_deadline(std::min<clock::duration>(state_->limits.read_timeout, kLingerTimeout));
      return drain();
    }
    if (!keep_alive_) {
      socket_.shutdown(tcp::socket::shutdown_send, ec);
      return;
    }
    read_request();
  }

  void drain() {
    ensure_timer();
    socket_.async_read_some(buffer_.prepare(16 * 1024),
                            [self = shared_from_this()](beast::error_code ec, std::size_t) {
                              // EOF: the client has read our answer and closed.
                              if (self->closed() || ec) return;
                              self->drain();
                            });
  }

  std::shared_ptr<server_state> state_;
  socket_type socket_;
  timer_type timer_;
  clock::time_point deadline_;
  bool timer_armed_ = false;
  beast::flat_buffer buffer_;
  std::string target_;
  std::optional<request_head_parser> parser_;
  bool keep_alive_ = true;
  std::string out_;  // the answer being written; its capacity is reused
  std::list<session*>::iterator pos_;
  bool registered_ = false;
};

}  // namespace

void server_state::accept(std::shared_ptr<listener> l) {
  auto& acceptor = l->acceptor;
  acceptor.async_accept(io, [self = shared_from_this(), l = std::move(l)](
                                beast::error_code ec, socket_type socket) mutable {
    self->on_accept(l, ec, std::move(socket));
  });
}

void server_state::on_accept(const std::shared_ptr<listener>& l, beast::error_code ec,
                             socket_type socket) {
  if (stopped || !l->acceptor.is_open()) return;
  if (ec == asio::error::connection_aborted) return accept(l);  // that one client gave up
  if (ec) {
    // EMFILE and the like. Out of descriptors, the fds a flood of idle clients pins are the ones to
    // give back, but only for a client that is actually waiting: accept() reports EMFILE even when
    // nobody is.
    if ((ec == asio::error::no_descriptors || ec.value() == ENFILE) &&
        connection_pending(l->acceptor)) {
      evict_oldest();
    }
    l->backoff.expires_after(kAcceptBackoff);
    l->backoff.async_wait([self = shared_from_this(), l](beast::error_code wait_ec) {
      if (!wait_ec && !self->stopped) self->accept(l);
    });
    return;
  }
  set_cloexec(socket.native_handle());
  // Make room for the newcomer: a fresh probe must always be answered.
  const std::size_t cap = std::max<std::size_t>(limits.max_connections, 1);
  while (sessions.size() >= cap) evict_oldest();
  std::make_shared<session>(shared_from_this(), std::move(socket))->start();
  accept(l);
}

void server_state::evict_oldest() {
  if (!sessions.empty()) sessions.front()->close();
}

// Asio cancels a timer without disarming its timerfd, so the read deadline of the connection that
// has just closed would still wake the idle process once. Scheduling a timer that is the earliest
// makes Asio re-arm the timerfd to its longest wait (5 minutes, which it keeps anyway).
void server_state::last_session_closed() {
  if (!session_timer_used) return;
  session_timer_used = false;
  timerfd_reset.expires_after(std::chrono::minutes(5));
  timerfd_reset.async_wait([](beast::error_code) {});
  timerfd_reset.cancel();
}

void server_state::stop() {
  stopped = true;
  beast::error_code ignored;
  for (auto& l : listeners) {
    l->acceptor.close(ignored);
    l->backoff.cancel();
  }
  listeners.clear();
  endpoints.clear();
  while (!sessions.empty()) sessions.front()->close();
}

struct readiness_server::impl {
  std::shared_ptr<server_state> state;
};

http_response handle_request(shim_status& status, const http_request& request) {
  const request_line line{request.method(), request.target(), request.version(),
                          request.keep_alive()};
  return to_response(line, route(status, line));
}

std::string render_metrics(const shim_status& status) {
  std::string out;
  append_metric(out, "shutdown_shim_ready", "gauge", "Whether /readyz answers 200 (1) or 503 (0).",
                status.ready() ? 1 : 0);
  append_metric(out, "shutdown_shim_draining", "gauge",
                "Whether a shutdown has started and the node is being drained.",
                status.draining ? 1 : 0);
  append_metric(out, "shutdown_shim_inhibitor_held", "gauge",
                "Whether the shim holds a systemd-logind delay inhibitor lock.",
                status.inhibitor == shim_status::inhibitor_state::held ? 1 : 0);
  const double start =
      status.draining_since
          ? std::chrono::duration<double>(status.draining_since->time_since_epoch()).count()
          : 0.0;
  append_metric(out, "shutdown_shim_shutdown_start_time_seconds", "gauge",
                "Unix time at which the current drain started, 0 if none.", start);
  append_metric(out, "shutdown_shim_drain_delay_seconds", "gauge",
                "How long the shim keeps the node unready before signalling the target.",
                seconds(status.drain_delay));
  append_metric(out, "shutdown_shim_hold_needed_seconds", "gauge",
                "How long the shim needs to hold a shutdown: drain delay plus exit timeout.",
                seconds(status.hold_needed));
  if (status.logind_delay_max_usec) {
    append_metric(out, "shutdown_shim_logind_inhibit_delay_max_seconds", "gauge",
                  "systemd-logind's InhibitDelayMaxUSec, in seconds.",
                  static_cast<double>(*status.logind_delay_max_usec) / 1e6);
  }
  append_metric(out, "shutdown_shim_logind_inhibit_delay_too_short", "gauge",
                "Whether logind would end a shutdown hold before the shim is done (1) or not (0).",
                status.logind_delay_too_short() ? 1 : 0);
  fmt::format_to(std::back_inserter(out),
                 "# HELP shutdown_shim_signals_forwarded_total Signals sent to the target.\n"
                 "# TYPE shutdown_shim_signals_forwarded_total counter\n"
                 "shutdown_shim_signals_forwarded_total {}\n",
                 status.signals_forwarded);
  out +=
      "# HELP shutdown_shim_http_requests_total HTTP responses sent, by status code.\n"
      "# TYPE shutdown_shim_http_requests_total counter\n";
  for (const auto& [code, count] : status.http_requests_by_code) {
    fmt::format_to(std::back_inserter(out), "shutdown_shim_http_requests_total{{code=\"{}\"}} {}\n",
                   code, count);
  }
#ifdef SHUTDOWN_SHIM_VERSION
  out +=
      "# HELP shutdown_shim_build_info The shim's version.\n"
      "# TYPE shutdown_shim_build_info gauge\n"
      "shutdown_shim_build_info{version=\"" SHUTDOWN_SHIM_VERSION "\"} 1\n";
#endif
  return out;
}

readiness_server::readiness_server(asio::io_context& io, shim_status& status, http_limits limits)
    : impl_(std::make_unique<impl>(impl{std::make_shared<server_state>(io, status, limits)})) {}

readiness_server::~readiness_server() { stop(); }

void readiness_server::listen(const std::vector<listen_address>& addresses) {
  auto& state = *impl_->state;
  // All or nothing: nothing is listening when one of the addresses fails.
  std::vector<std::shared_ptr<listener>> opened;
  for (const auto& address : addresses) {
    beast::error_code ec;
    const auto ip = asio::ip::make_address(address.host, ec);
    if (ec) throw_listen_error(address, ec);
    const tcp::endpoint endpoint{ip, address.port};
    auto l = std::make_shared<listener>(state.io);
    auto& acceptor = l->acceptor;
    acceptor.open(endpoint.protocol(), ec);
    if (ec) throw_listen_error(address, ec);
    set_cloexec(acceptor.native_handle());
    acceptor.set_option(asio::socket_base::reuse_address(true), ec);
    if (ec) throw_listen_error(address, ec);
    if (ip.is_v6()) {
      // So that 0.0.0.0:P and [::]:P can both be bound.
      acceptor.set_option(asio::ip::v6_only(true), ec);
      if (ec) throw_listen_error(address, ec);
    }
    acceptor.bind(endpoint, ec);
    if (ec) throw_listen_error(address, ec);
    acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) throw_listen_error(address, ec);
    opened.push_back(std::move(l));
  }
  state.stopped = false;
  for (auto& l : opened) {
    state.endpoints.push_back(l->acceptor.local_endpoint());
    state.listeners.push_back(l);
    state.accept(l);
  }
}

std::vector<tcp::endpoint> readiness_server::endpoints() const { return impl_->state->endpoints; }

void readiness_server::stop() { impl_->state->stop(); }

}  // namespace shim
