#include "upstream/upstream_probe.hpp"

#include <fmt/format.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <boost/asio/error.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <cerrno>
#include <concepts>
#include <cstring>
#include <ctime>
#include <utility>

#include "util/duration_text.hpp"
#include "util/small_file.hpp"

namespace shim {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;

namespace {

// The bounds of an answer to the probe. kube-apiserver's /readyz?verbose is a few KiB; anything
// much larger is not a readiness answer.
constexpr std::uint64_t kMaxProbeBody = 64 * 1024;
constexpr std::uint32_t kMaxProbeHeader = 16 * 1024;

// The first line of an error text (OpenSSL's may run over several).
std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// Where a TLS context keeps the probe it belongs to (its app data is Asio's verify callback).
int probe_index() {
  static const int index = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

}  // namespace

upstream_probe::upstream_probe(asio::io_context& io, const upstream_settings& settings,
                               std::function<void(const probe_outcome&)> probed)
    : io_(io), settings_(settings), probed_(std::move(probed)), next_(io) {
  const auto& url = settings_.url;
  if (url.host == "localhost") {
    // RFC 6761: localhost is the loopback, without asking a resolver.
    endpoints_ = {{asio::ip::make_address("127.0.0.1"), url.port},
                  {asio::ip::make_address("::1"), url.port}};
  } else {
    endpoints_ = {{asio::ip::make_address(url.host), url.port}};
  }
  const bool v6 = url.host.find(':') != std::string::npos;
  const bool default_port = url.port == (url.tls ? 443 : 80);
  host_header_ = fmt::format("{}{}{}", v6 ? "[" : "", url.host, v6 ? "]" : "");
  if (!default_port) host_header_ += fmt::format(":{}", url.port);
  ca_.path = settings_.ca_file;
  cert_.path = settings_.client_cert;
  key_.path = settings_.client_key;
  token_file_.path = settings_.token_file;
}

upstream_probe::~upstream_probe() {
  stop();
  // A connection still held by an aborted operation keeps the context; it must not find us.
  if (tls_context_) SSL_CTX_set_ex_data(tls_context_->native_handle(), probe_index(), nullptr);
}

template <typename Handler>
auto upstream_probe::guarded(unsigned generation, Handler handler) {
  return [
    this, life = std::weak_ptr<const bool>(lifetime_), held = connection_, generation,
    handler = std::move(handler)
  ](auto&&... args) mutable
      // Constrained, so that Asio sees which completion signatures it takes.
      requires std::invocable<Handler&, decltype(args)...> {
    if (life.expired() || generation != generation_) return;
    handler(std::forward<decltype(args)>(args)...);
  };
}

void upstream_probe::start() {
  running_ = true;
  probe();
}

void upstream_probe::stop() {
  running_ = false;
  ++generation_;
  next_.cancel();
  close_connection();
}

beast::tcp_stream& upstream_probe::connection::lowest() {
  return tls ? beast::get_lowest_layer(*tls) : *plain;
}

void upstream_probe::close_connection() {
  if (!connection_) return;
  // Closing aborts what is in flight; the aborted operations hold the connection until they
  // have run, so it is dropped here, not destroyed.
  beast::error_code ignored;
  connection_->lowest().socket().close(ignored);
  connection_.reset();
}

void upstream_probe::probe() {
  if (!running_) return;
  const unsigned generation = ++generation_;
  started_ = clock::now();
  retried_ = false;
  if (auto problem = refresh_files()) {
    // Delivered from the loop, never from inside start() (result.hpp's convention; found by
    // UpstreamProbe.NoOutcomeFromInsideStart).
    return asio::post(io_, guarded(generation, [this, generation, problem = std::move(*problem)] {
                        fail(generation, {.failure = probe_failure::config, .error = problem});
                      }));
  }
  if (connection_ && connection_->open) {
    reused_ = true;
    return send(generation);
  }
  connect();
}

result<bool> upstream_probe::watched_file::changed() {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int error = errno;
    *this = watched_file{.path = path};  // a change again once it can be stat()ed
    return result<bool>::errno_failure(error, path);
  }
  const std::int64_t mtime =
      static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  const bool differs =
      st.st_dev != dev || st.st_ino != ino || st.st_size != size || mtime != mtime_ns;
  dev = st.st_dev;
  ino = st.st_ino;
  size = st.st_size;
  mtime_ns = mtime;
  return result<bool>::success(differs);
}

std::optional<std::string> upstream_probe::refresh_files() {
  for (watched_file* f : {&ca_, &cert_, &key_, &token_file_}) {
    if (f->path.empty()) continue;
    auto& loaded = f == &token_file_ ? token_loaded_ : tls_loaded_;
    const auto changed = f->changed();
    if (!changed) {
      loaded.reset();
      return changed.error();
    }
    if (changed.value()) loaded.reset();
  }
  if (settings_.url.tls && !tls_loaded_) {
    // New trust or credentials: a connection or a session made with the old ones goes. A new
    // token needs no new connection (UpstreamProbe.RotatedTokenIsReadAgain counts them).
    close_connection();
    session_.reset();
    tls_loaded_ = load_tls_context();
  }
  if (tls_loaded_ && *tls_loaded_) return *tls_loaded_;
  if (!token_loaded_) token_loaded_ = load_token();
  return *token_loaded_;
}

std::optional<std::string> upstream_probe::load_tls_context() {
  auto context = std::make_unique<ssl::context>(ssl::context::tls_client);
  beast::error_code ec;
  context->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                           ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                           ssl::context::no_tlsv1_1,
                       ec);
  if (settings_.insecure_skip_verify) {
    context->set_verify_mode(ssl::verify_none, ec);
  } else {
    context->set_verify_mode(ssl::verify_peer, ec);
    if (!settings_.ca_file.empty()) {
      const auto pem = read_small_file(settings_.ca_file, kMaxTlsFileBytes);
      if (!pem) return "CA file " + pem.error();
      context->add_certificate_authority(asio::buffer(pem.value()), ec);
      if (ec) return fmt::format("CA file {}: {}", settings_.ca_file, first_line(ec.message()));
    } else {
      // The system's store is root's (/etc/ssl/certs), looked up by OpenSSL as it verifies.
      context->set_default_verify_paths(ec);
      if (ec) return "the system's trust store: " + first_line(ec.message());
    }
  }
  if (!settings_.client_cert.empty()) {
    const auto chain = read_small_file(settings_.client_cert, kMaxTlsFileBytes);
    if (!chain) return "client certificate " + chain.error();
    context->use_certificate_chain(asio::buffer(chain.value()), ec);
    if (ec) {
      return fmt::format("client certificate {}: {}", settings_.client_cert,
                         first_line(ec.message()));
    }
    auto key = read_small_file(settings_.client_key, kMaxTlsFileBytes);
    if (!key) return "client key " + key.error();
    context->use_private_key(asio::buffer(key.value()), ssl::context::pem, ec);
    // The key's bytes live on only inside OpenSSL.
    OPENSSL_cleanse(key.value().data(), key.value().size());
    if (ec) return fmt::format("client key {}: {}", settings_.client_key, first_line(ec.message()));
    if (SSL_CTX_check_private_key(context->native_handle()) != 1) {
      return fmt::format("client key {} does not belong to {}", settings_.client_key,
                         settings_.client_cert);
    }
  }
  // The client's cache is this probe's one session: OpenSSL hands each new one to
  // on_new_session, and keeps none itself.
  SSL_CTX* native = context->native_handle();
  SSL_CTX_set_session_cache_mode(native, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
  SSL_CTX_sess_set_new_cb(native, &upstream_probe::on_new_session);
  SSL_CTX_set_ex_data(native, probe_index(), this);
  if (tls_context_) SSL_CTX_set_ex_data(tls_context_->native_handle(), probe_index(), nullptr);
  tls_context_ = std::move(context);
  return std::nullopt;
}

int upstream_probe::on_new_session(SSL* ssl, SSL_SESSION* session) {
  auto* self =
      static_cast<upstream_probe*>(SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), probe_index()));
  // Only the current connection's, and only once it is verified as the probe verifies now.
  if (!self || !self->connection_ || !self->connection_->tls ||
      self->connection_->tls->native_handle() != ssl) {
    return 0;
  }
  if (!self->settings_.insecure_skip_verify && SSL_get_verify_result(ssl) != X509_V_OK) return 0;
  // A copy: OpenSSL marks the connection's own session not resumable when the connection is
  // freed without a close_notify, as the probe drops a connection the server closes after its
  // answer. A connection that failed is never resumed: fail() drops the copy.
  self->session_.reset(SSL_SESSION_dup(session));
  return 0;
}

