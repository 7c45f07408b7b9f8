// A stand-in for kube-apiserver, faithful in what the shim depends on. Modelled on k8s.io/apiserver
// 0.36: pkg/server/genericapiserver.go (preparedGenericAPIServer.RunWithContext: the lifecycle
// signals and the order of the listener's close, the in-flight wait and the exit),
// pkg/server/lifecycle_signals.go (the event names), pkg/server/config.go (the flag defaults,
// DefaultBuildHandlerChain's filter order), pkg/server/filters/with_retry_after.go and
// pkg/server/filters/waitgroup.go (the answers during the shutdown), pkg/server/healthz (the
// /readyz body) and pkg/storage/errors/storage.go (InterpretGetError: the answer without etcd);
// net/http's Server.Shutdown for what happens to connections. See tests/sandbox/README.md.
//  - HTTP/1.1 (GET and HEAD, keep-alive) on --listen; every answer carries "X-Backend: NAME".
//  - Start-up as the real server: the process exists (its --pidfile is written at once) before
//    its port opens (--startup-listen-delay, then the --port-file appears), and the port opens
//    before /readyz turns 200 (--startup-ready-delay later; until then 500 with
//    "[-]poststarthook/... failed" lines, and so are /livez and /healthz: the library adds each
//    post-start hook to all three). Both default to 0.
//  - /readyz answers 200 "ok" while every check passes, else 500 with every check listed and
//    "readyz check failed": after the first SIGTERM/SIGINT "[-]shutdown failed: reason withheld".
//  - --shutdown-delay-duration (alias --shutdown-delay; default 0, as upstream): every path is
//    served as usual for that long after the first signal (ShutdownInitiated), then the server
//    stops accepting (NotAcceptingNewRequest). With --shutdown-send-retry-after=false (the
//    default) the listener closes at once, idle connections are closed, the requests in flight
//    finish (with "Connection: close"), and a connection accepted less than 5 s earlier that has
//    not sent a request yet stays open (net/http's Shutdown). A request read on a connection once
//    the HTTP server's Shutdown has begun gets no answer: its connection is closed (net/http drops
//    it before any handler, so over HTTP/1.1 waitgroup.go's 503 "apiserver is shutting down" is
//    not reached; tests/realapi/differential_test.py saw the real server do so). With
//    --shutdown-send-retry-after it keeps listening, and every request but /readyz, /livez,
//    /healthz and /metrics, on a new or a kept-alive connection, gets with_retry_after.go's 429
//    with "Retry-After: 5" and "Connection: close", until the requests in flight have drained
//    (InFlightRequestsDrained); then it stops listening. It exits 0 (or --exit-code) once every
//    connection is gone, at most --request-timeout (default 60 s, kube-apiserver's; 2 s with
//    retry-after, the real shutdown timeout) after it stopped accepting.
//  - A second SIGTERM/SIGINT makes it exit 1 at once.
//  - --ignore-sigterm: signals are logged and otherwise ignored (an apiserver that never exits).
//  - --request-time: every answer but /readyz's and the shutdown's refusals takes that long (a real
//    GET takes milliseconds), so that requests are in flight when the process dies.
//  - PATCH /api/v1/nodes/NAME[/status], as a node agent writes its node: 200 with the Node (kind,
//    apiVersion, name, a resourceVersion that grows) when the Content-Type is one of kube's patch
//    types, else 415 with kube's Status body, as the real server answers. Nothing is stored.
//    GET /api/v1/namespaces/NAME: the Namespace. GET /hold?seconds=N answers "held Ns" N seconds
//    later (400 without a number), a request in flight as long as a slow LIST, as realapi's
//    /hold: during a shutdown's in-flight wait it keeps the wait going. Other paths: 200 "ok".
//  - --etcd-pidfile: while the process that file names does not run, /readyz fails
//    "[-]etcd failed" and every etcd-backed request (under /api/ and /apis/) gets 500 with kube's
//    ServerTimeout Status and "Retry-After: 2", as InterpretGetError answers an unreachable
//    storage (the real server may first wait up to its request timeout for etcd; this one answers
//    at once).
//  - --tls-cert-file and --tls-private-key-file: HTTPS instead of HTTP, TLS 1.2 or 1.3 (the
//    apiserver's default minimum is 1.2). --client-ca-file: like kube-apiserver, a client
//    certificate is requested and, when one is sent, verified against that CA (a bad one fails the
//    handshake); --require-client-cert also refuses a handshake without one (mTLS required).
//    Plain HTTP sent to the TLS port gets Go's "400 Bad Request" answer.
//  - --token-file: anonymous requests are refused, as kube-apiserver with --anonymous-auth=false:
//    every request needs "Authorization: Bearer <the file's content, trimmed>" or a verified client
//    certificate (x509 authenticates first there), else 401 with kube's JSON Status body. The file
//    is read at every request, so a test rotates the token by rewriting it. The shutdown's 429
//    comes before authentication, as in kube's handler chain.
//  - --readyz-control: a file read at every /readyz request (before the answer is chosen):
//    "200" or missing/empty answers as above, "500" answers 500 with an etcd check failed, "hang"
//    reads the request and never answers (the connection stays open until the client goes or the
//    server exits). A test switches it by rewriting the file (atomically), which is deterministic:
//    the next request sees it, no signal races.
// Every signal is appended to --signal-log as "SIGNAME monotonic_us"; milestones go to
// --lifecycle-log as "WORD monotonic_us [detail]", named after the real server's lifecycle
// signals: LISTENING (port), READY, UNREADY (ShutdownInitiated), NOT_ACCEPTING
// (NotAcceptingNewRequest), STOPPED_LISTENING (HTTPServerStoppedListening), IN_FLIGHT_DRAINED
// (InFlightRequestsDrained), EXIT (code).
// --close-connections: every answer says "Connection: close" and the connection is closed after it
// (a server or proxy that does not keep connections alive).
// --connection-log gets "ACCEPTED monotonic_us PEER_PORT" for each connection, "HANDSHAKE
// monotonic_us full|resumed" for each TLS handshake (OpenSSL's session tickets, on by default, as
// Go's are) and "HANDSHAKE_FAILED monotonic_us REASON" for each failed one (tests count them).
// --request-log gets "READ monotonic_us METHOD TARGET" when a request has been read and "ANSWERED
// monotonic_us STATUS TARGET" once its answer is written.
// Single-threaded Boost.Asio; signals arrive through asio::signal_set, so the logs are written from
// the event loop rather than from a signal handler.
// Where it cannot follow the real server (tests/realapi/differential_test.py runs both and lists
// these as its known gaps): HTTP/1.1 only, so no HTTP/2 and no GOAWAY (at the shutdown, with a
// 429, on an anonymous answer); with --token-file every anonymous request is a 401 (the real
// server answers kube's public paths); its bodies are its own; a request that outlasts
// --request-timeout is not answered 504; the moment in which the real server no longer accepts
// but its HTTP server's Shutdown has not begun (where waitgroup.go's 503 could come) is not
// modelled.

