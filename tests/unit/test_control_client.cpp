// control_request: one blocking request to the control socket, for the CLI; every way it can fail
// is one line naming the socket, and "no daemon" can be told from the rest.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <fstream>
#include <string_view>
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

// A listener planted at the socket's path, in a child: bound as root, the file then given to
// `owner`, listening as `listener` (SO_PEERCRED tells the uid that called listen()). It answers
// every connection with a perfect "ready". Killed and reaped by the destructor.
class planted_listener {
 public:
  planted_listener(const std::filesystem::path& path, uid_t owner, uid_t listener) {
    int ready[2];
    EXPECT_EQ(::pipe2(ready, O_CLOEXEC), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_un address{};
      address.sun_family = AF_UNIX;
      path.native().copy(address.sun_path, sizeof address.sun_path - 1);
      if (::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0 ||
          ::chown(path.c_str(), owner, owner) != 0 || ::chmod(path.c_str(), 0666) != 0) {
        ::_exit(125);
      }
      if (listener != 0) become(listener);
      if (::listen(fd, 8) != 0 || ::write(ready[1], "x", 1) != 1) ::_exit(124);
      constexpr std::string_view kReady =
          "HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nready\n";
      for (;;) {
        const int c = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) continue;
        [[maybe_unused]] auto n = ::write(c, kReady.data(), kReady.size());
        ::close(c);
      }
    }
    ::close(ready[1]);
    char byte = 0;
    listening_ = ::read(ready[0], &byte, 1) == 1;
    ::close(ready[0]);
  }
  ~planted_listener() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  bool listening() const { return listening_; }

 private:
  pid_t pid_ = -1;
  bool listening_ = false;
};

// Issue 35, item 9: where others may write the state directory, a socket planted by uid 65534
// made root's `status` print "ready" and `drill` a perfect result.
TEST_F(ControlClientTest, RefusesASocketFileNotOwnedByRoot) {
  planted_listener planted(socket_path, kNobody, 0);
  ASSERT_TRUE(planted.listening());
  const auto r = control_request(socket_path, "GET", "/status");
  ASSERT_FALSE(r.ok()) << "believed " << r.value().status << " " << r.value().body;
  EXPECT_EQ(r.error(), "refusing " + socket_path.string() +
                           ": it is owned by uid 65534, not by root as a shim's socket is");
  EXPECT_EQ(r.error_code(), 0);
  EXPECT_FALSE(is_no_daemon(r));
}

TEST_F(ControlClientTest, RefusesAListenerThatIsNotRoot) {
  planted_listener planted(socket_path, 0, kNobody);
  ASSERT_TRUE(planted.listening());
  const auto r = control_request(socket_path, "GET", "/status");
  ASSERT_FALSE(r.ok()) << "believed " << r.value().status << " " << r.value().body;
  EXPECT_THAT(r.error(), StartsWith("refusing " + socket_path.string() +
                                    ": the process listening on it (PID "));
  EXPECT_THAT(r.error(), HasSubstr("runs as uid 65534, not root"));
}

TEST_F(ControlClientTest, RefusesWhatIsNotASocket) {
  std::ofstream(socket_path) << "HTTP/1.1 200 OK\r\n";
  const auto r = control_request(socket_path, "GET", "/status");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error(), StartsWith("refusing " + socket_path.string() + ": it is not a socket"));
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
