// What the readiness server's tests share: statuses, requests, Beast's own parse and serialization
// to compare with, the server's answers read back by Beast's parser, and the fixtures (answers
// without a socket; the server in process with clients on the same io_context).

#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "http/http_answer.hpp"
#include "http/readiness_server.hpp"
#include "run_until.hpp"

namespace shim::readiness_test {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;
using http_response = http::response<http::string_body>;

inline shim_status ready_status() {
  shim_status status;
  status.listener_bound = true;
  status.logind.inhibitor = logind_row::inhibitor_state::held;
  status.drain_delay = 70s;
  status.hold_needed = 135s;
  return status;
}

inline void start_drain(shim_status& status) {
  status.phase = {.what = hold_phase::kind::holding, .cause = "SIGTERM"};
  status.phase_since_wall = std::chrono::system_clock::time_point(1'700'000'000s);
}

inline http_request make_request(http::verb method, std::string_view target,
                                 unsigned version = 11) {
  http_request request{method, target, version};
  request.set(http::field::host, "node");
  return request;
}

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

inline bool has_line(const std::string& text, std::string_view wanted) {
  for (const auto& line : lines_of(text)) {
    if (line == wanted) return true;
  }
  return false;
}

// What /readyz?verbose must say for the status's current checks.
inline std::vector<std::string> expected_verbose_lines(const shim_status& status) {
  std::vector<std::string> lines;
  for (const auto& check : status.checks()) {
    std::string line = std::string(check.ok ? "[+]" : "[-]") + std::string(check.name) +
                       (check.ok ? " ok" : " failed");
    if (!check.detail.empty()) line += ": " + check.detail;
    lines.push_back(line);
  }
  lines.push_back(status.ready() ? "readyz check passed" : "readyz check failed");
  return lines;
}

inline void expect_plain_text_headers(const http_response& response) {
  EXPECT_EQ(response[http::field::content_type], "text/plain; charset=utf-8");
  EXPECT_EQ(response["X-Content-Type-Options"], "nosniff");
  EXPECT_EQ(response[http::field::cache_control], "no-store");
}

// A request as Beast's own parser makes it from raw bytes.
inline http_request parse_request(std::string_view raw) {
  http::request_parser<http::string_body> parser;
  parser.eager(true);
  beast::error_code ec;
  parser.put(asio::buffer(raw.data(), raw.size()), ec);
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_TRUE(parser.is_done());
  // The server takes keep-alive from the parser, which reads every Connection field.
  const bool keep_alive = parser.keep_alive();
  http_request request = parser.release();
  request.keep_alive(keep_alive);
  return request;
}

// What Beast's serializer writes for a response.
inline std::string serialized(const http_response& response) {
  std::ostringstream out;
  out << response;
  return out.str();
}

// The server's answer to `request`: the bytes append_response writes (what the session sends), as
// Beast's parser reads them back. They must be one whole response that Beast serializes to the
// same bytes, and say what append_response returns (status, whether the connection stays open).
inline http_response answer_to(const shim_status& status, http_request_counts& counts,
                               const http_request& request) {
  std::string bytes;
  const auto sent = append_response(status, counts, request, bytes);
  http::response_parser<http::string_body> parser;
  parser.eager(true);
  parser.skip(request.method() == http::verb::head);  // HEAD: a Content-Length, no body
  beast::error_code ec;
  const std::size_t used = parser.put(asio::buffer(bytes.data(), bytes.size()), ec);
  EXPECT_FALSE(ec) << ec.message() << "\n" << bytes;
  EXPECT_TRUE(parser.is_done()) << bytes;
  EXPECT_EQ(used, bytes.size()) << bytes;
  http_response response = parser.release();
  EXPECT_EQ(serialized(response), bytes);
  EXPECT_EQ(response.result(), sent.code);
  EXPECT_EQ(response.keep_alive(), sent.keep_alive);
  return response;
}

// answer_to and render_metrics, without a socket.

class HandleRequest : public ::testing::Test {
 protected:
  http_request_counts counts;
};

// The server, in process, with clients on the same io_context.

struct reply {
  beast::error_code ec;
  http::response<http::string_body> message;
};

class ReadinessServerTest : public ::testing::Test {
 protected:
  bool run_until(const std::function<bool()>& done) { return shim::run_until(io, done); }

  void start(http_limits limits = {}) {
    server = std::make_unique<readiness_server>(io, status, limits);
    server->listen({{"127.0.0.1", 0}});
    ASSERT_EQ(server->endpoints().size(), 1u);
    endpoint = server->endpoints().front();
    ASSERT_NE(endpoint.port(), 0);
  }

  struct client {
    client(asio::io_context& io, const tcp::endpoint& to) : socket(io) { socket.connect(to); }
    void send(std::string_view raw) { asio::write(socket, asio::buffer(raw)); }
    tcp::socket socket;
    beast::flat_buffer buffer;
  };

  std::unique_ptr<client> connect(const tcp::endpoint& to) {
    return std::make_unique<client>(io, to);
  }
  std::unique_ptr<client> connect() { return connect(endpoint); }

  reply read_reply(client& c, bool head = false) {
    http::response_parser<http::string_body> parser;
    parser.skip(head);
    bool done = false;
    reply out;
    http::async_read(c.socket, c.buffer, parser, [&](beast::error_code ec, std::size_t) {
      out.ec = ec;
      done = true;
    });
    if (!run_until([&] { return done; })) {
      ADD_FAILURE() << "no reply";
      beast::error_code ignored;
      c.socket.close(ignored);
      run_until([&] { return done; });
    }
    if (!out.ec) out.message = parser.release();
    return out;
  }

  // Reads until the server closes the connection; returns how it ended (eof for a clean close).
  beast::error_code wait_closed(client& c) {
    bool done = false;
    beast::error_code result;
    std::function<void()> read_more;
    read_more = [&] {
      c.socket.async_read_some(c.buffer.prepare(4096), [&](beast::error_code ec, std::size_t n) {
        c.buffer.commit(n);
        if (ec) {
          result = ec;
          done = true;
        } else {
          read_more();
        }
      });
    };
    read_more();
    if (!run_until([&] { return done; })) {
      ADD_FAILURE() << "connection not closed";
      beast::error_code ignored;
      c.socket.close(ignored);
      run_until([&] { return done; });
    }
    return result;
  }

  reply get(client& c, std::string_view target, std::string_view extra_headers = "") {
    c.send(std::string("GET ") + std::string(target) + " HTTP/1.1\r\nHost: node\r\n" +
           std::string(extra_headers) + "\r\n");
    return read_reply(c);
  }

  // Exactly `n` raw bytes of the server's answers.
  std::string read_bytes(client& c, std::size_t n) {
    bool failed = false;
    while (c.buffer.size() < n && !failed) {
      bool done = false;
      c.socket.async_read_some(c.buffer.prepare(n - c.buffer.size()),
                               [&](beast::error_code ec, std::size_t got) {
                                 c.buffer.commit(got);
                                 failed = ec.failed();
                                 done = true;
                               });
      if (!run_until([&] { return done; })) {
        ADD_FAILURE() << "no answer";
        beast::error_code ignored;
        c.socket.close(ignored);
        run_until([&] { return done; });
      }
    }
    std::string bytes = beast::buffers_to_string(c.buffer.data());
    bytes.resize(std::min(bytes.size(), n));
    c.buffer.consume(bytes.size());
    return bytes;
  }

  // Runs every handler that is ready, so that the server has read all that was sent so far: the
  // next send() arrives in a read of its own, as split by a socket.
  void settle() {
    if (io.stopped()) io.restart();
    while (io.poll() != 0) {
      if (io.stopped()) io.restart();
    }
  }

  // One request on a new connection.
  reply probe(std::string_view target = "/readyz") {
    auto c = connect();
    return get(*c, target, "Connection: close\r\n");
  }

  asio::io_context io;
  shim_status status = ready_status();
  std::unique_ptr<readiness_server> server;
  tcp::endpoint endpoint;
};

}  // namespace shim::readiness_test
