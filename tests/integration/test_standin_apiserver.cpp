// Self-tests of fake_apiserver's model of k8s.io/apiserver's graceful termination and start-up
// (tests/sandbox/README.md, "fake_apiserver"): the shutdown delay's default of 0, the 429 of
// --shutdown-send-retry-after on kept-alive and new connections, the exempt paths, without it no
// answer to a request read once the listener closed and the request timeout as the in-flight
// wait's bound, the start-up phases (/livez and /healthz with /readyz), and etcd gone. Each runs
// the binary; the order of events is read from its own logs (--lifecycle-log, --request-log), and
// the only time bounds asserted are lower bounds that the flags set.

#include <fmt/core.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <future>
#include <thread>

#include "shim_harness.hpp"

namespace shim_it {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using response = http::response<http::string_body>;

// One client connection whose answers keep every header (sandbox::http_client keeps the status,
// the body and X-Backend only; these tests look at Retry-After and Connection). Blocking, each read
// bounded by SO_RCVTIMEO.
class raw_connection {
 public:
  explicit raw_connection(std::uint16_t port) : socket_(io_) {
    socket_.connect({asio::ip::make_address("127.0.0.1"), port});
    const timeval bound{.tv_sec = 20, .tv_usec = 0};
    setsockopt(socket_.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof bound);
  }

  // GET target on this connection; nullopt if it failed or the server closed it instead.
  std::optional<response> get(std::string_view target) {
    http::request<http::empty_body> request{http::verb::get, target, 11};
    request.set(http::field::host, "127.0.0.1");
    beast::error_code ec;
    http::write(socket_, request, ec);
    if (ec) return std::nullopt;
    response answer;
    http::read(socket_, buffer_, answer, ec);
    if (ec) return std::nullopt;
    return answer;
  }

  // The server closed the connection (EOF or reset) without sending anything more.
  bool closed_by_server() {
    char byte = 0;
    beast::error_code ec;
    socket_.read_some(asio::buffer(&byte, 1), ec);
    return ec == asio::error::eof || ec == asio::error::connection_reset;
  }

 private:
  asio::io_context io_;
  tcp::socket socket_;
  beast::flat_buffer buffer_;
};

bool connection_refused(std::uint16_t port) {
  asio::io_context io;
  tcp::socket socket(io);
  beast::error_code ec;
  socket.connect({asio::ip::make_address("127.0.0.1"), port}, ec);
  return ec == asio::error::connection_refused;
}

std::string header(const response& r, http::field field) {
  const auto value = r[field];
  return std::string(value.data(), value.size());
}

class StandInApiserver : public ShimTest {
 protected:
  // An apiserver as the harness describes it, but with its flags as given: without the harness's
  // --shutdown-delay (so that upstream's default applies) unless extra names one.
  apiserver describe(const std::string& name, const std::vector<std::string>& extra) {
    apiserver_options o;
    o.extra = extra;
    auto a = describe_apiserver(name, o);
    std::erase_if(a.argv, [](const std::string& f) { return f.starts_with("--shutdown-delay="); });
    return a;
  }
  apiserver launch(apiserver a) {
    a.process = &sb().spawn(a.name, a.argv);
    if (!wait_apiserver_listening(a)) ADD_FAILURE() << a.name << " did not start listening";
    return a;
  }

  std::filesystem::path request_log(const std::string& name) {
    return sb().path(name + "-requests.log");
  }

  // The first line with word (and detail starting with detail) in log, waited for (bounded).
  std::optional<sandbox::timed_line> wait_line(const std::filesystem::path& log,
                                               const std::string& word,
                                               const std::string& detail = {}) {
    const auto deadline = std::chrono::steady_clock::now() + kEventTimeout;
    while (std::chrono::steady_clock::now() < deadline) {
      for (const auto& l : sandbox::read_timed_lines(log)) {
        if (l.word == word && l.detail.starts_with(detail)) return l;
      }
      std::this_thread::sleep_for(5ms);
    }
    return std::nullopt;
  }

  // A request kept in flight by --request-time, on its own connection; its answer is the future's.
  std::future<std::optional<response>> in_flight(std::uint16_t port, std::string target) {
    auto answer = std::async(std::launch::async, [port, target] {
      raw_connection c(port);
      return c.get(target);
    });
    return answer;
  }