#include <fcntl.h>
#include <fmt/core.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <list>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;

namespace {

using namespace std::chrono_literals;

// with_retry_after.go: served as usual whatever the shutdown's phase.
constexpr std::array<std::string_view, 4> kExemptPrefixes = {"/readyz", "/livez", "/healthz",
                                                             "/metrics"};
// with_retry_after.go's answer once the server no longer accepts.
constexpr std::string_view kRetryAfterMessage =
    "The apiserver is shutting down, please try again later.";
// genericapiserver.go: the HTTP server's shutdown timeout with --shutdown-send-retry-after.
constexpr auto kRetryAfterShutdownTimeout = 2s;
// net/http's Server.Shutdown closes a connection that has not sent a request yet only once it is
// this old (closeIdleConns, "quiescent" StateNew).
constexpr auto kNewConnectionGrace = 5s;
// The checks a storage-backed kube-apiserver lists in /readyz, in its order; the post-start hooks
// named here are the ones still running while it starts.
constexpr std::array<std::string_view, 5> kPassingChecks = {
    "ping", "log", "informer-sync", "poststarthook/start-apiserver-admission-initializer",
    "poststarthook/generic-apiserver-start-informers"};
constexpr std::array<std::string_view, 4> kStartupHooks = {
    "poststarthook/start-system-namespaces-controller", "poststarthook/bootstrap-controller",
    "poststarthook/rbac/bootstrap-roles",
    "poststarthook/scheduling/bootstrap-system-priority-classes"};

std::uint64_t monotonic_us() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000u +
         static_cast<std::uint64_t>(ts.tv_nsec) / 1000u;
}

// Go's duration syntax, as the real apiserver's flags take it: "70s", "1m10s", "250ms", "0".
std::chrono::microseconds parse_duration(std::string_view text) {
  if (text == "0") return std::chrono::microseconds(0);
  if (text.empty()) throw std::invalid_argument("empty duration");
  double total_us = 0;
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t start = i;
    while (i < text.size() &&
           (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
      ++i;
    }
    if (start == i) throw std::invalid_argument(fmt::format("bad duration '{}'", text));
    const double number = std::stod(std::string(text.substr(start, i - start)));
    std::size_t unit_start = i;
    while (i < text.size() && std::isalpha(static_cast<unsigned char>(text[i]))) ++i;
    const std::string_view unit = text.substr(unit_start, i - unit_start);
    double scale;
    if (unit == "h") {
      scale = 3600e6;
    } else if (unit == "m") {
      scale = 60e6;
    } else if (unit == "s") {
      scale = 1e6;
    } else if (unit == "ms") {
      scale = 1e3;
    } else if (unit == "us" || unit == "µs") {
      scale = 1;
    } else if (unit == "ns") {
      scale = 1e-3;
    } else {
      throw std::invalid_argument(fmt::format("bad unit in duration '{}'", text));
    }
    total_us += number * scale;
  }
  return std::chrono::microseconds(static_cast<std::int64_t>(std::llround(total_us)));
}

// Go's strconv.ParseBool, as pflag reads "--flag=VALUE" for a bool flag.
bool parse_bool(std::string_view text) {
  if (text == "1" || text == "t" || text == "T" || text == "true" || text == "TRUE" ||
      text == "True") {
    return true;
  }
  if (text == "0" || text == "f" || text == "F" || text == "false" || text == "FALSE" ||
      text == "False") {
    return false;
  }
  throw std::invalid_argument(fmt::format("bad bool '{}'", text));
}

// Writes content to path through a temporary and rename(), so a reader never sees half a file.
void write_file_atomically(const std::string& path, const std::string& content) {
  if (path.empty()) return;
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "we");
  if (!f) throw std::runtime_error(fmt::format("cannot write {}: {}", tmp, std::strerror(errno)));
  std::fputs(content.c_str(), f);
  std::fclose(f);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw std::runtime_error(fmt::format("cannot rename to {}: {}", path, std::strerror(errno)));
  }
}

