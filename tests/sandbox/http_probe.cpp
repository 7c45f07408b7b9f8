#include "http_probe.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <sstream>
#include <stdexcept>

#include "process.hpp"

namespace sandbox {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct http_client::impl {
  std::string host;
  std::uint16_t port;
  asio::io_context io;
  std::optional<beast::tcp_stream> stream;
  beast::flat_buffer buffer;
  unsigned connections = 0;

  // Runs the io_context until the pending operations finish; the stream's expiry bounds them.
  void run() {
    io.restart();
    io.run();
  }

  http_result request(http::verb verb, std::string_view target, std::chrono::milliseconds timeout) {
    http_result result;
    beast::error_code ec;
    if (!stream) {
      stream.emplace(io);
      buffer.clear();
      stream->expires_after(timeout);
      stream->async_connect(tcp::endpoint(asio::ip::make_address(host), port),
                            [&](beast::error_code e) { ec = e; });
      run();
      if (ec) {
        stream.reset();
        result.error = "connect: " + ec.message();
        result.at_us = monotonic_us();
        return result;
      }
      ++connections;
    }
    http::request<http::empty_body> req{verb, std::string(target), 11};
    req.set(http::field::host, host);
    req.keep_alive(true);
    http::response_parser<http::string_body> parser;
    parser.skip(verb == http::verb::head);  // HEAD answers carry headers only
    parser.body_limit(1 << 20);
    stream->expires_after(timeout);
    http::async_write(*stream, req, [&](beast::error_code e, std::size_t) {
      if (e) {
        ec = e;
        return;
      }
      http::async_read(*stream, buffer, parser,
                       [&](beast::error_code e2, std::size_t) { ec = e2; });
    });
    run();
    result.at_us = monotonic_us();
    if (ec) {
      result.error = ec.message();
      beast::error_code ignored;
      stream->socket().close(ignored);
      stream.reset();
      return result;
    }
    auto& res = parser.get();
    result.ok = true;
    result.status = res.result_int();
    result.body = res.body();
    if (auto it = res.find("X-Backend"); it != res.end()) result.backend = std::string(it->value());
    if (auto it = res.find(http::field::content_type); it != res.end()) {
      result.content_type = std::string(it->value());
    }
    if (!res.keep_alive()) {
      beast::error_code ignored;
      stream->socket().close(ignored);
      stream.reset();
    }
    return result;
  }
};

http_client::http_client(std::uint16_t port, std::string host) : impl_(std::make_unique<impl>()) {
  impl_->host = std::move(host);
  impl_->port = port;
}

http_client::~http_client() = default;

http_result http_client::get(std::string_view target, std::chrono::milliseconds timeout) {
  return impl_->request(http::verb::get, target, timeout);
}

http_result http_client::head(std::string_view target, std::chrono::milliseconds timeout) {
  return impl_->request(http::verb::head, target, timeout);
}

unsigned http_client::connections_opened() const { return impl_->connections; }

void http_client::disconnect() {
  if (impl_->stream) {
    beast::error_code ignored;
    impl_->stream->socket().close(ignored);
    impl_->stream.reset();
  }
}

std::uint16_t pick_free_port() {
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  return acceptor.local_endpoint().port();
}

http_prober::http_prober(std::uint16_t port, std::string target, std::chrono::microseconds interval,
                         std::chrono::seconds max_duration)
    : port_(port), target_(std::move(target)), interval_(interval), max_duration_(max_duration) {
  thread_ = std::thread([this] { run(); });
}

http_prober::~http_prober() { stop(); }

void http_prober::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void http_prober::run() {
  http_client client(port_);
  const auto end = std::chrono::steady_clock::now() + max_duration_;
  std::optional<unsigned> last;
  while (!stop_ && std::chrono::steady_clock::now() < end) {
    http_result r = client.get(target_, std::chrono::milliseconds(1000));
    ++requests_;
    const unsigned status = r.ok ? r.status : 0;
    if (status < 200 || status > 299) ++failures_;
    if (!last || *last != status) {
      std::lock_guard lock(mutex_);
      changes_.push_back({r.at_us, status, r.error});
      last = status;
    }
    if (interval_.count() > 0) std::this_thread::sleep_for(interval_);
  }
}

std::vector<http_prober::change> http_prober::changes() const {
  std::lock_guard lock(mutex_);
  return changes_;
}

std::optional<std::uint64_t> http_prober::first_status_at(unsigned status,
                                                          std::uint64_t since_us) const {
  std::lock_guard lock(mutex_);
  for (const auto& c : changes_) {
    if (c.at_us >= since_us && c.status == status) return c.at_us;
  }
  return std::nullopt;
}

std::optional<http_prober::change> http_prober::in_effect_at(std::uint64_t at_us) const {
  std::lock_guard lock(mutex_);
  std::optional<change> out;
  for (const auto& c : changes_) {
    if (c.at_us > at_us) break;
    out = c;
  }
  return out;
}

std::optional<std::uint64_t> http_prober::first_failure_at(std::uint64_t since_us) const {
  std::lock_guard lock(mutex_);
  for (const auto& c : changes_) {
    if (c.at_us >= since_us && (c.status < 200 || c.status > 299)) return c.at_us;
  }
  return std::nullopt;
}

std::optional<std::string> readyz_check_line(const std::string& body, const std::string& check) {
  std::istringstream in(body);
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("[+]" + check + " ") || line.starts_with("[-]" + check + " ")) return line;
  }
  return std::nullopt;
}

std::optional<double> metric_value(const std::string& body, const std::string& name) {
  std::istringstream in(body);
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(name + " ")) return std::stod(line.substr(name.size() + 1));
  }
  return std::nullopt;
}

}  // namespace sandbox
