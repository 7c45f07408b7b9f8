#include "upstream_probe.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <cerrno>
#include <cstring>

#include "config.hpp"
#include "unique_fd.hpp"

namespace shim {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;

namespace {

constexpr std::array<std::string_view, 8> kFailureNames{"none", "timeout", "refused",  "connect",
                                                        "tls",  "status",  "protocol", "config"};

// kube-apiserver's /readyz?verbose is a few KiB; anything much larger is not a readiness answer.
constexpr std::uint64_t kMaxBody = 64 * 1024;
constexpr std::uint32_t kMaxHeader = 16 * 1024;
// A token file is a token, not a document.
constexpr std::size_t kMaxToken = 16 * 1024;

std::string first_line(std::string text) {
  text = text.substr(0, text.find('\n'));
  return text;
}

}  // namespace

std::string_view to_string(probe_failure f) { return kFailureNames[static_cast<std::size_t>(f)]; }

upstream_probe::upstream_probe(asio::io_context& io, const upstream_settings& settings, handlers h)
    : io_(io), settings_(settings), handlers_(std::move(h)), next_(io) {
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

upstream_probe::~upstream_probe() { stop(); }

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

beast::tcp_stream& upstream_probe::lowest_layer() {
  return tls_ ? beast::get_lowest_layer(*tls_) : *plain_;
}

void upstream_probe::close_connection() {
  connected_ = false;
  beast::error_code ignored;
  if (tls_) beast::get_lowest_layer(*tls_).socket().close(ignored);
  if (plain_) plain_->socket().close(ignored);
  tls_.reset();
  plain_.reset();
}

void upstream_probe::probe() {
  if (!running_) return;
  const unsigned generation = ++generation_;
  started_ = clock::now();
  retried_ = false;
  if (auto problem = refresh_files()) return fail(generation, probe_failure::config, *problem);
  if (connected_) {
    reused_ = true;
    return send(generation);
  }
  connect();
}

std::optional<std::string> upstream_probe::refresh_files() {
  bool changed = !files_loaded_;
  for (watched_file* f : {&ca_, &cert_, &key_, &token_file_}) {
    if (f->path.empty()) continue;
    struct stat st {};
    if (::stat(f->path.c_str(), &st) != 0) {
      files_loaded_ = false;
      return fmt::format("{}: {}", f->path, std::strerror(errno));
    }
    const std::int64_t mtime_ns =
        static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
    if (st.st_dev != f->dev || st.st_ino != f->ino || st.st_size != f->size ||
        mtime_ns != f->mtime_ns) {
      changed = true;
      f->dev = st.st_dev;
      f->ino = st.st_ino;
      f->size = st.st_size;
      f->mtime_ns = mtime_ns;
    }
  }
  if (!changed) return std::nullopt;
  files_loaded_ = false;
  // New credentials: a connection made with the old ones goes.
  close_connection();
  if (settings_.url.tls) {
    if (auto problem = load_tls_context()) return problem;
  }
  if (auto problem = load_token()) return problem;
  files_loaded_ = true;
  return std::nullopt;
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
      context->load_verify_file(settings_.ca_file, ec);
      if (ec) return fmt::format("CA file {}: {}", settings_.ca_file, first_line(ec.message()));
    } else {
      context->set_default_verify_paths(ec);
      if (ec) return "the system's trust store: " + first_line(ec.message());
    }
  }
  if (!settings_.client_cert.empty()) {
    context->use_certificate_chain_file(settings_.client_cert, ec);
    if (ec) {
      return fmt::format("client certificate {}: {}", settings_.client_cert,
                         first_line(ec.message()));
    }
    context->use_private_key_file(settings_.client_key, ssl::context::pem, ec);
    if (ec) return fmt::format("client key {}: {}", settings_.client_key, first_line(ec.message()));
    if (SSL_CTX_check_private_key(context->native_handle()) != 1) {
      return fmt::format("client key {} does not belong to {}", settings_.client_key,
                         settings_.client_cert);
    }
  }
  tls_context_ = std::move(context);
  return std::nullopt;
}

