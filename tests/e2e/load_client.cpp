#include "load_client.hpp"

#include <fmt/core.h>
#include <poll.h>
#include <sys/socket.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <charconv>
#include <fstream>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

#include "process.hpp"

namespace e2e {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;

namespace {

// A short, stable name for a transport error, for the tables.
std::string error_kind(const beast::error_code& ec, bool connecting) {
  if (ec == beast::error::timeout) return connecting ? "connect_timeout" : "timeout";
  if (ec == asio::error::connection_refused) return "refused";
  if (ec == asio::error::connection_reset) return "reset";
  if (ec == asio::error::broken_pipe) return "broken_pipe";
  if (ec == asio::error::eof || ec == http::error::end_of_stream) return "eof";
  if (ec == http::error::partial_message) return "partial";
  if (ec == ssl::error::stream_truncated) return "tls_truncated";  // closed without close_notify
  return "other:" + ec.message();
}

// The ways a reused connection breaks when the server closed it while idle: Go's transport sends
// an idempotent request again when nothing of an answer had arrived. Over TLS, a TCP close without
// close_notify at a record boundary is io.EOF to Go's crypto/tls (and stream_truncated here).
bool closed_under_us(const beast::error_code& ec) {
  return ec == asio::error::eof || ec == http::error::end_of_stream ||
         ec == asio::error::connection_reset || ec == asio::error::broken_pipe ||
         ec == ssl::error::stream_truncated;
}

// The peer has closed (FIN or RST) a connection we hold idle: what Go's read loop notices before
// it would reuse the connection.
bool peer_closed(tcp::socket& socket) {
  pollfd p{socket.native_handle(), POLLIN | POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) return true;
  char c;
  return recv(socket.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT) <= 0;
}

// client-go's checkWait and retryAfterSeconds: a 429 or a 5xx whose Retry-After is a whole number
// of seconds asks to be sent again after that long.
std::optional<std::chrono::seconds> retry_after_of(const http::response_header<>& res) {
  const unsigned status = res.result_int();
  if (status != 429 && status < 500) return std::nullopt;
  const auto field = res[http::field::retry_after];
  const char* const end = field.data() + field.size();
  long long n = 0;
  const auto [stop, ec] = std::from_chars(field.data(), end, n);
  if (field.empty() || ec != std::errc{} || stop != end || n < 0) return std::nullopt;
  return std::chrono::seconds(n);
}

http::request<http::string_body> make_request(const load_options& o, bool keep_alive) {
  http::request<http::string_body> req{http::string_to_verb(o.method), o.target, 11};
  req.set(http::field::host, "kubernetes.default");
  req.set(http::field::user_agent, "shutdown-shim-e2e-load");
  if (!o.content_type.empty()) req.set(http::field::content_type, o.content_type);
  if (!o.bearer_token.empty()) req.set(http::field::authorization, "Bearer " + o.bearer_token);
  if (!o.body.empty()) req.body() = o.body;
  req.keep_alive(keep_alive);
  req.prepare_payload();
  return req;
}

// A connection to the load balancer, with TLS over it when the options ask for it.
struct client_stream {
  beast::tcp_stream tcp;
  std::optional<ssl::stream<beast::tcp_stream&>> tls;

  explicit client_stream(asio::io_context& io) : tcp(io) {}

  // After the TCP connect: the TLS handshake when there is a context, then done(error).
  template <typename Done>
  void handshake(ssl::context* context, Done done) {
    if (!context) return done(beast::error_code{});
    tls.emplace(tcp, *context);
    tls->async_handshake(ssl::stream_base::client, std::move(done));
  }
  // Runs op on the TLS stream when there is one, else on the TCP stream.
  template <typename Op>
  void with(Op op) {
    if (tls) return op(*tls);
    op(tcp);
  }
  void close() {
    beast::error_code ec;
    tcp.socket().shutdown(tcp::socket::shutdown_both, ec);
    tcp.socket().close(ec);
    tls.reset();
  }
};

std::unique_ptr<ssl::context> client_tls_context(bool tls) {
  if (!tls) return nullptr;
  auto context = std::make_unique<ssl::context>(ssl::context::tls_client);
  context->set_verify_mode(ssl::verify_none);
  return context;
}

}  // namespace

struct load_client::impl {
  load_options opts;
  bool idempotent;
  std::unique_ptr<ssl::context> tls_context;
  tcp::endpoint endpoint;
  asio::io_context io{1};
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard;
  std::chrono::microseconds period;
  bool stopping = false;
  mutable std::mutex mutex;
  std::vector<request_record> records;
  std::thread thread;