void upstream_probe::offer_session(SSL* handle) {
  if (!session_) return;
  SSL_SESSION* s = session_.get();
  const bool timed_out = SSL_SESSION_get_time(s) + SSL_SESSION_get_timeout(s) <= std::time(nullptr);
  // A resumption does not look at the certificate again: one that has expired since must fail
  // the probe as a full handshake would.
  const X509* peer = SSL_SESSION_get0_peer(s);
  const bool peer_expired = !settings_.insecure_skip_verify &&
                            (!peer || X509_cmp_current_time(X509_get0_notAfter(peer)) <= 0);
  if (!SSL_SESSION_is_resumable(s) || timed_out || peer_expired) {
    session_.reset();
    return;
  }
  SSL_set_session(handle, s);
}

std::optional<std::string> upstream_probe::load_token() {
  token_.clear();
  if (settings_.token_file.empty()) return std::nullopt;
  const auto text = read_small_file(settings_.token_file, kMaxTokenBytes);
  if (!text) return "token file " + text.error();
  const std::string& t = text.value();
  const auto first = t.find_first_not_of(" \t\r\n");
  const auto last = t.find_last_not_of(" \t\r\n");
  if (first == std::string::npos) return fmt::format("token file {}: empty", settings_.token_file);
  token_ = t.substr(first, last - first + 1);
  if (token_.find_first_of("\r\n") != std::string::npos) {
    token_.clear();
    return fmt::format("token file {}: more than one line", settings_.token_file);
  }
  return std::nullopt;
}

