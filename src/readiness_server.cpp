#include "readiness_server.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>

#include <algorithm>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/steady_timer.hpp>
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

void set_common_headers(http_response& response, std::string_view content_type) {
  response.set(http::field::content_type, content_type);
  response.set("X-Content-Type-Options", "nosniff");
  response.set(http::field::cache_control, "no-store");
}

// HEAD gets the status and Content-Length of the GET response and no body.
http_response make_response(const http_request& request, http::status code, std::string body,
                            std::string_view content_type = kTextPlain) {
  http_response response{code, request.version()};
  set_common_headers(response, content_type);
  response.keep_alive(request.keep_alive());
  if (request.method() == http::verb::head) {
    response.content_length(body.size());
  } else {
    response.body() = std::move(body);
    response.prepare_payload();
  }
  return response;
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

http_response route(shim_status& status, const http_request& request) {
  const std::string_view target = request.target();
  const std::string_view path = path_of(target);
  const bool readyz = path == "/readyz";
  const bool metrics = path == "/metrics";
  if (!readyz && !metrics && path != "/livez" && path != "/healthz") {
    return make_response(request, http::status::not_found, "404 page not found\n");
  }
  if (request.method() != http::verb::get && request.method() != http::verb::head) {
    auto response =
        make_response(request, http::status::method_not_allowed, "405 method not allowed\n");
    response.set(http::field::allow, "GET, HEAD");
    return response;
  }
  if (metrics) {
    return make_response(request, http::status::ok, render_metrics(status), kPrometheusText);
  }
  if (readyz) {
    // No caching: every probe reads the status as it is now.
    const bool ready = status.ready();
    return make_response(request, ready ? http::status::ok : http::status::service_unavailable,
                         readyz_body(status, ready, verbose_requested(target)));
  }
  // Liveness only says the event loop turns, which it does while it answers this.
  return make_response(request, http::status::ok, "ok");
}

// The server's own answers to requests it could not parse; the connection closes after them.
http_response make_error_response(shim_status& status, http::status code, std::string body) {
  http_response response{code, 11};
  set_common_headers(response, kTextPlain);
  response.keep_alive(false);
  response.body() = std::move(body);
  response.prepare_payload();
  ++status.http_requests_by_code[response.result_int()];
  return response;
}

void append_metric(std::string& out, std::string_view name, std::string_view type,
                   std::string_view help, double value) {
  fmt::format_to(std::back_inserter(out), "# HELP {0} {1}\n# TYPE {0} {2}\n{0} {3}\n", name, help,
                 type, value);
}

double seconds(std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); }

// Asio opens and accepts sockets without SOCK_CLOEXEC; a child started in wrapper mode must not
// inherit them. There is only one thread, so nothing can fork between the accept and this.
void set_cloexec(int fd) {
  const int flags = ::fcntl(fd, F_GETFD);
  if (flags >= 0) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
}

// Whether a connection waits in the listen queue; never blocks.
bool connection_pending(tcp::acceptor& acceptor) {
  pollfd fd{acceptor.native_handle(), POLLIN, 0};
  return ::poll(&fd, 1, 0) == 1 && (fd.revents & POLLIN) != 0;
}

std::string describe(const listen_address& address) {
  if (address.host.find(':') != std::string::npos) {
    return fmt::format("[{}]:{}", address.host, address.port);
  }
  return fmt::format("{}:{}", address.host, address.port);
}

[[noreturn]] void throw_listen_error(const listen_address& address, const beast::error_code& ec) {
  const std::string what = "listen on " + describe(address);
  if (ec.category() == boost::system::system_category() ||
      ec.category() == boost::system::generic_category()) {
    // errno values: keep them comparable with std::errc.
    throw std::system_error(ec.value(), std::system_category(), what);
  }
  throw std::system_error(std::error_code(ec), what);
}

class session;

struct listener {
  explicit listener(asio::io_context& io) : acceptor(io), backoff(io) {}
  tcp::acceptor acceptor;
  asio::steady_timer backoff;
};

// Everything the asynchronous handlers touch. Handlers hold it by shared_ptr, so it outlives the
// readiness_server when operations are still queued on the io_context at destruction; after stop()
// they only see `stopped` and return.
struct server_state : std::enable_shared_from_this<server_state> {
  server_state(asio::io_context& io, shim_status& status, http_limits limits)
      : io(io), status(status), limits(limits) {}