std::optional<std::string> upstream_probe::load_token() {
  token_.clear();
  if (settings_.token_file.empty()) return std::nullopt;
  unique_fd fd(::open(settings_.token_file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (!fd) return fmt::format("token file {}: {}", settings_.token_file, std::strerror(errno));
  std::string text;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fmt::format("token file {}: {}", settings_.token_file, std::strerror(errno));
    if (n == 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
    if (text.size() > kMaxToken)
      return fmt::format("token file {}: too large", settings_.token_file);
  }
  const auto first = text.find_first_not_of(" \t\r\n");
  const auto last = text.find_last_not_of(" \t\r\n");
  if (first == std::string::npos) return fmt::format("token file {}: empty", settings_.token_file);
  token_ = text.substr(first, last - first + 1);
  if (token_.find_first_of("\r\n") != std::string::npos) {
    return fmt::format("token file {}: more than one line", settings_.token_file);
  }
  return std::nullopt;
}

void upstream_probe::connect() {
  const unsigned generation = generation_;
  reused_ = false;
  close_connection();
  if (settings_.url.tls) {
    tls_.emplace(io_, *tls_context_);
    SSL* handle = tls_->native_handle();
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
  } else {
    plain_.emplace(io_);
  }
  auto& stream = lowest_layer();
  stream.expires_at(started_ + settings_.timeout);
  stream.async_connect(endpoints_, [this, generation](beast::error_code ec, const tcp::endpoint&) {
    on_connected(generation, ec);
  });
}

void upstream_probe::on_connected(unsigned generation, beast::error_code ec) {
  if (generation != generation_) return;
  if (ec) {
    const auto o = describe(ec, false);
    return fail(generation, o.failure, o.error);
  }
  if (!tls_) {
    connected_ = true;
    return send(generation);
  }
  tls_->async_handshake(ssl::stream_base::client, [this, generation](beast::error_code ec) {
    if (generation != generation_) return;
    if (ec) {
      const auto o = describe(ec, true);
      return fail(generation, o.failure, o.error);
    }
    connected_ = true;
    send(generation);
  });
}

void upstream_probe::send(unsigned generation) {
  request_ = {};
  request_.method(http::verb::get);
  request_.target(settings_.url.target);
  request_.version(11);
  request_.set(http::field::host, host_header_);
  request_.set(http::field::user_agent, "shutdown-shim/" SHUTDOWN_SHIM_VERSION);
  request_.set(http::field::accept, "*/*");
  if (!token_.empty()) request_.set(http::field::authorization, "Bearer " + token_);
  parser_.emplace();
  parser_->header_limit(kMaxHeader);
  parser_->body_limit(kMaxBody);
  buffer_.clear();
  lowest_layer().expires_at(started_ + settings_.timeout);
  const auto on_read = [this, generation](beast::error_code ec, std::size_t) {
    on_answer(generation, ec);
  };
  const auto on_written = [this, generation, on_read](beast::error_code ec, std::size_t) {
    if (generation != generation_) return;
    if (ec) return on_answer(generation, ec);
    if (tls_) return http::async_read(*tls_, buffer_, *parser_, on_read);
    http::async_read(*plain_, buffer_, *parser_, on_read);
  };
  if (tls_) return http::async_write(*tls_, request_, on_written);
  http::async_write(*plain_, request_, on_written);
}

void upstream_probe::on_answer(unsigned generation, beast::error_code ec) {
  if (generation != generation_) return;
  if (ec) {
    // A kept-alive connection the server has closed meanwhile: once more on a new one.
    if (reused_ && !retried_ && !parser_->got_some() && ec != beast::error::timeout) {
      retried_ = true;
      return connect();
    }
    const auto o = describe(ec, false);
    return fail(generation, o.failure, o.error);
  }
  const auto& response = parser_->get();
  probe_outcome outcome;
  outcome.status = response.result_int();
  if (outcome.status != 200) {
    outcome.failure = probe_failure::status;
    outcome.error = fmt::format("status {}", outcome.status);
  }
  if (!response.keep_alive()) close_connection();
  finish(std::move(outcome));
}

void upstream_probe::fail(unsigned generation, probe_failure failure, std::string error) {
  if (generation != generation_) return;
  close_connection();
  finish({.failure = failure, .error = std::move(error)});
}

void upstream_probe::finish(probe_outcome outcome) {
  ++generation_;  // late completions of this probe are stale now
  const auto now = clock::now();
  outcome.duration = now - started_;
  if (connected_) lowest_layer().expires_never();
  if (handlers_.probed) handlers_.probed(outcome);
  if (!running_) return;
  // One probe at a time, each starting no earlier than the interval after the one before.
  next_.expires_at(std::max(now, started_ + settings_.interval));
  next_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) probe();
  });
}

probe_outcome upstream_probe::describe(beast::error_code ec, bool handshake) {
  if (ec == beast::error::timeout) {
    return {.failure = probe_failure::timeout,
            .error = "timeout after " + format_duration(settings_.timeout)};
  }
  if (ec == asio::error::connection_refused) {
    return {.failure = probe_failure::refused, .error = "connection refused"};
  }
  if (handshake) {
    if (tls_) {
      const long verify = SSL_get_verify_result(tls_->native_handle());
      if (verify != X509_V_OK) {
        return {.failure = probe_failure::tls,
                .error = std::string("certificate verify failed: ") +
                         X509_verify_cert_error_string(verify)};
      }
    }
    return {.failure = probe_failure::tls, .error = "TLS handshake: " + first_line(ec.message())};
  }
  if (ec.category() == http::make_error_code(http::error::end_of_stream).category() ||
      ec == asio::error::eof) {
    return {.failure = probe_failure::protocol, .error = first_line(ec.message())};
  }
  return {.failure = probe_failure::connect, .error = first_line(ec.message())};
}

}  // namespace shim