void upstream_probe::connect() {
  const unsigned generation = generation_;
  reused_ = false;
  close_connection();
  connection_ = std::make_shared<connection>();
  // The parser's bounds hold the answer; this one holds what is read ahead of it as well.
  connection_->buffer.max_size(kMaxProbeHeader + kMaxProbeBody);
  if (settings_.url.tls) {
    connection_->tls.emplace(io_, *tls_context_);
    SSL* handle = connection_->tls->native_handle();
    const std::string& name =
        settings_.server_name.empty() ? settings_.url.host : settings_.server_name;
    beast::error_code not_ip;
    asio::ip::make_address(name, not_ip);
    if (!settings_.insecure_skip_verify) {
      X509_VERIFY_PARAM* param = SSL_get0_param(handle);
      if (!not_ip) {
        X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str());
      } else {
        X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
        SSL_set1_host(handle, name.c_str());
      }
    }
    // SNI carries names only (RFC 6066).
    if (not_ip) SSL_set_tlsext_host_name(handle, name.c_str());
    offer_session(handle);
  } else {
    connection_->plain.emplace(io_);
  }
  auto& stream = connection_->lowest();
  stream.expires_at(started_ + settings_.timeout);
  stream.async_connect(endpoints_, guarded(generation, [this, generation](beast::error_code ec,
                                                                          const tcp::endpoint&) {
                         on_connected(generation, ec);
                       }));
}

void upstream_probe::on_connected(unsigned generation, beast::error_code ec) {
  if (ec) return fail(generation, describe(ec, false));
  if (!connection_->tls) {
    connection_->open = true;
    return send(generation);
  }
  connection_->tls->async_handshake(ssl::stream_base::client,
                                    guarded(generation, [this, generation](beast::error_code ec) {
                                      if (ec) return fail(generation, describe(ec, true));
                                      connection_->open = true;
                                      send(generation);
                                    }));
}

void upstream_probe::send(unsigned generation) {
  connection& c = *connection_;
  c.request = {};
  c.request.method(http::verb::get);
  c.request.target(settings_.url.target);
  c.request.version(11);
  c.request.set(http::field::host, host_header_);
  c.request.set(http::field::user_agent, "shutdown-shim/" SHUTDOWN_SHIM_VERSION);
  c.request.set(http::field::accept, "*/*");
  if (!token_.empty()) c.request.set(http::field::authorization, "Bearer " + token_);
  c.parser.emplace();
  c.parser->header_limit(kMaxProbeHeader);
  c.parser->body_limit(kMaxProbeBody);
  c.buffer.clear();
  c.lowest().expires_at(started_ + settings_.timeout);
  const auto on_written = [this, generation](beast::error_code ec, std::size_t) {
    if (ec) return on_answer(generation, ec);
    read_answer(generation);
  };
  if (c.tls) return http::async_write(*c.tls, c.request, guarded(generation, on_written));
  http::async_write(*c.plain, c.request, guarded(generation, on_written));
}

