// A stand-in for kube-apiserver, faithful in what the shim depends on:
//  - HTTP/1.1 (GET and HEAD, keep-alive) on --listen; every answer carries "X-Backend: NAME".
//  - PATCH /api/v1/nodes/NAME[/status], as a node agent writes its node: 200 with the Node (kind,
//    apiVersion, name, a resourceVersion that grows) when the Content-Type is one of kube's patch
//    types, else 415 with kube's Status body, as the real server answers. Nothing is stored.
//  - /readyz answers 200 "ok" until the first SIGTERM/SIGINT, then 500 with
//    "[-]shutdown failed: reason withheld"; every other path keeps answering 200 for
//    --shutdown-delay, after which it stops listening, closes its connections and exits 0.
//  - A second SIGTERM/SIGINT makes it exit 1 at once.
//  - --ignore-sigterm: signals are logged and otherwise ignored (an apiserver that never exits).
//  - --request-time: every answer but /readyz's takes that long (a real GET takes milliseconds), so
//    that requests are in flight when the process dies. When the shutdown delay is over it stops
//    listening, closes idle connections and finishes the requests it is serving (with
//    "Connection: close") before it exits, as the real server does.
//  - --tls-cert-file and --tls-private-key-file: HTTPS instead of HTTP, TLS 1.2 or 1.3 (the
//    apiserver's default minimum is 1.2). --client-ca-file: like kube-apiserver, a client
//    certificate is requested and, when one is sent, verified against that CA (a bad one fails the
//    handshake); --require-client-cert also refuses a handshake without one (mTLS required).
//    Plain HTTP sent to the TLS port gets Go's "400 Bad Request" answer.
//  - --token-file: anonymous requests are refused, as kube-apiserver with --anonymous-auth=false:
//    every request needs "Authorization: Bearer <the file's content, trimmed>" or a verified client
//    certificate (x509 authenticates first there), else 401 with kube's JSON Status body. The file
//    is read at every request, so a test rotates the token by rewriting it.
//  - --readyz-control: a file read at every /readyz request (before the answer is chosen):
//    "200" or missing/empty answers as above, "500" answers 500 with an etcd check failed, "hang"
//    reads the request and never answers (the connection stays open until the client goes or the
//    server exits). A test switches it by rewriting the file (atomically), which is deterministic:
//    the next request sees it, no signal races. A shutdown's 500 wins over "200".
// Every signal is appended to --signal-log as "SIGNAME monotonic_us"; milestones go to
// --lifecycle-log as "WORD monotonic_us [detail]" (LISTENING, UNREADY, STOPPED_LISTENING, EXIT).
// --close-connections: every answer says "Connection: close" and the connection is closed after it
// (a server or proxy that does not keep connections alive).
// --connection-log gets "ACCEPTED monotonic_us PEER_PORT" for each connection, "HANDSHAKE
// monotonic_us full|resumed" for each TLS handshake (OpenSSL's session tickets, on by default, as
// Go's are) and "HANDSHAKE_FAILED monotonic_us REASON" for each failed one (tests count them).
// Single-threaded Boost.Asio; signals arrive through asio::signal_set, so the logs are written from
// the event loop rather than from a signal handler.

#include <fcntl.h>
#include <fmt/core.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

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

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;

namespace {

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
  std::chrono::microseconds request_time{0};
  bool ignore_sigterm = false;
  int exit_code = 0;
  std::string connection_log;
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string client_ca_file;
  bool require_client_cert = false;
  std::string token_file;
  std::string readyz_control;
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
  bool busy() const { return busy_; }
  void close() {
    service_timer_.cancel();
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
  }

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
  void write();

  beast::tcp_stream stream_;
  std::optional<ssl::stream<beast::tcp_stream&>> tls_;
  asio::steady_timer service_timer_{stream_.get_executor()};
  bool busy_ = false;  // a request has been read and its answer is not written yet
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
        timer_(io),
        signal_log_(opts.signal_log),
        lifecycle_(opts.lifecycle_log),
        connections_(opts.connection_log),
        tls_(make_tls_context(opts)) {}