  // The words of the lifecycle log in order.
  static std::vector<std::string> words(const apiserver& a) {
    std::vector<std::string> out;
    for (const auto& l : a.lifecycle()) out.push_back(l.word);
    return out;
  }
};

// Upstream's --shutdown-delay-duration defaults to 0 (kubeadm sets none): the server stops
// accepting as soon as it has its SIGTERM. Shown by order, not speed: a request read before the
// signal and kept in flight for 3 s is still being served when the listener has closed and the
// idle kept-alive connection has been closed.
TEST_F(StandInApiserver, ShutdownDelayDefaultsToZero) {
  const auto log = request_log("api");
  auto api = launch(describe("api", {"--request-time=3s", "--request-log=" + log.string()}));
  ASSERT_FALSE(HasFailure());
  raw_connection idle(api.port());
  const auto ready = idle.get("/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->result_int(), 200u);
  EXPECT_TRUE(ready->keep_alive());
  auto served = in_flight(api.port(), "/api/v1/namespaces/default");
  ASSERT_TRUE(wait_line(log, "READ", "GET /api/v1/namespaces/default"));

  api.process->signal(SIGTERM);
  EXPECT_TRUE(idle.closed_by_server()) << "the idle kept-alive connection stayed open";
  const auto stopped = wait_line(api.lifecycle_log, "STOPPED_LISTENING");
  ASSERT_TRUE(stopped);
  EXPECT_TRUE(connection_refused(api.port())) << "still accepting after STOPPED_LISTENING";
  const auto answer = served.get();
  ASSERT_TRUE(answer) << "the request in flight was cut";
  EXPECT_EQ(answer->result_int(), 200u);
  EXPECT_FALSE(answer->keep_alive()) << "served after the stop: Connection: close";
  const auto status = api.process->wait_for_exit(kEventTimeout);
  ASSERT_TRUE(status);
  EXPECT_EQ(sandbox::shell_exit_code(*status), 0);

  const auto answered = wait_line(log, "ANSWERED", "200 /api/v1/namespaces/default");
  ASSERT_TRUE(answered);
  EXPECT_LT(stopped->usec, answered->usec) << "it stopped accepting only after the delay";
  EXPECT_THAT(words(api), testing::ElementsAre("LISTENING", "READY", "UNREADY", "NOT_ACCEPTING",
                                               "STOPPED_LISTENING", "IN_FLIGHT_DRAINED", "EXIT"));
}

// The real flag's name, as the shim reads it from /proc/PID/cmdline, in pflag's "--flag VALUE"
// form: every request is served for the delay, and it stops accepting only after it.
TEST_F(StandInApiserver, ShutdownDelayDurationKeepsServing) {
  auto api = launch(describe("api", {"--shutdown-delay-duration", "3s"}));
  ASSERT_FALSE(HasFailure());
  api.process->signal(SIGTERM);
  const auto unready = wait_line(api.lifecycle_log, "UNREADY");
  ASSERT_TRUE(unready);
  raw_connection during(api.port());
  const auto answer = during.get("/api/v1/namespaces/default");
  const auto not_accepting = wait_line(api.lifecycle_log, "NOT_ACCEPTING");
  ASSERT_TRUE(not_accepting);
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->result_int(), 200u) << answer->body();
  EXPECT_THAT(answer->body(), testing::HasSubstr(R"("kind":"Namespace")"));
  EXPECT_GE(not_accepting->usec, unready->usec + 3'000'000u);
  ASSERT_TRUE(api.process->wait_for_exit(kEventTimeout));
}

// --shutdown-send-retry-after (OpenShift): once it no longer accepts, it keeps listening and every
// request that is not exempt gets with_retry_after.go's 429, on a kept-alive connection and on a
// new one, until the request in flight has drained; the exempt paths are served as usual.
TEST_F(StandInApiserver, RetryAfterAnswers429UntilTheRequestsInFlightDrain) {
  const auto log = request_log("api");
  auto api = launch(describe("api", {"--shutdown-send-retry-after", "--request-time=3s",
                                     "--request-log=" + log.string()}));
  ASSERT_FALSE(HasFailure());
  raw_connection kept(api.port());
  ASSERT_TRUE(kept.get("/readyz"));
  auto served = in_flight(api.port(), "/api/v1/namespaces/default");
  ASSERT_TRUE(wait_line(log, "READ", "GET /api/v1/namespaces/default"));

  api.process->signal(SIGTERM);
  ASSERT_TRUE(wait_line(api.lifecycle_log, "NOT_ACCEPTING"));
  const auto expect_429 = [](const std::optional<response>& r, const std::string& where) {
    ASSERT_TRUE(r) << where << ": no answer";
    EXPECT_EQ(r->result_int(), 429u) << where << ": " << r->body();
    EXPECT_EQ(header(*r, http::field::retry_after), "5") << where;
    EXPECT_EQ(header(*r, http::field::connection), "close") << where;
    EXPECT_EQ(r->body(), "The apiserver is shutting down, please try again later.\n") << where;
  };
  expect_429(kept.get("/api/v1/namespaces/kube-system"), "kept-alive connection");
  EXPECT_TRUE(kept.closed_by_server()) << "Connection: close, and closed";
  raw_connection fresh(api.port());
  expect_429(fresh.get("/apis/apps/v1/namespaces/x/deployments"), "new connection");
  raw_connection probe(api.port());
  const auto readyz = probe.get("/readyz");
  ASSERT_TRUE(readyz);
  EXPECT_EQ(readyz->result_int(), 500u) << "exempt: /readyz answers as usual";
  EXPECT_THAT(readyz->body(), testing::HasSubstr("[-]shutdown failed: reason withheld"));
  const auto livez = probe.get("/livez");
  ASSERT_TRUE(livez);
  EXPECT_EQ(livez->result_int(), 200u) << "exempt: /livez answers as usual";

  const auto answer = served.get();
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->result_int(), 200u);
  const auto status = api.process->wait_for_exit(kEventTimeout);
  ASSERT_TRUE(status);
  EXPECT_EQ(sandbox::shell_exit_code(*status), 0);
  EXPECT_THAT(words(api), testing::ElementsAre("LISTENING", "READY", "UNREADY", "NOT_ACCEPTING",
                                               "IN_FLIGHT_DRAINED", "STOPPED_LISTENING", "EXIT"));
  // Both 429s went out while it still listened, before the drain ended.
  const auto drained = api.lifecycle_at("IN_FLIGHT_DRAINED");
  ASSERT_TRUE(drained);
  std::size_t refusals = 0;
  for (const auto& l : sandbox::read_timed_lines(log)) {
    if (l.word == "ANSWERED" && l.detail.starts_with("429 ")) {
      ++refusals;
      EXPECT_LT(l.usec, *drained);
    }
  }
  EXPECT_EQ(refusals, 2u);
}

