// The server in process, one connection at a time: listening, keep-alive and pipelining, answers
// byte for byte as Beast writes them, HTTP/1.0 and Connection: close, the read deadline, stopping,
// IPv6.

#include <boost/asio/steady_timer.hpp>
#include <regex>
#include <string>
#include <system_error>
#include <utility>

#include "http/http_answer.hpp"
#include "readiness_server_test_support.hpp"

namespace shim::readiness_test {
namespace {

TEST_F(ReadinessServerTest, ListenPicksAFreePort) {
  start();
  EXPECT_EQ(endpoint.address(), asio::ip::make_address("127.0.0.1"));
  const auto r = probe("/livez");
  ASSERT_FALSE(r.ec) << r.ec.message();
  EXPECT_EQ(r.message.result(), http::status::ok);
  EXPECT_EQ(r.message.body(), "ok");
}

// Issue 35, item 2: the load-balancer figures must tell kubelet's readinessProbe from a load
// balancer's check: the observer hears which /readyz answers went to User-Agent kube-probe/...
TEST_F(ReadinessServerTest, TheObserverHearsWhichProbesAreKubelets) {
  std::vector<std::pair<bool, bool>> heard;  // (ready, kubelet_probe)
  server = std::make_unique<readiness_server>(
      io, status, http_limits{},
      [&heard](const asio::ip::address&, bool ready, bool kubelet_probe) {
        heard.emplace_back(ready, kubelet_probe);
      });
  server->listen({{"127.0.0.1", 0}});
  auto c = connect(server->endpoints().front());
  c->send("GET /readyz HTTP/1.1\r\nHost: node\r\nUser-Agent: kube-probe/1.29\r\n\r\n");
  ASSERT_FALSE(read_reply(*c).ec);
  c->send("GET /readyz HTTP/1.1\r\nHost: node\r\nUser-Agent: HAProxy\r\n\r\n");
  ASSERT_FALSE(read_reply(*c).ec);
  c->send("GET /readyz HTTP/1.1\r\nHost: node\r\n\r\n");
  ASSERT_FALSE(read_reply(*c).ec);
  EXPECT_EQ(heard,
            (std::vector<std::pair<bool, bool>>{{true, true}, {true, false}, {true, false}}));
}

TEST_F(ReadinessServerTest, KeepAliveServesTwoRequestsOnOneConnection) {
  start();
  auto c = connect();
  auto first = get(*c, "/readyz");
  ASSERT_FALSE(first.ec) << first.ec.message();
  EXPECT_EQ(first.message.result(), http::status::ok);
  EXPECT_TRUE(first.message.keep_alive());
  auto second = get(*c, "/metrics");
  ASSERT_FALSE(second.ec) << second.ec.message();
  EXPECT_EQ(second.message.result(), http::status::ok);
  EXPECT_TRUE(has_line(second.message.body(),
                       "shutdown_shim_http_requests_total{code=\"200\",handler=\"readyz\"} 1"))
      << second.message.body();
}

TEST_F(ReadinessServerTest, ReadinessFlipIsSeenAtOnceOnAKeptAliveConnection) {
  start();
  auto c = connect();
  auto before = get(*c, "/readyz");
  ASSERT_FALSE(before.ec) << before.ec.message();
  EXPECT_EQ(before.message.result(), http::status::ok);
  start_drain(status);
  auto after = get(*c, "/readyz");
  ASSERT_FALSE(after.ec) << after.ec.message();
  EXPECT_EQ(after.message.result(), http::status::service_unavailable);
  EXPECT_EQ(lines_of(after.message.body()).back(), "readyz check failed");
  // Liveness holds through the drain.
  auto live = get(*c, "/livez");
  ASSERT_FALSE(live.ec) << live.ec.message();
  EXPECT_EQ(live.message.result(), http::status::ok);
}

TEST_F(ReadinessServerTest, PipelinedRequestsAreAnsweredInOrder) {
  start();
  auto c = connect();
  c->send(
      "GET /livez HTTP/1.1\r\nHost: node\r\n\r\n"
      "GET /nope HTTP/1.1\r\nHost: node\r\n\r\n"
      "HEAD /readyz HTTP/1.1\r\nHost: node\r\n\r\n");
  auto a = read_reply(*c);
  auto b = read_reply(*c);
  auto h = read_reply(*c, true);
  ASSERT_FALSE(a.ec || b.ec || h.ec);
  EXPECT_EQ(a.message.result(), http::status::ok);
  EXPECT_EQ(b.message.result(), http::status::not_found);
  EXPECT_EQ(h.message.result(), http::status::ok);
  EXPECT_EQ(h.message[http::field::content_length], "2");
  EXPECT_TRUE(h.message.body().empty());
}

// What the server writes over a socket must be the bytes Beast writes for the same answer (the
// server builds no message: answer_to reads append_response's bytes back with Beast's parser and
// has Beast serialize them again), and end where they do.
// An answer with the values of its process_* samples, and so its Content-Length, masked.
std::string without_process_figures(const std::string& answer) {
  static const std::regex kSample("(^|\n)(process_[a-z_]+) [^\n]*");
  static const std::regex kLength("Content-Length: [0-9]+");
  return std::regex_replace(std::regex_replace(answer, kSample, "$1$2 X"), kLength,
                            "Content-Length: X");
}

TEST_F(ReadinessServerTest, AnswersAreByteIdenticalToBeastsSerialization) {
  start();
  const std::vector<std::string> heads = {
      "GET /readyz HTTP/1.1\r\nHost: node\r\n",
      "HEAD /readyz HTTP/1.1\r\nHost: node\r\n",
      "GET /readyz?verbose HTTP/1.1\r\nHost: node\r\n",
      "HEAD /readyz?verbose=true HTTP/1.1\r\nHost: node\r\n",
      "GET /livez HTTP/1.1\r\nHost: node\r\n",
      "GET /healthz HTTP/1.1\r\nHost: node\r\nConnection: close\r\n",
      // process_* figures (open descriptors, resident memory, CPU time) are read from /proc at
      // each render: compared with their values (and so the length) masked.
      "GET /metrics HTTP/1.1\r\nHost: node\r\n",
      "HEAD /metrics HTTP/1.1\r\nHost: node\r\n",
      "GET /nope HTTP/1.1\r\nHost: node\r\n",
      "HEAD /nope HTTP/1.1\r\nHost: node\r\n",
      "POST /readyz HTTP/1.1\r\nHost: node\r\nContent-Length: 0\r\n",
      "DELETE /metrics HTTP/1.1\r\nHost: node\r\n",
      "BREW /readyz HTTP/1.1\r\nHost: node\r\n",  // a method Beast does not know: 405 too
      "GET /readyz HTTP/1.0\r\n",
      "GET /readyz HTTP/1.0\r\nConnection: keep-alive\r\n",
      "HEAD /livez HTTP/1.0\r\nConnection: Keep-Alive\r\n",
      "GET /readyz HTTP/1.1\r\nHost: node\r\nConnection: foo, close\r\n",
      // Connection is a list (RFC 9110, 7.6.1): a close in any of its fields closes, as
      // basic_parser reads it. http::message::keep_alive() looks at the first field only.
      "GET /readyz HTTP/1.1\r\nConnection: keep-alive\r\nConnection: close\r\n",
      "GET /readyz HTTP/1.0\r\nConnection: close\r\nConnection: keep-alive\r\n",
  };
  const std::string closing = "GET /livez HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n";
  for (const bool draining : {false, true}) {
    if (draining) start_drain(status);
    for (const auto& head : heads) {
      SCOPED_TRACE(head + (draining ? "(draining)" : ""));
      const std::string raw = head + "\r\n";
      const auto request = parse_request(raw);
      // The server counts into its own counters, the reference into a copy of them.
      auto reference = server->request_counts();
      const std::string expected = serialized(answer_to(status, reference, request));
      auto c = connect();
      c->send(raw);
      if (request.target() == "/metrics" && request.method() != http::verb::delete_) {
        auto r = read_reply(*c, request.method() == http::verb::head);
        ASSERT_FALSE(r.ec) << r.ec.message();
        EXPECT_EQ(without_process_figures(serialized(r.message)),
                  without_process_figures(expected));
      } else {
        EXPECT_EQ(read_bytes(*c, expected.size()), expected);
      }
      EXPECT_EQ(server->request_counts(), reference);
      if (request.keep_alive()) {
        // The answer ended where Beast's does, and the connection serves the next request.
        c->send(closing);
        const std::string next = serialized(answer_to(status, reference, parse_request(closing)));
        EXPECT_EQ(read_bytes(*c, next.size()), next);
      }
      EXPECT_EQ(wait_closed(*c), asio::error::eof);
      EXPECT_EQ(c->buffer.size(), 0u) << beast::buffers_to_string(c->buffer.data());
    }
  }
}

TEST_F(ReadinessServerTest, ErrorAnswersAreByteIdenticalToBeastsSerialization) {
  const auto expected = [](http::status code, std::string body) {
    http_response response{code, 11};
    response.set(http::field::content_type, "text/plain; charset=utf-8");
    response.set("X-Content-Type-Options", "nosniff");
    response.set(http::field::cache_control, "no-store");
    response.keep_alive(false);
    response.body() = std::move(body);
    response.prepare_payload();
    return serialized(response);
  };
  http_limits limits;
  limits.max_request_bytes = 1024;
  start(limits);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"GET /readyz HTTP/1.1\r\nHost: node\r\nX-Big: " + std::string(4096, 'a') + "\r\n\r\n",
       expected(http::status::request_header_fields_too_large,
                "431 request header fields too large\n")},
      {"POST /readyz HTTP/1.1\r\nHost: node\r\nContent-Length: 5\r\n\r\nhello",
       expected(http::status::payload_too_large, "413 request entity too large\n")},
      {"this is not http\r\n\r\n", expected(http::status::bad_request, "400 bad request\n")},
  };
  for (const auto& [raw, answer] : cases) {
    SCOPED_TRACE(answer);
    auto c = connect();
    c->send(raw);
    EXPECT_EQ(read_bytes(*c, answer.size()), answer);
    EXPECT_EQ(wait_closed(*c), asio::error::eof);
    EXPECT_EQ(c->buffer.size(), 0u) << beast::buffers_to_string(c->buffer.data());
  }
}