// An append-only line log; each line goes out in one write() so concurrent readers see whole lines.
class line_log {
 public:
  explicit line_log(const std::string& path) {
    if (!path.empty()) fd_ = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (!path.empty() && fd_ < 0) {
      throw std::runtime_error(fmt::format("cannot open {}: {}", path, std::strerror(errno)));
    }
  }
  ~line_log() {
    if (fd_ >= 0) close(fd_);
  }
  line_log(const line_log&) = delete;
  line_log& operator=(const line_log&) = delete;

  void write(std::string_view word, std::string_view detail = {}) {
    if (fd_ < 0) return;
    std::string line = detail.empty() ? fmt::format("{} {}\n", word, monotonic_us())
                                      : fmt::format("{} {} {}\n", word, monotonic_us(), detail);
    [[maybe_unused]] ssize_t n = ::write(fd_, line.data(), line.size());
  }

 private:
  int fd_ = -1;
};

struct options {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  std::string port_file;
  std::string pidfile;
  std::string signal_log;
  std::string lifecycle_log;
  std::string name = "fake-apiserver";
  std::chrono::microseconds shutdown_delay{0};
  bool send_retry_after = false;
  std::chrono::microseconds startup_listen_delay{0};
  std::chrono::microseconds startup_ready_delay{0};
  std::chrono::microseconds request_time{0};
  // kube-apiserver's --request-timeout: without retry-after, the bound of the HTTP server's
  // Shutdown on the requests in flight.
  std::chrono::microseconds request_timeout{60s};
  bool ignore_sigterm = false;
  int exit_code = 0;
  std::string connection_log;
  std::string request_log;
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string client_ca_file;
  bool require_client_cert = false;
  std::string token_file;
  std::string readyz_control;
  std::string etcd_pidfile;
  bool close_connections = false;
};

// A small file's whole content, or nullopt if it cannot be read (missing: the default applies).
std::optional<std::string> read_small_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return text;
}

std::string trimmed(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(" \t\r\n");
  return std::string(text.substr(first, last - first + 1));
}

// Whether the process named in pidfile runs (a zombie does not).
bool process_runs(const std::string& pidfile) {
  const auto text = read_small_file(pidfile);
  if (!text) return false;
  const std::string pid = trimmed(*text);
  if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) return false;
  const auto stat = read_small_file("/proc/" + pid + "/stat");
  if (!stat) return false;
  const auto close_paren = stat->rfind(')');
  return close_paren != std::string::npos && close_paren + 2 < stat->size() &&
         (*stat)[close_paren + 2] != 'Z';
}

bool exempt_from_shutdown(std::string_view path) {
  for (const auto prefix : kExemptPrefixes) {
    if (path.starts_with(prefix)) return true;
  }
  return false;
}

// What /readyz says: "ok" when every check passes, else every check and the verdict.
struct readyz_state {
  bool started = true;  // the post-start hooks have finished
  bool etcd = true;
  bool shutdown = false;
};

std::string check_line(std::string_view check, bool ok) {
  return ok ? fmt::format("[+]{} ok\n", check)
            : fmt::format("[-]{} failed: reason withheld\n", check);
}

std::string readyz_body(const readyz_state& s) {
  if (s.started && s.etcd && !s.shutdown) return "ok";
  std::string body = check_line(kPassingChecks[0], true) + check_line(kPassingChecks[1], true) +
                     check_line("etcd", s.etcd) + check_line("etcd-readiness", s.etcd);
  for (std::size_t i = 2; i < kPassingChecks.size(); ++i)
    body += check_line(kPassingChecks[i], true);
  for (const auto hook : kStartupHooks) body += check_line(hook, s.started);
  return body + check_line("shutdown", !s.shutdown) + "readyz check failed\n";
}

// What /livez and /healthz say: the library adds every post-start hook to their checks too
// (AddBootSequenceHealthChecks), so they fail until the hooks are done; the shutdown is not
// theirs. Their etcd check is not modelled.
std::string health_body(std::string_view endpoint, bool started) {
  if (started) return "ok";
  std::string body = check_line(kPassingChecks[0], true) + check_line(kPassingChecks[1], true);
  for (std::size_t i = 3; i < kPassingChecks.size(); ++i) {  // informer-sync is /readyz's only
    body += check_line(kPassingChecks[i], true);
  }
  for (const auto hook : kStartupHooks) body += check_line(hook, false);
  return body + fmt::format("{} check failed\n", endpoint);
}

// What kube-apiserver does with --tls-cert-file, --tls-private-key-file and --client-ca-file
// (Go's tls.VerifyClientCertIfGiven; RequireAndVerifyClientCert with --require-client-cert).
std::unique_ptr<ssl::context> make_tls_context(const options& o) {
  if (o.tls_cert_file.empty() != o.tls_key_file.empty()) {
    throw std::invalid_argument("--tls-cert-file and --tls-private-key-file go together");
  }
  if (o.tls_cert_file.empty()) {
    if (!o.client_ca_file.empty() || o.require_client_cert) {
      throw std::invalid_argument("--client-ca-file and --require-client-cert need TLS");
    }
    return nullptr;
  }
  auto context = std::make_unique<ssl::context>(ssl::context::tls_server);
  context->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                       ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
  context->use_certificate_chain_file(o.tls_cert_file);
  context->use_private_key_file(o.tls_key_file, ssl::context::pem);
  if (!o.client_ca_file.empty()) {
    context->load_verify_file(o.client_ca_file);
    // The CertificateRequest names the acceptable CAs, as Go's ClientCAs does.
    SSL_CTX_set_client_CA_list(context->native_handle(),
                               SSL_load_client_CA_file(o.client_ca_file.c_str()));
    context->set_verify_mode(
        ssl::verify_peer |
        (o.require_client_cert ? ssl::verify_fail_if_no_peer_cert : ssl::verify_mode{}));
  } else if (o.require_client_cert) {
    throw std::invalid_argument("--require-client-cert needs --client-ca-file");
  }
  return context;
}