  void start() {
    const tcp::endpoint endpoint(asio::ip::make_address(opts_.host), opts_.port);
    acceptor_.open(endpoint.protocol());
    acceptor_.set_option(asio::socket_base::reuse_address(true));
    acceptor_.bind(endpoint);
    acceptor_.listen(asio::socket_base::max_listen_connections);
    const auto port = acceptor_.local_endpoint().port();
    // Port and pidfile appear only once the socket accepts: they are the readiness signal.
    write_file_atomically(opts_.port_file, fmt::format("{}\n", port));
    write_file_atomically(opts_.pidfile, fmt::format("{}\n", getpid()));
    lifecycle_.write("LISTENING", fmt::format("{}", port));
    accept();
    wait_signal();
  }

  bool ready() const { return !shutting_down_; }
  bool closing() const { return closing_; }
  std::chrono::microseconds request_time() const { return opts_.request_time; }
  // A session finished a request; after the shutdown delay, the last one lets the process exit.
  void request_done() {
    if (closing_ && !any_busy()) finish(exit_code_);
  }
  const std::string& name() const { return opts_.name; }
  int exit_code() const { return exit_code_; }
  const options& opts() const { return opts_; }
  line_log& connections() { return connections_; }
  // The resourceVersion of a write: etcd's revision grows with every write.
  std::uint64_t next_revision() { return ++revision_; }

 private:
  void accept() {
    acceptor_.async_accept([this](beast::error_code ec, tcp::socket socket) {
      if (ec) return;  // closed at the end of the shutdown delay
      beast::error_code ignored;
      connections_.write("ACCEPTED", fmt::format("{}", socket.remote_endpoint(ignored).port()));
      auto s = std::make_shared<session>(std::move(socket), *this, tls_.get());
      sessions_.remove_if([](const std::weak_ptr<session>& w) { return w.expired(); });
      sessions_.push_back(s);
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
        // Like k8s.io/apiserver: unready at once, keep serving for the shutdown delay.
        shutting_down_ = true;
        lifecycle_.write("UNREADY", name);
        timer_.expires_after(opts_.shutdown_delay);
        timer_.async_wait([this](beast::error_code e) {
          if (!e) drain_and_stop(opts_.exit_code);
        });
        wait_signal();
      } else {
        // The second signal: exit 1 at once.
        stop(1);
      }
    });
  }

  bool any_busy() {
    for (auto& w : sessions_) {
      if (auto s = w.lock(); s && s->busy()) return true;
    }
    return false;
  }

  // The end of the shutdown delay: no new connections, idle ones closed, the requests being
  // served finish (bounded) before the exit.
  void drain_and_stop(int code) {
    exit_code_ = code;
    closing_ = true;
    beast::error_code ec;
    acceptor_.close(ec);
    lifecycle_.write("STOPPED_LISTENING");
    for (auto& w : sessions_) {
      if (auto s = w.lock(); s && !s->busy()) s->close();
    }
    if (!any_busy()) return finish(code);
    timer_.expires_after(opts_.request_time + std::chrono::seconds(5));
    timer_.async_wait([this, code](beast::error_code e) {
      if (!e) finish(code);
    });
  }

  void finish(int code) {
    for (auto& w : sessions_) {
      if (auto s = w.lock()) s->close();
    }
    beast::error_code ec;
    signals_.cancel(ec);
    timer_.cancel();
    lifecycle_.write("EXIT", fmt::format("{}", code));
    io_.stop();
  }

  void stop(int code) {
    exit_code_ = code;
    beast::error_code ec;
    acceptor_.close(ec);
    lifecycle_.write("STOPPED_LISTENING");
    for (auto& w : sessions_) {
      if (auto s = w.lock()) s->close();
    }
    signals_.cancel(ec);
    timer_.cancel();
    lifecycle_.write("EXIT", fmt::format("{}", code));
    io_.stop();
  }

  asio::io_context& io_;
  const options& opts_;
  tcp::acceptor acceptor_;
  asio::signal_set signals_;
  asio::steady_timer timer_;
  line_log signal_log_;
  line_log lifecycle_;
  line_log connections_;
  std::unique_ptr<ssl::context> tls_;
  std::list<std::weak_ptr<session>> sessions_;
  bool shutting_down_ = false;
  bool closing_ = false;
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