// The read deadline is moved lazily (the timer fires at the old one and is re-armed): a connection
// that keeps asking is never closed by a deadline it has already met.
TEST_F(ReadinessServerTest, AKeptAliveConnectionInUseOutlivesTheReadTimeout) {
  http_limits limits;
  limits.read_timeout = 1s;
  start(limits);
  auto c = connect();
  asio::steady_timer pause(io);
  const auto until = std::chrono::steady_clock::now() + 2500ms;
  int answered = 0;
  while (std::chrono::steady_clock::now() < until) {
    auto r = get(*c, "/readyz");
    ASSERT_FALSE(r.ec) << r.ec.message() << " after " << answered << " answers";
    EXPECT_EQ(r.message.result(), http::status::ok);
    ++answered;
    bool paused = false;
    pause.expires_after(200ms);
    pause.async_wait([&](beast::error_code) { paused = true; });
    run_until([&] { return paused; });
  }
  EXPECT_GE(answered, 3);
  // Left idle, it is closed by the deadline.
  EXPECT_EQ(wait_closed(*c), asio::error::eof);
}

// Pipelined requests are answered from the buffer without waiting for the socket; each one
// reads the status as it is when it is answered.
TEST_F(ReadinessServerTest, PipelinedProbesOnAConnectionSeeAFlip) {
  start();
  auto c = connect();
  const std::string two =
      "GET /readyz HTTP/1.1\r\nHost: node\r\n\r\n"
      "GET /readyz HTTP/1.1\r\nHost: node\r\n\r\n";
  c->send(two);
  auto first = read_reply(*c);
  ASSERT_FALSE(first.ec) << first.ec.message();
  EXPECT_EQ(first.message.result(), http::status::ok);
  auto second = read_reply(*c);
  ASSERT_FALSE(second.ec) << second.ec.message();
  EXPECT_EQ(second.message.result(), http::status::ok);
  start_drain(status);
  c->send(two);
  for (int i = 0; i < 2; ++i) {
    auto r = read_reply(*c);
    ASSERT_FALSE(r.ec) << r.ec.message();
    EXPECT_EQ(r.message.result(), http::status::service_unavailable);
  }
  EXPECT_EQ(server->request_counts().count(200), 2u);
  EXPECT_EQ(server->request_counts().count(503), 2u);
}