class server;

class session : public std::enable_shared_from_this<session> {
 public:
  session(tcp::socket socket, server& srv, ssl::context* tls)
      : stream_(std::move(socket)), server_(srv) {
    if (tls) tls_.emplace(stream_, *tls);
  }
  void start() {
    if (tls_) return handshake();
    read();
  }
  // An idle connection, in net/http's words: it served a request and waits for the next.
  bool idle() const { return !busy_ && served_ > 0; }
  // The server stopped accepting: an idle connection goes now, a new one once it is
  // kNewConnectionGrace old if it has sent nothing by then, a busy one after its answer.
  void on_shutdown();
  void close();

 private:
  // Runs op on the TLS stream when there is one, else on the TCP stream.
  template <typename Op>
  void with_stream(Op op) {
    if (tls_) return op(*tls_);
    op(stream_);
  }
  void handshake();
  void read();
  void respond();
  bool authenticated();
  void answer(http::status status, std::string content_type, std::string body);
  void write();

  beast::tcp_stream stream_;
  std::optional<ssl::stream<beast::tcp_stream&>> tls_;
  asio::steady_timer service_timer_{stream_.get_executor()};
  asio::steady_timer new_connection_timer_{stream_.get_executor()};
  const std::chrono::steady_clock::time_point accepted_ = std::chrono::steady_clock::now();
  bool busy_ = false;     // a request has been read and its answer is not written yet
  bool counted_ = false;  // that request is in flight (HandlerChainWaitGroup)
  bool refusal_ = false;  // its answer is the shutdown's 429 (never delayed)
  bool closed_ = false;
  unsigned served_ = 0;
  beast::flat_buffer buffer_;
  http::request<http::string_body> request_;
  http::response<http::string_body> response_;
  server& server_;
};

class server {
 public:
  server(asio::io_context& io, const options& opts)
      : io_(io),
        opts_(opts),
        acceptor_(io),
        signals_(io, SIGTERM, SIGINT),
        startup_timer_(io),
        delay_timer_(io),
        bound_timer_(io),
        signal_log_(opts.signal_log),
        lifecycle_(opts.lifecycle_log),
        connections_(opts.connection_log),
        requests_(opts.request_log),
        tls_(make_tls_context(opts)) {}

  // The process exists before its port opens: the pidfile at once, the port file once it listens.
  void start() {
    write_file_atomically(opts_.pidfile, fmt::format("{}\n", getpid()));
    wait_signal();
    after(startup_timer_, opts_.startup_listen_delay, [this] { listen(); });
  }

  readyz_state readyz() const {
    return {.started = started_, .etcd = etcd_available(), .shutdown = shutting_down_};
  }
  bool etcd_available() const {
    return opts_.etcd_pidfile.empty() || process_runs(opts_.etcd_pidfile);
  }
  // NotAcceptingNewRequest: a request that is not exempt gets with_retry_after.go's 429 (without
  // retry-after no request is answered from then on: net/http's Shutdown begins at once).
  bool refuses_requests() const { return not_accepting_; }
  // net/http's Shutdown has begun: no more keep-alive.
  bool closing() const { return stopped_listening_; }
  std::chrono::microseconds request_time() const { return opts_.request_time; }
  const std::string& name() const { return opts_.name; }
  int exit_code() const { return exit_code_; }
  const options& opts() const { return opts_; }
  line_log& connections() { return connections_; }
  line_log& requests() { return requests_; }
  // The resourceVersion of a write: etcd's revision grows with every write.
  std::uint64_t next_revision() { return ++revision_; }

  // HandlerChainWaitGroup.Add and Done.
  void request_started() { ++in_flight_; }
  void request_finished() {
    --in_flight_;
    check_drained();
  }
  void session_closed() {
    --open_sessions_;
    maybe_exit();
  }

 private:
  template <typename Handler>
  void after(asio::steady_timer& timer, std::chrono::microseconds delay, Handler handler) {
    if (delay.count() == 0) return handler();
    timer.expires_after(delay);
    timer.async_wait([handler](beast::error_code ec) {
      if (!ec) handler();
    });
  }

  void listen() {
    const tcp::endpoint endpoint(asio::ip::make_address(opts_.host), opts_.port);
    acceptor_.open(endpoint.protocol());
    acceptor_.set_option(asio::socket_base::reuse_address(true));
    acceptor_.bind(endpoint);
    acceptor_.listen(asio::socket_base::max_listen_connections);
    listening_ = true;
    const auto port = acceptor_.local_endpoint().port();
    write_file_atomically(opts_.port_file, fmt::format("{}\n", port));
    lifecycle_.write("LISTENING", fmt::format("{}", port));
    accept();
    // The post-start hooks run once the port is open; /readyz passes when they are done.
    after(startup_timer_, opts_.startup_ready_delay, [this] {
      started_ = true;
      lifecycle_.write("READY");
    });
  }