// Without retry-after the listener closes when it stops accepting; a connection accepted before
// that which sends its request only now gets no answer, exempt or not: net/http drops a request
// it reads once its Shutdown has begun (the real server does so: tests/realapi's differential
// test; the stand-in answered waitgroup.go's 503 here before).
TEST_F(StandInApiserver, WithoutRetryAfterALateRequestGetsNoAnswer) {
  const auto log = request_log("api");
  const auto connections = sb().path("api-connections.log");
  auto api = launch(describe(
      "api", {"--shutdown-send-retry-after=false", "--request-time=3s",
              "--request-log=" + log.string(), "--connection-log=" + connections.string()}));
  ASSERT_FALSE(HasFailure());
  raw_connection late(api.port());
  raw_connection late_probe(api.port());
  auto served = in_flight(api.port(), "/api/v1/namespaces/default");
  ASSERT_TRUE(wait_line(log, "READ", "GET /api/v1/namespaces/default"));
  ASSERT_EQ(sandbox::read_timed_lines(connections).size(), 3u) << "all three accepted";

  api.process->signal(SIGTERM);
  ASSERT_TRUE(wait_line(api.lifecycle_log, "STOPPED_LISTENING"));
  EXPECT_TRUE(connection_refused(api.port()));
  const auto dropped = late.get("/api/v1/nodes/node-1");
  EXPECT_FALSE(dropped) << "answered " << dropped->result_int() << ": " << dropped->body();
  const auto readyz = late_probe.get("/readyz");
  EXPECT_FALSE(readyz) << "exempt, yet dropped as well: answered " << readyz->result_int();
  ASSERT_TRUE(wait_line(log, "READ", "GET /readyz")) << "the requests were read, then dropped";
  for (const auto& l : sandbox::read_timed_lines(log)) {
    EXPECT_FALSE(l.word == "ANSWERED" && !l.detail.ends_with("/api/v1/namespaces/default"))
        << l.detail;
  }

  const auto answer = served.get();
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->result_int(), 200u);
  const auto status = api.process->wait_for_exit(kEventTimeout);
  ASSERT_TRUE(status);
  EXPECT_EQ(sandbox::shell_exit_code(*status), 0);
}