TEST_F(ReadinessServerTest, Http10ClosesUnlessKeepAlive) {
  start();
  auto c = connect();
  c->send("GET /readyz HTTP/1.0\r\n\r\n");
  auto r = read_reply(*c);
  ASSERT_FALSE(r.ec) << r.ec.message();
  EXPECT_EQ(r.message.version(), 10u);
  EXPECT_EQ(r.message.result(), http::status::ok);
  EXPECT_EQ(wait_closed(*c), asio::error::eof);

  auto k = connect();
  k->send("GET /readyz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  r = read_reply(*k);
  ASSERT_FALSE(r.ec) << r.ec.message();
  EXPECT_TRUE(r.message.keep_alive());
  k->send("GET /healthz HTTP/1.0\r\n\r\n");
  r = read_reply(*k);
  ASSERT_FALSE(r.ec) << r.ec.message();
  EXPECT_EQ(r.message.result(), http::status::ok);
  EXPECT_EQ(wait_closed(*k), asio::error::eof);
}

TEST_F(ReadinessServerTest, ConnectionCloseIsHonoured) {
  start();
  auto c = connect();
  auto r = get(*c, "/readyz", "Connection: close\r\n");
  ASSERT_FALSE(r.ec) << r.ec.message();
  EXPECT_FALSE(r.message.keep_alive());
  EXPECT_EQ(wait_closed(*c), asio::error::eof);
}

TEST_F(ReadinessServerTest, ReadDeadlineClosesAnIdleConnection) {
  http_limits limits;
  limits.read_timeout = 200ms;
  start(limits);
  auto idle = connect();
  EXPECT_EQ(wait_closed(*idle), asio::error::eof);

  // A kept-alive connection gets the same deadline after its last response.
  auto kept = connect();
  auto r = get(*kept, "/readyz");
  ASSERT_FALSE(r.ec) << r.ec.message();
  EXPECT_EQ(wait_closed(*kept), asio::error::eof);

  // And a client that trickles part of a header is not kept alive by it.
  auto slow = connect();
  slow->send("GET /readyz HTTP/1.1\r\nHo");
  EXPECT_EQ(wait_closed(*slow), asio::error::eof);

  // The server is still there.
  EXPECT_EQ(probe().message.result(), http::status::ok);
}

TEST_F(ReadinessServerTest, StopClosesListenersAndConnections) {
  start();
  auto c = connect();
  auto r = get(*c, "/readyz");
  ASSERT_FALSE(r.ec) << r.ec.message();
  server->stop();
  EXPECT_TRUE(server->endpoints().empty());
  EXPECT_EQ(wait_closed(*c), asio::error::eof);
  tcp::socket s(io);
  beast::error_code ec;
  s.connect(endpoint, ec);
  EXPECT_EQ(ec, asio::error::connection_refused);
  server->stop();  // twice is fine
}

TEST_F(ReadinessServerTest, DestructionWithOperationsPending) {
  start();
  auto c = connect();
  auto slow = connect();
  slow->send("GET /readyz HTTP/1.1\r\n");
  auto r = get(*c, "/readyz");
  ASSERT_FALSE(r.ec) << r.ec.message();
  server.reset();
  EXPECT_EQ(wait_closed(*c), asio::error::eof);
  EXPECT_NE(wait_closed(*slow), beast::error_code{});
  run_until([] { return false; });  // drains every handler the server left queued
}

TEST_F(ReadinessServerTest, ListenFailureNamesTheAddress) {
  start();
  readiness_server other(io, status);
  const auto port = endpoint.port();
  try {
    other.listen({{"127.0.0.1", port}});
    FAIL() << "bound a port in use";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), std::errc::address_in_use);
    EXPECT_EQ(std::string(e.what()),
              "listen on 127.0.0.1:" + std::to_string(port) + ": " + e.code().message());
  }
  try {
    other.listen({{"not-an-address", 80}});
    FAIL() << "accepted a host name";
  } catch (const std::system_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("listen on not-an-address:80: ", 0), 0u) << e.what();
  }
  // All or nothing.
  EXPECT_THROW(other.listen({{"127.0.0.1", 0}, {"127.0.0.1", port}}), std::system_error);
  EXPECT_TRUE(other.endpoints().empty());
}