  void accept() {
    acceptor_.async_accept([this](beast::error_code ec, tcp::socket socket) {
      if (ec) return;  // closed: the server stopped listening
      beast::error_code ignored;
      connections_.write("ACCEPTED", fmt::format("{}", socket.remote_endpoint(ignored).port()));
      auto s = std::make_shared<session>(std::move(socket), *this, tls_.get());
      sessions_.remove_if([](const std::weak_ptr<session>& w) { return w.expired(); });
      sessions_.push_back(s);
      ++open_sessions_;
      s->start();
      accept();
    });
  }

  void wait_signal() {
    signals_.async_wait([this](beast::error_code ec, int signo) {
      if (ec) return;
      const char* name = signo == SIGTERM ? "SIGTERM" : signo == SIGINT ? "SIGINT" : "SIGNAL";
      signal_log_.write(name);
      ++signals_seen_;
      if (opts_.ignore_sigterm) {
        wait_signal();
        return;
      }
      if (signals_seen_ == 1) {
        // ShutdownInitiated: unready at once, every request served for the shutdown delay.
        shutting_down_ = true;
        lifecycle_.write("UNREADY", name);
        after(delay_timer_, opts_.shutdown_delay, [this] { stop_accepting(); });
        wait_signal();
      } else {
        // The second signal: exit 1 at once.
        stop_listening();
        finish(1);
      }
    });
  }

  // NotAcceptingNewRequest (the delay is over; this server has no pre-shutdown hooks).
  void stop_accepting() {
    exit_code_ = opts_.exit_code;
    not_accepting_ = true;
    startup_timer_.cancel();  // a server stopped while starting never opens its port
    lifecycle_.write("NOT_ACCEPTING");
    if (opts_.send_retry_after) {
      check_drained();
      return;
    }
    // Without retry-after the HTTP server's Shutdown starts now, bounded by the request timeout.
    shut_down_http(opts_.request_timeout);
    check_drained();
  }

  // InFlightRequestsDrained; with retry-after, the HTTP server's Shutdown starts only now.
  void check_drained() {
    if (!not_accepting_ || drained_ || in_flight_ > 0) return;
    drained_ = true;
    lifecycle_.write("IN_FLIGHT_DRAINED");
    if (opts_.send_retry_after) {
      shut_down_http(kRetryAfterShutdownTimeout);
    } else {
      maybe_exit();
    }
  }

  // net/http's Server.Shutdown: the listener closes, idle connections go, the rest when done.
  void shut_down_http(std::chrono::microseconds timeout) {
    stop_listening();
    for (auto& w : sessions_) {
      if (auto s = w.lock()) s->on_shutdown();
    }
    bound_timer_.expires_after(timeout);
    bound_timer_.async_wait([this](beast::error_code e) {
      if (!e) finish(exit_code_);
    });
    maybe_exit();
  }

  void stop_listening() {
    if (stopped_listening_) return;
    stopped_listening_ = true;
    if (!listening_) return;
    beast::error_code ec;
    acceptor_.close(ec);
    lifecycle_.write("STOPPED_LISTENING");
  }

  void maybe_exit() {
    if (drained_ && stopped_listening_ && open_sessions_ == 0) finish(exit_code_);
  }

  void finish(int code) {
    if (finished_) return;
    finished_ = true;
    exit_code_ = code;
    for (auto& w : sessions_) {
      if (auto s = w.lock()) s->close();
    }
    beast::error_code ec;
    signals_.cancel(ec);
    startup_timer_.cancel();
    delay_timer_.cancel();
    bound_timer_.cancel();
    lifecycle_.write("EXIT", fmt::format("{}", code));
    io_.stop();
  }

  asio::io_context& io_;
  const options& opts_;
  tcp::acceptor acceptor_;
  asio::signal_set signals_;
  asio::steady_timer startup_timer_;
  asio::steady_timer delay_timer_;
  asio::steady_timer bound_timer_;
  line_log signal_log_;
  line_log lifecycle_;
  line_log connections_;
  line_log requests_;
  std::unique_ptr<ssl::context> tls_;
  std::list<std::weak_ptr<session>> sessions_;
  unsigned open_sessions_ = 0;
  unsigned in_flight_ = 0;
  bool listening_ = false;
  bool started_ = false;
  bool shutting_down_ = false;
  bool not_accepting_ = false;
  bool drained_ = false;
  bool stopped_listening_ = false;
  bool finished_ = false;
  int signals_seen_ = 0;
  int exit_code_ = 0;
  std::uint64_t revision_ = 1;
};

// kube-apiserver's patch types (k8s.io/apimachinery/pkg/types.PatchType).
bool is_patch_type(std::string_view content_type) {
  const auto type = content_type.substr(0, content_type.find(';'));
  return type == "application/json-patch+json" || type == "application/merge-patch+json" ||
         type == "application/strategic-merge-patch+json" || type == "application/apply-patch+yaml";
}

// kube's Status body for a failed request; details is the JSON of its "details", if any.
std::string status_body(std::string_view message, std::string_view reason, unsigned code,
                        std::string_view details = {}) {
  return fmt::format(R"({{"kind":"Status","apiVersion":"v1","metadata":{{}},"status":"Failure",)"
                     R"("message":"{}","reason":"{}",{}"code":{}}})"
                     "\n",
                     message, reason,
                     details.empty() ? std::string() : fmt::format(R"("details":{},)", details),
                     code);
}

