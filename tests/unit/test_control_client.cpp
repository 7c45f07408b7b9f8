// control_request: one blocking request to the control socket, for the CLI; every way it can fail
// is one line naming the socket, and "no daemon" can be told from the rest.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <thread>

#include "control_socket_test_support.hpp"
#include "http/control_client.hpp"

namespace shim::control_test {
namespace {

using local = asio::local::stream_protocol;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// A peer on a thread of its own, since the client blocks: `serve` gets each accepted connection.
class blocking_peer {
 public:
  blocking_peer(const std::filesystem::path& path, std::function<void(local::socket&)> serve)
      : acceptor_(io_, local::endpoint(path.native())), thread_([this, serve = std::move(serve)] {
          local::socket socket(io_);
          beast::error_code ec;
          acceptor_.accept(socket, ec);
          if (!ec) serve(socket);
        }) {}
  ~blocking_peer() { thread_.join(); }

 private:
  asio::io_context io_;
  local::acceptor acceptor_;
  std::thread thread_;
};

class ControlClientTest : public ControlServerTest {};

TEST_F(ControlClientTest, NoSocketIsNoDaemon) {
  const auto r = control_request(socket_path, "GET", "/status");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), "no shutdown-shim is listening on " + socket_path.string() +
                           ": No such file or directory");
  EXPECT_EQ(r.error_code(), ENOENT);
  EXPECT_TRUE(is_no_daemon(r));
}

TEST_F(ControlClientTest, AStaleSocketIsNoDaemon) {
  local::socket stale(io);
  stale.open();
  stale.bind(local::endpoint(socket_path.native()));  // bound, never listening: refused
  const auto r = control_request(socket_path, "GET", "/status");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error(), StartsWith("no shutdown-shim is listening on " + socket_path.string()));
  EXPECT_THAT(r.error(), HasSubstr("Connection refused"));
  EXPECT_EQ(r.error_code(), ECONNREFUSED);
  EXPECT_TRUE(is_no_daemon(r));
}

TEST_F(ControlClientTest, APeerThatClosesWithoutAnAnswerIsAnError) {
  blocking_peer peer(socket_path, [](local::socket& s) { s.close(); });
  const auto r = control_request(socket_path, "GET", "/status");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error(), StartsWith("the shim on " + socket_path.string() +
                                    " closed the connection without a whole answer: "));
  EXPECT_FALSE(is_no_daemon(r));
}

// The CLI's exit code follows the errno, never the words (issue 34: it matched a prefix).
TEST(ControlClient, NoDaemonIsReadFromTheErrnoNotTheWords) {
  using R = result<control_answer>;
  EXPECT_FALSE(is_no_daemon(R::failure("no shutdown-shim is listening on /run/x.sock: refused")));
  EXPECT_TRUE(is_no_daemon(R::errno_failure(ECONNREFUSED, "connect to /run/x.sock")));
  EXPECT_FALSE(is_no_daemon(R::errno_failure(EACCES, "connect to /run/x.sock")));
  EXPECT_FALSE(is_no_daemon(R::success({})));
}

TEST_F(ControlClientTest, APeerThatNeverAnswersTimesOut) {
  // Listening, never accepting: the connection completes from the listen queue.
  local::acceptor silent(io, local::endpoint(socket_path.native()));
  const auto started = std::chrono::steady_clock::now();
  const auto r = control_request(socket_path, "GET", "/status", {.timeout = 200ms});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), "no answer on " + socket_path.string() + " within 200 ms");
  EXPECT_GE(std::chrono::steady_clock::now() - started, 200ms);
}

// Announced by its Content-Length, or read until the peer closes: refused at the bound.
TEST_F(ControlClientTest, AnOversizeAnswerIsRefused) {
  for (const std::string head : {"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n",
                                 "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n"}) {
    SCOPED_TRACE(head);
    std::filesystem::remove(socket_path);
    blocking_peer peer(socket_path, [&head](local::socket& s) {
      const std::string answer = head + std::string(5000, 'x');
      beast::error_code ignored;
      asio::write(s, asio::buffer(answer), ignored);  // the client may close first
    });
    const auto r = control_request(socket_path, "GET", "/status", {.max_answer_bytes = 4096});
    ASSERT_FALSE(r.ok()) << r.value().status << " with " << r.value().body.size() << " bytes";
    EXPECT_THAT(r.error(), StartsWith("the answer on " + socket_path.string() + " is too large: "));
  }
}

TEST_F(ControlClientTest, ABadRequestLineIsRefusedBeforeConnecting) {
  EXPECT_FALSE(control_request(socket_path, "GET", "/a b").ok());
  EXPECT_FALSE(control_request(socket_path, "GET", "/a\r\nX: y").ok());
  EXPECT_FALSE(control_request(socket_path, "", "/status").ok());
}

// As another uid, in a child, with the server on this loop: what the client says.
class ControlClientAsNobody : public ControlClientTest {
 protected:
  // `past_the_mode`: the socket file opened to every uid, so that the server's uid check is what
  // refuses; else only the directory is, and the file mode refuses.
  std::string said_as_nobody(bool past_the_mode) {
    start();
    if (past_the_mode) {
      open_to_everyone();
    } else {
      open_directory();
    }
    const auto path = socket_path;
    const child_result child = run_child([&] {
      become(kNobody);
      const auto r = control_request(path, "GET", "/status");
      const std::string said =
          r.ok() ? std::to_string(r.value().status) + " " + r.value().body : r.error();
      [[maybe_unused]] auto n = ::write(STDOUT_FILENO, said.data(), said.size());
    });
    EXPECT_TRUE(WIFEXITED(child.status) && WEXITSTATUS(child.status) == 0) << child.status;
    return child.output;
  }
};

TEST_F(ControlClientAsNobody, IsToldTheSocketIsRoots) {
  EXPECT_EQ(said_as_nobody(false),
            "the control socket " + socket_path.string() + " is root's: Permission denied");
}

// Past the file mode, the server's refusal is an answer like any other: the CLI says it.
TEST_F(ControlClientAsNobody, GetsTheServersRefusalAsAnAnswer) {
  EXPECT_EQ(said_as_nobody(true), "403 root only\n");
}

// The real server, in this process: the client blocks, so the server runs on a thread.
class ControlClientAndServer : public ControlClientTest {
 protected:
  void SetUp() override {
    start();
    work_.emplace(io.get_executor());
    loop_ = std::thread([this] { io.run(); });
  }
  void TearDown() override {
    work_.reset();
    asio::post(io, [this] { server->stop(); });
    loop_.join();
  }

 private:
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  std::thread loop_;
};

TEST_F(ControlClientAndServer, GetsTheStatusAndTheBody) {
  const auto r = control_request(socket_path, "GET", "/status");
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r.value().status, 200u);
  EXPECT_EQ(r.value().body, "GET /status\n");
  const auto post = control_request(socket_path, "POST", "/drill");
  ASSERT_TRUE(post.ok()) << post.error();
  EXPECT_EQ(post.value().body, "POST /drill\n");
}

}  // namespace
}  // namespace shim::control_test