  // --- the new-connection stream ---
  asio::steady_timer new_timer{io};
  std::chrono::steady_clock::time_point new_next;

  struct keep_alive;
  std::vector<std::unique_ptr<keep_alive>> keep_alives;

  explicit impl(load_options o)
      : opts(std::move(o)),
        idempotent(opts.method == "GET" || opts.method == "HEAD"),
        tls_context(client_tls_context(opts.tls)),
        endpoint(asio::ip::make_address("127.0.0.1"), opts.port),
        period(static_cast<std::int64_t>(1e6 / opts.rate)) {}

  void add(request_record r) {
    std::lock_guard lock(mutex);
    records.push_back(std::move(r));
  }

  // With client_go_retry_after: how long to wait before sending rec again after this answer, and
  // the answer noted in rec; nothing when the answer stands (no Retry-After, the retries used up,
  // or a wait that would outlast the request's timeout).
  std::optional<std::chrono::seconds> wait_to_retry(request_record& rec,
                                                    const http::response_header<>& res) const {
    if (!opts.client_go_retry_after || rec.waited_out >= kClientGoMaxRetries) return std::nullopt;
    const auto wait = retry_after_of(res);
    const auto elapsed = std::chrono::microseconds(sandbox::monotonic_us() - rec.send_us);
    if (!wait || elapsed + *wait >= opts.timeout) return std::nullopt;
    if (rec.waited_out++ == 0) rec.waited_out_status = res.result_int();
    return wait;
  }

  static std::chrono::steady_clock::time_point next_slot(std::chrono::steady_clock::time_point slot,
                                                         std::chrono::microseconds period) {
    // Keep the rate, but never send a burst to catch up after a stall.
    return std::max(slot + period, std::chrono::steady_clock::now());
  }

  void start();
  void connected(unsigned i);  // keep-alive connection i had its first answer
  void stop();

  // --- new connection per request ---

  struct one_shot : std::enable_shared_from_this<one_shot> {
    impl& owner;
    client_stream stream;
    http::request<http::string_body> req;
    beast::flat_buffer buffer;
    http::response<http::string_body> res;
    request_record rec;
    asio::steady_timer retry_timer;  // a Retry-After being waited out

    explicit one_shot(impl& o)
        : owner(o), stream(o.io), req(make_request(o.opts, false)), retry_timer(o.io) {}

    void start() {
      rec.send_us = sandbox::monotonic_us();
      connect();
    }

    void connect() {
      stream.tcp.expires_after(owner.opts.timeout);
      stream.tcp.async_connect(owner.endpoint, [self = shared_from_this()](beast::error_code ec) {
        if (ec) return self->finish(error_kind(ec, true));
        self->stream.handshake(self->owner.tls_context.get(), [self](beast::error_code ec) {
          if (ec) return self->finish(error_kind(ec, false));
          self->exchange();
        });
      });
    }

    void exchange() {
      stream.with([self = shared_from_this()](auto& st) {
        http::async_write(st, self->req, [self, &st](beast::error_code ec, std::size_t) {
          if (ec) return self->finish(error_kind(ec, false));
          http::async_read(st, self->buffer, self->res, [self](beast::error_code ec, std::size_t) {
            if (ec) return self->finish(error_kind(ec, false));
            self->rec.status = self->res.result_int();
            self->rec.backend = std::string(self->res["X-Backend"]);
            if (const auto wait = self->owner.wait_to_retry(self->rec, self->res)) {
              return self->send_again_after(*wait);
            }
            self->finish({});
          });
        });
      });
    }