// The resource a request under /api/ or /apis/ names, as GroupResource.String() writes it
// ("namespaces", "deployments.apps"); empty for discovery paths.
std::string qualified_resource(std::string_view path) {
  std::vector<std::string_view> parts;
  for (std::size_t start = 1; start <= path.size();) {
    const auto end = std::min(path.find('/', start), path.size());
    if (end > start) parts.push_back(path.substr(start, end - start));
    start = end + 1;
  }
  std::size_t first = 0;
  std::string group;
  if (parts.size() >= 2 && parts[0] == "api") {
    first = 2;
  } else if (parts.size() >= 3 && parts[0] == "apis") {
    group = std::string(parts[1]);
    first = 3;
  }
  if (first == 0 || parts.size() <= first) return {};
  // namespaces/NS/RESOURCE/... names RESOURCE; namespaces/NS alone names namespaces.
  std::size_t index = first;
  if (parts[first] == "namespaces" && parts.size() > first + 2) index = first + 2;
  const std::string resource(parts[index]);
  return group.empty() ? resource : resource + "." + group;
}

void session::on_shutdown() {
  if (idle()) return close();
  if (busy_ || served_ > 0) return;  // a busy one closes after its answer
  new_connection_timer_.expires_at(accepted_ + kNewConnectionGrace);
  new_connection_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (!ec && !self->busy_ && self->served_ == 0) self->close();
  });
}

void session::close() {
  service_timer_.cancel();
  new_connection_timer_.cancel();
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_.socket().close(ec);
  if (closed_) return;
  closed_ = true;
  if (counted_) {
    counted_ = false;
    server_.request_finished();
  }
  server_.session_closed();
}

void session::handshake() {
  // A client that never finishes its handshake does not hold a session forever.
  stream_.expires_after(std::chrono::seconds(10));
  tls_->async_handshake(
      ssl::stream_base::server, [self = shared_from_this()](beast::error_code ec) {
        self->stream_.expires_never();
        if (!ec) {
          self->server_.connections().write(
              "HANDSHAKE", SSL_session_reused(self->tls_->native_handle()) ? "resumed" : "full");
          return self->read();
        }
        self->server_.connections().write("HANDSHAKE_FAILED", ec.message());
        if (ERR_GET_REASON(static_cast<unsigned long>(ec.value())) != SSL_R_HTTP_REQUEST) {
          return self->close();
        }
        // Plain HTTP on the TLS port: Go's net/http answers this, then closes.
        static constexpr std::string_view kAnswer =
            "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";
        asio::async_write(self->stream_.socket(), asio::buffer(kAnswer),
                          [self](beast::error_code, std::size_t) { self->close(); });
      });
}

void session::read() {
  request_ = {};
  with_stream([this](auto& stream) {
    http::async_read(
        stream, buffer_, request_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
          if (ec) {
            self->close();
            return;
          }
          self->server_.requests().write(
              "READ", fmt::format("{} {}", std::string_view(self->request_.method_string()),
                                  std::string_view(self->request_.target())));
          // net/http serves no request it reads once its Shutdown has begun: it closes the
          // connection without an answer, before any handler (and waitgroup.go's 503).
          if (self->server_.closing()) return self->close();
          self->busy_ = true;
          self->respond();
        });
  });
}

// kube-apiserver's authenticators in their order: a verified client certificate, then a bearer
// token; with anonymous auth off, neither is a 401.
bool session::authenticated() {
  const auto& opts = server_.opts();
  if (opts.token_file.empty()) return true;
  if (tls_) {
    SSL* handle = tls_->native_handle();
    if (SSL_get0_peer_certificate(handle) && SSL_get_verify_result(handle) == X509_V_OK) {
      return true;
    }
  }
  const auto token = read_small_file(opts.token_file);
  if (!token || trimmed(*token).empty()) return false;
  return request_[http::field::authorization] == "Bearer " + trimmed(*token);
}