// Without retry-after a request in flight is served however long it takes within the request
// timeout (60 s, kube-apiserver's --request-timeout), not only within 5 s of the stop as the
// stand-in did before; past --request-timeout the HTTP server's Shutdown gives up on it. The hold
// is 10 s, 5 s past the old bound, for a signal late on a loaded machine (6 s was not enough: the
// SIGTERM arrived 1.004 s after the request was read, under a sanitizer build).
TEST_F(StandInApiserver, WithoutRetryAfterTheRequestTimeoutBoundsTheInFlightWait) {
  const auto log = request_log("api");
  auto api = launch(describe("api", {"--request-log=" + log.string()}));
  ASSERT_FALSE(HasFailure());
  auto held = in_flight(api.port(), "/hold?seconds=10");
  ASSERT_TRUE(wait_line(log, "READ", "GET /hold"));
  api.process->signal(SIGTERM);
  const auto answer = held.get();
  ASSERT_TRUE(answer) << "the request in flight was cut";
  EXPECT_EQ(answer->result_int(), 200u);
  EXPECT_FALSE(answer->keep_alive()) << "served after the stop: Connection: close";
  auto status = api.process->wait_for_exit(kEventTimeout);
  ASSERT_TRUE(status);
  EXPECT_EQ(sandbox::shell_exit_code(*status), 0);
  const auto stopped = api.lifecycle_at("STOPPED_LISTENING");
  const auto answered = wait_line(log, "ANSWERED", "200 /hold");
  ASSERT_TRUE(stopped && answered);
  EXPECT_GE(answered->usec, *stopped + 5'000'000u) << "held past the old bound";

  const auto short_log = request_log("short");
  auto short_timeout =
      launch(describe("short", {"--request-timeout", "1s", "--request-log=" + short_log.string()}));
  ASSERT_FALSE(HasFailure());
  auto cut = in_flight(short_timeout.port(), "/hold?seconds=600");
  ASSERT_TRUE(wait_line(short_log, "READ", "GET /hold"));
  short_timeout.process->signal(SIGTERM);
  status = short_timeout.process->wait_for_exit(kEventTimeout);
  ASSERT_TRUE(status) << "it waited past --request-timeout";
  EXPECT_EQ(sandbox::shell_exit_code(*status), 0);
  EXPECT_FALSE(cut.get()) << "answered after the shutdown gave up on it";
}