    // Every request here has a connection of its own: the next attempt dials again.
    void send_again_after(std::chrono::seconds wait) {
      stream.close();
      buffer.clear();
      res = {};
      retry_timer.expires_after(wait);
      retry_timer.async_wait([self = shared_from_this()](beast::error_code) { self->connect(); });
    }

    void finish(std::string error) {
      rec.latency_us = sandbox::monotonic_us() - rec.send_us;
      rec.error = std::move(error);
      stream.close();
      owner.add(std::move(rec));
    }
  };

  void schedule_new() {
    new_timer.expires_at(new_next);
    new_timer.async_wait([this](beast::error_code ec) {
      if (ec || stopping) return;
      std::make_shared<one_shot>(*this)->start();
      new_next = next_slot(new_next, period);
      schedule_new();
    });
  }
};

// One keep-alive connection, sending the next request once the previous one is answered and its
// slot has come.
struct load_client::impl::keep_alive {
  impl& owner;
  unsigned index;
  asio::steady_timer timer;
  // A Retry-After being waited out: the request is in flight, so stop() lets it run.
  asio::steady_timer retry_timer;
  std::chrono::steady_clock::time_point next;
  client_stream stream;
  bool connected = false;
  bool announced = false;
  unsigned served = 0;  // requests answered on the current connection
  beast::flat_buffer buffer;
  http::request<http::string_body> req;
  std::optional<http::response_parser<http::string_body>> parser;
  request_record rec;

  keep_alive(impl& o, unsigned i)
      : owner(o), index(i), timer(o.io), retry_timer(o.io), stream(o.io) {}

  void start() {
    next = std::chrono::steady_clock::now();
    schedule();
  }

  void stop() {
    timer.cancel();
    if (!rec.send_us) drop();
  }

  void schedule() {
    timer.expires_at(next);
    timer.async_wait([this](beast::error_code ec) {
      if (ec || owner.stopping) return;
      rec = {};
      rec.reused = true;
      rec.send_us = sandbox::monotonic_us();
      send();
    });
  }

  void send() {
    if (connected && peer_closed(stream.tcp.socket())) drop();
    stream.tcp.expires_after(owner.opts.timeout);
    if (!connected) {
      stream.tcp.async_connect(owner.endpoint, [this](beast::error_code ec) {
        if (ec) return finish(error_kind(ec, true));
        stream.handshake(owner.tls_context.get(), [this](beast::error_code ec) {
          if (ec) {
            drop();
            return finish(error_kind(ec, false));
          }
          connected = true;
          served = 0;
          write();
        });
      });
      return;
    }
    write();
  }

  void write() {
    req = make_request(owner.opts, true);
    parser.emplace();
    parser->body_limit(1 << 20);
    stream.with([this](auto& st) {
      http::async_write(st, req, [this, &st](beast::error_code ec, std::size_t) {
        if (ec) return failed(ec);
        http::async_read(st, buffer, *parser, [this](beast::error_code ec, std::size_t) {
          if (ec) return failed(ec);
          auto& res = parser->get();
          rec.status = res.result_int();
          rec.backend = std::string(res["X-Backend"]);
          ++served;
          if (!res.keep_alive()) drop();
          if (const auto wait = owner.wait_to_retry(rec, res)) {
            retry_timer.expires_after(*wait);
            retry_timer.async_wait([this](beast::error_code) { send(); });
            return;
          }
          finish({});
        });
      });
    });
  }

  void failed(const beast::error_code& ec) {
    const bool nothing_answered = !parser || !parser->got_some();
    const bool was_reused = served > 0;
    drop();
    if (owner.idempotent && was_reused && nothing_answered && closed_under_us(ec) && !rec.retried &&
        !owner.stopping) {
      rec.retried = true;
      send();
      return;
    }
    finish(error_kind(ec, false));
  }

  void drop() {
    stream.close();
    buffer.clear();
    connected = false;
    served = 0;
  }