// The handler chain from the outside in, as DefaultBuildHandlerChain builds it: the shutdown's
// filters (with_retry_after.go, then waitgroup.go's count of the requests in flight),
// authentication, then the handlers.
void session::respond() {
  std::string_view target = request_.target();
  const std::string_view path = target.substr(0, target.find('?'));
  const bool head = request_.method() == http::verb::head;
  response_ = {};
  refusal_ = false;
  if (!exempt_from_shutdown(path)) {
    if (server_.refuses_requests()) {
      refusal_ = true;
      response_.set(http::field::retry_after, "5");
      response_.keep_alive(false);  // "Connection: close", tearing the connection down
      return answer(http::status::too_many_requests, "text/plain; charset=utf-8",
                    std::string(kRetryAfterMessage) + "\n");
    }
    counted_ = true;
    server_.request_started();
  }
  std::string control;
  if (path == "/readyz" && !server_.opts().readyz_control.empty()) {
    control = trimmed(read_small_file(server_.opts().readyz_control).value_or(""));
  }
  static constexpr std::string_view kNodes = "/api/v1/nodes/";
  static constexpr std::string_view kNamespaces = "/api/v1/namespaces/";
  const bool etcd_backed = path.starts_with("/api/") || path.starts_with("/apis/");
  if (!authenticated()) {
    return answer(http::status::unauthorized, "application/json",
                  status_body("Unauthorized", "Unauthorized", 401));
  }
  if (etcd_backed && !server_.etcd_available() && !qualified_resource(path).empty()) {
    // InterpretGetError (and InterpretUpdateError) for an unreachable storage.
    const auto resource = qualified_resource(path);
    const std::string operation = request_.method() == http::verb::patch ? "update" : "get";
    response_.set(http::field::retry_after, "2");
    return answer(
        http::status::internal_server_error, "application/json",
        status_body(fmt::format("The {} operation against {} could not be completed at this "
                                "time, please try again.",
                                operation, resource),
                    "ServerTimeout", 500,
                    fmt::format(R"({{"name":"{}","kind":"{}","retryAfterSeconds":2}})", operation,
                                resource)));
  }
  if (request_.method() == http::verb::patch && path.starts_with(kNodes)) {
    const auto node = path.substr(kNodes.size(), path.find('/', kNodes.size()) - kNodes.size());
    if (!is_patch_type(request_[http::field::content_type])) {
      return answer(http::status::unsupported_media_type, "application/json",
                    status_body("the body of the request was in an unknown format - accepted "
                                "media types include: application/json-patch+json, "
                                "application/merge-patch+json, application/apply-patch+yaml",
                                "UnsupportedMediaType", 415));
    }
    return answer(
        http::status::ok, "application/json",
        fmt::format(
            R"({{"kind":"Node","apiVersion":"v1","metadata":{{"name":"{}","resourceVersion":"{}"}}}})"
            "\n",
            node, server_.next_revision()));
  }
  if (request_.method() != http::verb::get && !head) {
    return answer(http::status::method_not_allowed, "text/plain; charset=utf-8",
                  "method not allowed");
  }
  if (path.starts_with(kNamespaces) &&
      path.find('/', kNamespaces.size()) == std::string_view::npos &&
      path.size() > kNamespaces.size()) {
    const auto name = path.substr(kNamespaces.size());
    return answer(http::status::ok, "application/json",
                  fmt::format(R"({{"kind":"Namespace","apiVersion":"v1","metadata":{{"name":"{0}",)"
                              R"("resourceVersion":"1","labels":{{"kubernetes.io/metadata.name":)"
                              R"("{0}"}}}},"spec":{{"finalizers":["kubernetes"]}},)"
                              R"("status":{{"phase":"Active"}}}})"
                              "\n",
                              name));
  }
  if (path == "/hold") {
    // A request in flight for as long as a test needs, as a slow LIST is (realapi's endpoint).
    const auto query = target.substr(std::min(target.size(), path.size() + 1));
    const auto at = query.find("seconds=");
    double seconds = -1;
    if (at == 0 || (at != std::string_view::npos && query[at - 1] == '&')) {
      const auto value = query.substr(at + 8, query.find('&', at) - at - 8);
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), seconds);
      if (ec != std::errc{} || end != value.data() + value.size()) seconds = -1;
    }
    if (seconds < 0) {
      return answer(http::status::bad_request, "text/plain; charset=utf-8",
                    "hold needs ?seconds=N\n");
    }
    service_timer_.expires_after(std::chrono::microseconds(std::llround(seconds * 1e6)));
    service_timer_.async_wait([self = shared_from_this(), seconds](beast::error_code ec) {
      if (ec) return self->close();
      self->answer(http::status::ok, "text/plain; charset=utf-8",
                   fmt::format("held {}s\n", seconds));
    });
    return;
  }
  if (path == "/readyz") {
    if (control == "hang") {
      // Never answered: the session lives on this wait until close() cancels it.
      service_timer_.expires_at(asio::steady_timer::time_point::max());
      service_timer_.async_wait([self = shared_from_this()](beast::error_code) { self->close(); });
      return;
    }
    auto state = server_.readyz();
    if (control == "500") state.etcd = false;
    const std::string body = readyz_body(state);
    return answer(body == "ok" ? http::status::ok : http::status::internal_server_error,
                  "text/plain; charset=utf-8", body);
  }
  if (path == "/livez" || path == "/healthz") {
    const std::string body = health_body(path.substr(1), server_.readyz().started);
    return answer(body == "ok" ? http::status::ok : http::status::internal_server_error,
                  "text/plain; charset=utf-8", body);
  }
  answer(http::status::ok, "text/plain; charset=utf-8", "ok");
}

// Fills in the answer (headers set before it stay) and writes it, after --request-time unless it
// is /readyz's or a refusal of the shutdown's.
void session::answer(http::status status, std::string content_type, std::string body) {
  const bool head = request_.method() == http::verb::head;
  response_.version(request_.version());
  response_.result(status);
  response_.set(http::field::server, "fake-apiserver");
  response_.set("X-Backend", server_.name());
  response_.set(http::field::cache_control, "no-cache, private");
  response_.set(http::field::content_type, content_type);
  response_.set("X-Content-Type-Options", "nosniff");
  if (head) {
    response_.content_length(body.size());  // what GET would send, without the body
  } else {
    response_.body() = std::move(body);
    response_.prepare_payload();
  }
  std::string_view target = request_.target();
  if (refusal_ || target.starts_with("/readyz") || server_.request_time().count() == 0) {
    return write();
  }
  service_timer_.expires_after(server_.request_time());
  service_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (ec) return self->close();
    self->write();
  });
}