TEST_F(ReadinessServerTest, Ipv6Loopback) {
  server = std::make_unique<readiness_server>(io, status);
  try {
    server->listen({{"::1", 0}});
  } catch (const std::system_error& e) {
    if (e.code() == std::errc::address_not_available ||
        e.code() == std::errc::address_family_not_supported) {
      GTEST_SKIP() << "no IPv6 loopback here: " << e.what();
    }
    throw;
  }
  ASSERT_EQ(server->endpoints().size(), 1u);
  endpoint = server->endpoints().front();
  EXPECT_TRUE(endpoint.address().is_v6());
  auto r = probe();
  ASSERT_FALSE(r.ec) << r.ec.message();
  EXPECT_EQ(r.message.result(), http::status::ok);

  // The error names the address in brackets.
  readiness_server other(io, status);
  try {
    other.listen({{"::1", endpoint.port()}});
    FAIL() << "bound a port in use";
  } catch (const std::system_error& e) {
    EXPECT_EQ(
        std::string(e.what()).rfind("listen on [::1]:" + std::to_string(endpoint.port()) + ": ", 0),
        0u)
        << e.what();
  }
}

TEST_F(ReadinessServerTest, Ipv4AndIpv6WildcardsShareAPort) {
  server = std::make_unique<readiness_server>(io, status);
  server->listen({{"0.0.0.0", 0}});
  const auto port = server->endpoints().front().port();
  try {
    server->listen({{"::", port}});
  } catch (const std::system_error& e) {
    if (e.code() == std::errc::address_not_available ||
        e.code() == std::errc::address_family_not_supported) {
      GTEST_SKIP() << "no IPv6 here: " << e.what();
    }
    throw;
  }
  ASSERT_EQ(server->endpoints().size(), 2u);
  endpoint = tcp::endpoint(asio::ip::make_address("127.0.0.1"), port);
  EXPECT_EQ(probe().message.result(), http::status::ok);
  endpoint = tcp::endpoint(asio::ip::make_address("::1"), port);
  beast::error_code ec;
  tcp::socket s(io);
  s.connect(endpoint, ec);
  if (!ec) {  // ::1 may be missing even where :: binds
    s.close();
    EXPECT_EQ(probe().message.result(), http::status::ok);
  }
}

}  // namespace
}  // namespace shim::readiness_test