  void accept(std::shared_ptr<listener> l);
  void on_accept(const std::shared_ptr<listener>& l, beast::error_code ec, tcp::socket socket);
  void evict_oldest();
  void stop();

  asio::io_context& io;
  shim_status& status;
  const http_limits limits;
  bool stopped = false;
  std::vector<std::shared_ptr<listener>> listeners;
  std::vector<tcp::endpoint> endpoints;
  // Open connections, least recently active first: a connection moves to the back when it is
  // accepted and whenever it completes a request, so slow or idle clients drift to the front.
  std::list<session*> sessions;
};

class session : public std::enable_shared_from_this<session> {
 public:
  session(std::shared_ptr<server_state> state, tcp::socket socket)
      : state_(std::move(state)), stream_(std::move(socket)) {}

  ~session() { unregister(); }

  session(const session&) = delete;
  session& operator=(const session&) = delete;

  void start() {
    pos_ = state_->sessions.insert(state_->sessions.end(), this);
    registered_ = true;
    read_request();
  }

  // Eviction or stop: pending operations complete with operation_aborted and the session ends.
  void close() {
    unregister();
    stream_.close();
  }

 private:
  bool closed() const { return !registered_ || state_->stopped; }

  void unregister() {
    if (!registered_) return;
    registered_ = false;
    state_->sessions.erase(pos_);
  }

  void touch() {
    if (registered_) state_->sessions.splice(state_->sessions.end(), state_->sessions, pos_);
  }

  void read_request() {
    const auto& limits = state_->limits;
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(
        std::min<std::size_t>(limits.max_header_bytes, std::numeric_limits<std::uint32_t>::max())));
    parser_->body_limit(limits.max_body_bytes);
    // One deadline for the whole request: a client that trickles bytes does not extend it.
    stream_.expires_after(limits.read_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     beast::bind_front_handler(&session::on_read, shared_from_this()));
  }

  void on_read(beast::error_code ec, std::size_t /*bytes*/) {
    if (closed()) return;
    if (ec == http::error::end_of_stream) {
      // The client closed between requests.
      stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
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
    // Timeout (the stream has closed the socket already), reset, or another socket error.
    if (ec) return;

    touch();
    response_ = handle_request(state_->status, parser_->get());
    write_response(false);
  }

  void send_error(http::status code, std::string body) {
    response_ = make_error_response(state_->status, code, std::move(body));
    write_response(true);
  }

  void write_response(bool linger) {
    // A client that does not read its responses gets the same deadline as one that does not send.
    stream_.expires_after(state_->limits.read_timeout);
    http::async_write(stream_, response_,
                      beast::bind_front_handler(&session::on_write, shared_from_this(), linger));
  }

  void on_write(bool linger, beast::error_code ec, std::size_t /*bytes*/) {
    if (closed() || ec) return;
    touch();
    if (linger) {
      stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
      buffer_.consume(buffer_.size());
      stream_.expires_after(
          std::min<std::chrono::milliseconds>(state_->limits.read_timeout, kLingerTimeout));
      return drain();
    }
    if (response_.need_eof()) {
      stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
      return;
    }
    response_ = {};
    read_request();
  }

  void drain() {
    stream_.async_read_some(buffer_.prepare(16 * 1024),
                            beast::bind_front_handler(&session::on_drain, shared_from_this()));
  }

  void on_drain(beast::error_code ec, std::size_t /*bytes*/) {
    if (closed() || ec) return;  // EOF: the client has read our answer and closed
    drain();
  }

  std::shared_ptr<server_state> state_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http_response response_;
  std::list<session*>::iterator pos_;
  bool registered_ = false;
};

}  // namespace

void server_state::accept(std::shared_ptr<listener> l) {
  auto& acceptor = l->acceptor;
  acceptor.async_accept(io, [self = shared_from_this(), l = std::move(l)](
                                beast::error_code ec, tcp::socket socket) mutable {
    self->on_accept(l, ec, std::move(socket));
  });
}

void server_state::on_accept(const std::shared_ptr<listener>& l, beast::error_code ec,
                             tcp::socket socket) {
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
  http_response response = route(status, request);
  ++status.http_requests_by_code[response.result_int()];
  return response;
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