// The header alone first: async_read_header parses without going on into the body, so a length
// or header block beyond the bounds ends the probe here, before anything is reserved for it.
void upstream_probe::read_answer(unsigned generation) {
  auto on_header = guarded(generation, [this, generation](beast::error_code ec, std::size_t) {
    if (ec) return on_answer(generation, ec);
    auto on_body = guarded(generation, [this, generation](beast::error_code ec, std::size_t) {
      on_answer(generation, ec);
    });
    connection& c = *connection_;
    if (c.tls) return http::async_read(*c.tls, c.buffer, *c.parser, std::move(on_body));
    http::async_read(*c.plain, c.buffer, *c.parser, std::move(on_body));
  });
  connection& c = *connection_;
  if (c.tls) return http::async_read_header(*c.tls, c.buffer, *c.parser, std::move(on_header));
  http::async_read_header(*c.plain, c.buffer, *c.parser, std::move(on_header));
}

void upstream_probe::on_answer(unsigned generation, beast::error_code ec) {
  if (ec) {
    // A kept-alive connection the server has closed meanwhile (a restart, an idle timeout): once
    // more on a new one, within the same timeout (UpstreamProbe.RestartedApiserverPasses...).
    if (reused_ && !retried_ && !connection_->parser->got_some() && ec != beast::error::timeout) {
      retried_ = true;
      return connect();
    }
    return fail(generation, describe(ec, false));
  }
  const auto& response = connection_->parser->get();
  probe_outcome outcome;
  outcome.status = response.result_int();
  if (outcome.status != 200) {
    outcome.failure = probe_failure::status;
    outcome.error = fmt::format("status {}", outcome.status);
  }
  if (!response.keep_alive()) close_connection();
  finish(std::move(outcome));
}

void upstream_probe::fail(unsigned generation, probe_outcome outcome) {
  if (generation != generation_) return;
  close_connection();
  // Whatever failed, the next connection is verified in full.
  session_.reset();
  finish(std::move(outcome));
}

void upstream_probe::finish(probe_outcome outcome) {
  ++generation_;  // late completions of this probe are stale now
  const auto now = clock::now();
  outcome.duration = now - started_;
  if (connection_) connection_->lowest().expires_never();
  if (probed_) probed_(outcome);
  if (!running_) return;
  // One probe at a time, each starting no earlier than the interval after the one before.
  next_.expires_at(std::max(now, started_ + settings_.interval));
  next_.async_wait(
      [this, life = std::weak_ptr<const bool>(lifetime_)](const boost::system::error_code& ec) {
        if (!ec && !life.expired()) probe();
      });
}

probe_outcome upstream_probe::describe(beast::error_code ec, bool handshake) const {
  if (ec == beast::error::timeout) {
    return {.failure = probe_failure::timeout,
            .error = "timeout after " + format_duration(settings_.timeout)};
  }
  if (ec == asio::error::connection_refused) {
    return {.failure = probe_failure::refused, .error = "connection refused"};
  }
  if (ec == http::error::header_limit) {
    return {.failure = probe_failure::oversize,
            .error = fmt::format("answer's header block larger than {} bytes", kMaxProbeHeader)};
  }
  if (ec == http::error::body_limit || ec == http::error::buffer_overflow) {
    return {.failure = probe_failure::oversize,
            .error = fmt::format("answer's body larger than {} bytes", kMaxProbeBody)};
  }
  if (handshake) {
    // Skipping verification records the verdict all the same; it is not why a handshake failed.
    const long verified = connection_->tls && !settings_.insecure_skip_verify
                              ? SSL_get_verify_result(connection_->tls->native_handle())
                              : X509_V_OK;
    if (verified != X509_V_OK) {
      return {.failure = probe_failure::tls,
              .error = std::string("certificate verify failed: ") +
                       X509_verify_cert_error_string(verified)};
    }
    return {.failure = probe_failure::tls, .error = "TLS handshake: " + first_line(ec.message())};
  }
  // In TLS 1.3 the client's handshake is over before the server has checked the client
  // certificate: its refusal ("tlsv13 alert certificate required", "tlsv1 alert unknown ca")
  // arrives with the answer (UpstreamProbe.MutualTlsRequired).
  if (ec.category() == asio::error::get_ssl_category()) {
    return {.failure = probe_failure::tls, .error = "TLS: " + first_line(ec.message())};
  }
  if (ec.category() == http::make_error_code(http::error::end_of_stream).category() ||
      ec == asio::error::eof) {
    return {.failure = probe_failure::protocol, .error = first_line(ec.message())};
  }
  return {.failure = probe_failure::connect, .error = first_line(ec.message())};
}

}  // namespace shim