  void finish(std::string error) {
    rec.latency_us = sandbox::monotonic_us() - rec.send_us;
    rec.error = std::move(error);
    const auto pause = owner.opts.pause_after ? owner.opts.pause_after(rec) : owner.period;
    owner.add(std::move(rec));
    rec = {};
    if (!announced) {
      announced = true;
      owner.connected(index);
    }
    if (owner.stopping) {
      drop();
      return;
    }
    next = owner.opts.pause_after ? std::chrono::steady_clock::now() + pause
                                  : next_slot(next, owner.period);
    schedule();
  }
};

void load_client::impl::start() {
  guard.emplace(io.get_executor());
  // The keep-alive connections are opened one after the other before anything else, so that
  // the load balancer's round robin puts one on each node; then the new-connection stream.
  for (unsigned i = 0; i < opts.keep_alive_connections; ++i) {
    keep_alives.push_back(std::make_unique<keep_alive>(*this, i));
  }
  keep_alives.front()->start();
  thread = std::thread([this] { io.run(); });
}

void load_client::impl::connected(unsigned i) {
  if (i + 1 < keep_alives.size()) return keep_alives[i + 1]->start();
  if (!opts.new_connections) return;
  new_next = std::chrono::steady_clock::now();
  schedule_new();
}

void load_client::impl::stop() {
  asio::post(io, [this] {
    stopping = true;
    new_timer.cancel();
    for (auto& k : keep_alives) k->stop();
  });
  guard.reset();
  if (thread.joinable()) thread.join();
}

load_client::load_client(load_options options) : impl_(std::make_unique<impl>(std::move(options))) {
  if (impl_->opts.rate <= 0) throw std::invalid_argument("load rate must be positive");
  if (impl_->opts.keep_alive_connections == 0) {
    throw std::invalid_argument("the load client needs a keep-alive connection");
  }
  impl_->start();
}

load_client::~load_client() { stop(); }

void load_client::stop() { impl_->stop(); }

std::vector<request_record> load_client::records() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->records;
}

std::map<std::string, std::size_t> failed_by_kind(const std::vector<request_record>& records) {
  std::map<std::string, std::size_t> m;
  for (const auto& r : records) {
    if (!r.failed()) continue;
    ++m[(r.reused ? "reused:" : "new:") + (r.status ? fmt::format("http_{}", r.status) : r.error)];
  }
  return m;
}

namespace {

std::string kinds_text(const std::map<std::string, std::size_t>& kinds) {
  std::string text;
  for (const auto& [kind, n] : kinds) {
    text += fmt::format("{}{} {}", text.empty() ? "" : ", ", kind, n);
  }
  return text.empty() ? "-" : text;
}

}  // namespace

std::string failed_by_kind_text(const std::vector<request_record>& records) {
  return kinds_text(failed_by_kind(records));
}

std::string waited_out_by_kind_text(const std::vector<request_record>& records) {
  std::map<std::string, std::size_t> m;
  for (const auto& r : records) {
    if (r.waited_out)
      ++m[fmt::format("{}:http_{}", r.reused ? "reused" : "new", r.waited_out_status)];
  }
  return kinds_text(m);
}

void write_records_csv(const std::filesystem::path& path,
                       const std::vector<request_record>& records, std::uint64_t t0_us) {
  std::ofstream out(path, std::ios::trunc);
  out << "conn,send_s,latency_ms,status,error,backend,retried,failed,waited_out\n";
  for (const auto& r : records) {
    out << fmt::format("{},{:.6f},{:.3f},{},{},{},{},{},{}\n", r.reused ? "reused" : "new",
                       (static_cast<double>(r.send_us) - static_cast<double>(t0_us)) / 1e6,
                       static_cast<double>(r.latency_us) / 1e3, r.status,
                       r.error.empty() ? "-" : r.error, r.backend.empty() ? "-" : r.backend,
                       r.retried ? 1 : 0, r.failed() ? 1 : 0, r.waited_out);
  }
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

}  // namespace e2e