void session::write() {
  response_.keep_alive(response_.keep_alive() && request_.keep_alive() && !server_.closing() &&
                       !server_.opts().close_connections);
  with_stream([this](auto& stream) {
    http::async_write(stream, response_,
                      [self = shared_from_this()](beast::error_code ec, std::size_t) {
                        self->busy_ = false;
                        ++self->served_;
                        self->server_.requests().write(
                            "ANSWERED", fmt::format("{} {}", self->response_.result_int(),
                                                    std::string_view(self->request_.target())));
                        if (self->counted_) {
                          self->counted_ = false;
                          self->server_.request_finished();
                        }
                        if (ec || !self->response_.keep_alive() || self->server_.closing()) {
                          self->close();
                          return;
                        }
                        self->read();
                      });
  });
}

[[noreturn]] void usage(const std::string& error) {
  fmt::print(stderr,
             "fake_apiserver: {}\n"
             "usage: fake_apiserver --listen=HOST:PORT [--port-file=PATH] [--pidfile=PATH]\n"
             "         [--signal-log=PATH] [--lifecycle-log=PATH]\n"
             "         [--shutdown-delay-duration=DURATION (alias --shutdown-delay)]\n"
             "         [--shutdown-send-retry-after[=BOOL]] [--startup-listen-delay=DURATION]\n"
             "         [--startup-ready-delay=DURATION] [--etcd-pidfile=PATH]\n"
             "         [--name=NAME] [--ignore-sigterm] [--exit-code=N] [--request-time=D]\n"
             "         [--request-timeout=DURATION]\n"
             "         [--connection-log=PATH] [--request-log=PATH] [--readyz-control=PATH]\n"
             "         [--token-file=PATH] [--close-connections]\n"
             "         [--tls-cert-file=PATH --tls-private-key-file=PATH [--client-ca-file=PATH\n"
             "          [--require-client-cert]]]\n",
             error);
  std::exit(2);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg(argv[i]);
    auto value = [&](std::string_view flag) -> std::optional<std::string> {
      if (arg.starts_with(flag) && arg.size() > flag.size() && arg[flag.size()] == '=') {
        return std::string(arg.substr(flag.size() + 1));
      }
      return std::nullopt;
    };
    // pflag also takes "--flag VALUE" for a flag that is not a bool.
    auto pflag_value = [&](std::string_view flag) -> std::optional<std::string> {
      if (auto v = value(flag)) return v;
      if (arg != flag) return std::nullopt;
      if (i + 1 >= argc) usage(fmt::format("{} needs a value", flag));
      return std::string(argv[++i]);
    };
    try {
      if (auto v = value("--listen")) {
        const auto colon = v->rfind(':');
        if (colon == std::string::npos) usage("--listen needs HOST:PORT");
        o.host = v->substr(0, colon);
        if (o.host.size() > 1 && o.host.front() == '[')
          o.host = o.host.substr(1, o.host.size() - 2);
        o.port = static_cast<std::uint16_t>(std::stoul(v->substr(colon + 1)));
      } else if (auto v = value("--port-file")) {
        o.port_file = *v;
      } else if (auto v = value("--pidfile")) {
        o.pidfile = *v;
      } else if (auto v = value("--signal-log")) {
        o.signal_log = *v;
      } else if (auto v = value("--lifecycle-log")) {
        o.lifecycle_log = *v;
      } else if (auto v = pflag_value("--shutdown-delay-duration")) {
        o.shutdown_delay = parse_duration(*v);
      } else if (auto v = value("--shutdown-delay")) {
        o.shutdown_delay = parse_duration(*v);
      } else if (arg == "--shutdown-send-retry-after") {
        o.send_retry_after = true;
      } else if (auto v = value("--shutdown-send-retry-after")) {
        o.send_retry_after = parse_bool(*v);
      } else if (auto v = value("--startup-listen-delay")) {
        o.startup_listen_delay = parse_duration(*v);
      } else if (auto v = value("--startup-ready-delay")) {
        o.startup_ready_delay = parse_duration(*v);
      } else if (auto v = value("--etcd-pidfile")) {
        o.etcd_pidfile = *v;
      } else if (auto v = value("--request-time")) {
        o.request_time = parse_duration(*v);
      } else if (auto v = pflag_value("--request-timeout")) {
        o.request_timeout = parse_duration(*v);
      } else if (auto v = value("--name")) {
        o.name = *v;
      } else if (auto v = value("--exit-code")) {
        o.exit_code = std::stoi(*v);
      } else if (auto v = value("--connection-log")) {
        o.connection_log = *v;
      } else if (auto v = value("--request-log")) {
        o.request_log = *v;
      } else if (auto v = value("--tls-cert-file")) {
        o.tls_cert_file = *v;
      } else if (auto v = value("--tls-private-key-file")) {
        o.tls_key_file = *v;
      } else if (auto v = value("--client-ca-file")) {
        o.client_ca_file = *v;
      } else if (auto v = value("--token-file")) {
        o.token_file = *v;
      } else if (auto v = value("--readyz-control")) {
        o.readyz_control = *v;
      } else if (arg == "--close-connections") {
        o.close_connections = true;
      } else if (arg == "--require-client-cert") {
        o.require_client_cert = true;
      } else if (arg == "--ignore-sigterm") {
        o.ignore_sigterm = true;
      } else {
        usage(fmt::format("unknown argument '{}'", arg));
      }
    } catch (const std::exception& e) {
      usage(fmt::format("bad value in '{}': {}", arg, e.what()));
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const options opts = parse(argc, argv);
  try {
    asio::io_context io(1);
    server srv(io, opts);
    srv.start();
    io.run();
    return srv.exit_code();
  } catch (const std::exception& e) {
    fmt::print(stderr, "fake_apiserver: {}\n", e.what());
    return 2;
  }
}