// kube's Status body for a failed request.
std::string status_body(std::string_view message, std::string_view reason, unsigned code) {
  return fmt::format(R"({{"kind":"Status","apiVersion":"v1","metadata":{{}},"status":"Failure",)"
                     R"("message":"{}","reason":"{}","code":{}}})"
                     "\n",
                     message, reason, code);
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
    http::async_read(stream, buffer_, request_,
                     [self = shared_from_this()](beast::error_code ec, std::size_t) {
                       if (ec) {
                         self->close();
                         return;
                       }
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

void session::respond() {
  std::string_view target = request_.target();
  const std::string_view path = target.substr(0, target.find('?'));
  const bool head = request_.method() == http::verb::head;
  std::string body = "ok";
  std::string content_type = "text/plain; charset=utf-8";
  http::status status = http::status::ok;
  std::string control;
  if (path == "/readyz" && !server_.opts().readyz_control.empty()) {
    control = trimmed(read_small_file(server_.opts().readyz_control).value_or(""));
  }
  static constexpr std::string_view kNodes = "/api/v1/nodes/";
  if (!authenticated()) {
    status = http::status::unauthorized;
    content_type = "application/json";
    body = status_body("Unauthorized", "Unauthorized", 401);
  } else if (request_.method() == http::verb::patch && path.starts_with(kNodes)) {
    content_type = "application/json";
    const auto node = path.substr(kNodes.size(), path.find('/', kNodes.size()) - kNodes.size());
    if (!is_patch_type(request_[http::field::content_type])) {
      status = http::status::unsupported_media_type;
      body = status_body(
          "the body of the request was in an unknown format - accepted media types include: "
          "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
          "UnsupportedMediaType", 415);
    } else {
      body = fmt::format(
          R"({{"kind":"Node","apiVersion":"v1","metadata":{{"name":"{}","resourceVersion":"{}"}}}})"
          "\n",
          node, server_.next_revision());
    }
  } else if (request_.method() != http::verb::get && !head) {
    status = http::status::method_not_allowed;
    body = "method not allowed";
  } else if (path == "/readyz" && !server_.ready()) {
    status = http::status::internal_server_error;
    body = "[+]ping ok\n[+]log ok\n[-]shutdown failed: reason withheld\nreadyz check failed\n";
  } else if (control == "hang") {
    // Never answered: the session lives on this wait until close() cancels it.
    service_timer_.expires_at(asio::steady_timer::time_point::max());
    service_timer_.async_wait([self = shared_from_this()](beast::error_code) { self->close(); });
    return;
  } else if (control == "500") {
    status = http::status::internal_server_error;
    body = "[+]ping ok\n[+]log ok\n[-]etcd failed: reason withheld\nreadyz check failed\n";
  }
  response_ = {};
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
  if (path == "/readyz" || server_.request_time().count() == 0) return write();
  service_timer_.expires_after(server_.request_time());
  service_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (ec) return self->close();
    self->write();
  });
}

void session::write() {
  response_.keep_alive(request_.keep_alive() && !server_.closing() &&
                       !server_.opts().close_connections);
  with_stream([this](auto& stream) {
    http::async_write(stream, response_,
                      [self = shared_from_this()](beast::error_code ec, std::size_t) {
                        self->busy_ = false;
                        if (ec || !self->response_.keep_alive() || self->server_.closing()) {
                          self->close();
                          self->server_.request_done();
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
             "         [--signal-log=PATH] [--lifecycle-log=PATH] [--shutdown-delay=DURATION]\n"
             "         [--name=NAME] [--ignore-sigterm] [--exit-code=N] [--request-time=D]\n"
             "         [--connection-log=PATH] [--readyz-control=PATH] [--token-file=PATH]\n"
             "         [--close-connections]\n"
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
      } else if (auto v = value("--shutdown-delay")) {
        o.shutdown_delay = parse_duration(*v);
      } else if (auto v = value("--request-time")) {
        o.request_time = parse_duration(*v);
      } else if (auto v = value("--name")) {
        o.name = *v;
      } else if (auto v = value("--exit-code")) {
        o.exit_code = std::stoi(*v);
      } else if (auto v = value("--connection-log")) {
        o.connection_log = *v;
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