// The process exists before its port opens, and the port opens before /readyz passes: meanwhile
// /readyz answers 500 with the post-start hooks that have not finished.
TEST_F(StandInApiserver, StartsInPhases) {
  const auto port = sandbox::pick_free_port();
  auto api = describe("api", {"--startup-listen-delay=2s", "--startup-ready-delay=2s"});
  std::replace(api.argv.begin(), api.argv.end(), std::string("--listen=127.0.0.1:0"),
               fmt::format("--listen=127.0.0.1:{}", port));
  api.process = &sb().spawn(api.name, api.argv);
  const auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
  while (!api.pid() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_EQ(api.pid(), api.process->pid()) << "the pidfile names the process at its start";
  const auto refused_at = sandbox::monotonic_us();
  EXPECT_TRUE(connection_refused(port)) << "the port was open with the pidfile";
  EXPECT_EQ(api.port(), 0) << "the port file before the port";

  ASSERT_TRUE(wait_apiserver_listening(api));
  const auto listening = api.lifecycle_at("LISTENING");
  ASSERT_TRUE(listening);
  EXPECT_GT(*listening, refused_at) << "refused only because it did not listen yet";
  EXPECT_GE(*listening, api.process->start_time_us() + 2'000'000u);
  raw_connection c(port);
  const auto starting = c.get("/readyz");
  ASSERT_TRUE(starting);
  EXPECT_EQ(starting->result_int(), 500u);
  EXPECT_THAT(
      starting->body(),
      testing::HasSubstr("[-]poststarthook/rbac/bootstrap-roles failed: reason withheld\n"));
  EXPECT_THAT(starting->body(), testing::HasSubstr("[+]shutdown ok\n"));
  EXPECT_THAT(starting->body(), testing::EndsWith("readyz check failed\n"));
  const auto ready = wait_line(api.lifecycle_log, "READY");
  ASSERT_TRUE(ready);
  EXPECT_GE(ready->usec, *listening + 2'000'000u);
  const auto after = c.get("/readyz");
  ASSERT_TRUE(after);
  EXPECT_EQ(after->result_int(), 200u);
  EXPECT_EQ(after->body(), "ok");
}

// /livez and /healthz fail with /readyz while the post-start hooks run (the library adds each hook
// to all three), and pass with it; they list no shutdown check (the stand-in answered 200 here
// before: tests/realapi's differential test found the real server's 500).
TEST_F(StandInApiserver, LivezAndHealthzFailUntilThePostStartHooksFinish) {
  auto api = launch(describe("api", {"--startup-ready-delay=2s"}));
  ASSERT_FALSE(HasFailure());
  raw_connection c(api.port());
  for (const std::string endpoint : {"livez", "healthz"}) {
    const auto starting = c.get("/" + endpoint);
    ASSERT_TRUE(starting) << endpoint;
    EXPECT_EQ(starting->result_int(), 500u) << endpoint;
    EXPECT_THAT(
        starting->body(),
        testing::HasSubstr("[-]poststarthook/rbac/bootstrap-roles failed: reason withheld\n"));
    EXPECT_THAT(starting->body(), testing::Not(testing::HasSubstr("shutdown")));
    EXPECT_THAT(starting->body(), testing::EndsWith(endpoint + " check failed\n"));
  }
  ASSERT_TRUE(wait_line(api.lifecycle_log, "READY"));
  for (const std::string endpoint : {"livez", "healthz"}) {
    const auto ready = c.get("/" + endpoint);
    ASSERT_TRUE(ready) << endpoint;
    EXPECT_EQ(ready->result_int(), 200u) << endpoint;
    EXPECT_EQ(ready->body(), "ok") << endpoint;
  }
}

// --etcd-pidfile: with etcd gone, /readyz fails its etcd checks and etcd-backed requests get
// InterpretGetError's ServerTimeout; what needs no storage still answers; etcd back, all is well.
TEST_F(StandInApiserver, EtcdGoneFailsReadyzAndEtcdBackedRequests) {
  const auto etcd_pidfile = sb().path("etcd.pid");
  auto* etcd = &sb().spawn("etcd", {"/bin/sleep", "600"});
  sandbox::write_file_atomically(etcd_pidfile, fmt::format("{}\n", etcd->pid()));
  auto api = launch(describe("api", {"--etcd-pidfile=" + etcd_pidfile.string()}));
  ASSERT_FALSE(HasFailure());
  raw_connection c(api.port());
  const auto ready = c.get("/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->result_int(), 200u);
  const auto ns = c.get("/api/v1/namespaces/kube-system");
  ASSERT_TRUE(ns);
  EXPECT_EQ(ns->result_int(), 200u);
  EXPECT_THAT(ns->body(),
              testing::HasSubstr(R"({"kind":"Namespace","apiVersion":"v1","metadata":{"name":)"
                                 R"("kube-system",)"));
  EXPECT_THAT(ns->body(), testing::HasSubstr(R"("status":{"phase":"Active"})"));

  etcd->kill_and_reap();
  const auto unready = c.get("/readyz");
  ASSERT_TRUE(unready);
  EXPECT_EQ(unready->result_int(), 500u);
  EXPECT_THAT(unready->body(), testing::HasSubstr("[-]etcd failed: reason withheld\n"));
  EXPECT_THAT(unready->body(), testing::HasSubstr("[+]shutdown ok\n"));
  EXPECT_THAT(unready->body(), testing::EndsWith("readyz check failed\n"));
  const auto get = c.get("/api/v1/namespaces/kube-system");
  ASSERT_TRUE(get);
  EXPECT_EQ(get->result_int(), 500u);
  EXPECT_EQ(header(*get, http::field::retry_after), "2");
  EXPECT_EQ(get->body(),
            R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":)"
            R"("The get operation against namespaces could not be completed at this time, )"
            R"(please try again.","reason":"ServerTimeout","details":{"name":"get","kind":)"
            R"("namespaces","retryAfterSeconds":2},"code":500})"
            "\n");
  const auto grouped = c.get("/apis/apps/v1/namespaces/x/deployments/y");
  ASSERT_TRUE(grouped);
  EXPECT_EQ(grouped->result_int(), 500u);
  EXPECT_THAT(grouped->body(), testing::HasSubstr("against deployments.apps could not"));
  for (const auto* path : {"/version", "/livez", "/healthz"}) {
    const auto r = c.get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->result_int(), 200u) << path << " needs no etcd";
  }

  etcd = &sb().spawn("etcd-again", {"/bin/sleep", "600"});
  sandbox::write_file_atomically(etcd_pidfile, fmt::format("{}\n", etcd->pid()));
  const auto back = c.get("/readyz");
  ASSERT_TRUE(back);
  EXPECT_EQ(back->result_int(), 200u);
  const auto again = c.get("/api/v1/namespaces/kube-system");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->result_int(), 200u);
}

}  // namespace
}  // namespace shim_it
