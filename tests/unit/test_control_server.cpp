// The control socket (issue 23, item 1): root only, by file mode and by SO_PEERCRED; the same
// bounds as the readiness server; the socket file's life (mode, close-on-exec, a stale one
// replaced, anything else left alone, removed at stop).

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/write.hpp>
#include <fstream>
#include <sstream>
#include <variant>

#include "control_socket_test_support.hpp"
#include "http/readiness_server.hpp"

namespace shim::control_test {
namespace {

using local = asio::local::stream_protocol;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// A root client on the test's loop.
class ControlServerExchange : public ControlServerTest {
 protected:
  // Sends `raw` on a new connection and reads until the server closes it: all of its answer.
  std::string exchange(std::string_view raw) {
    local::socket socket(io);
    socket.connect(local::endpoint(socket_path.native()));
    bool written = false;
    asio::async_write(socket, asio::buffer(raw), [&](beast::error_code, std::size_t) {
      // The server's linger after a refusal then ends at this EOF.
      beast::error_code ignored;
      socket.shutdown(local::socket::shutdown_send, ignored);
      written = true;
    });
    std::string answer;
    bool closed = false;
    asio::async_read(socket, asio::dynamic_buffer(answer), [&](beast::error_code ec, std::size_t) {
      EXPECT_EQ(ec, asio::error::eof) << ec.message();
      closed = true;
    });
    EXPECT_TRUE(run_until([&] { return closed && written; })) << "the server did not close";
    return answer;
  }
};

std::string status_line(const std::string& answer) { return answer.substr(0, answer.find('\r')); }

std::string body_of(const std::string& answer) {
  const auto end = answer.find("\r\n\r\n");
  return end == std::string::npos ? "" : answer.substr(end + 4);
}

TEST_F(ControlServerExchange, ARootPeerGetsTheAnswerWithItsCredentials) {
  start();
  const std::string answer = exchange("GET /status HTTP/1.1\r\nHost: localhost\r\n\r\n");
  EXPECT_EQ(status_line(answer), "HTTP/1.1 200 OK");
  EXPECT_EQ(body_of(answer), "GET /status\n");
  ASSERT_EQ(log.size(), 1u);
  const auto* peer = std::get_if<unix_peer>(&log[0].peer);
  ASSERT_NE(peer, nullptr);
  EXPECT_EQ(peer->uid, 0u);
  EXPECT_EQ(peer->pid, ::getpid());
  EXPECT_EQ(server->refused_peers(), 0u);
}

// The uid check, with the file mode opened so that it is the check that refuses.
TEST_F(ControlServerTest, ANonRootPeerGets403AndTheConnectionCloses) {
  start();
  open_to_everyone();
  const auto path = socket_path;
  const child_result child = run_child([&] {
    become(kNobody);
    const int fd = connect_to(path);
    if (fd < 0) ::_exit(2);
    const std::string_view request = "GET /status HTTP/1.1\r\nHost: localhost\r\n\r\n";
    if (::write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
      ::_exit(3);
    }
    // Everything until the server closes: a read that fails (not EOF) exits 4.
    char buffer[4096];
    for (;;) {
      const ssize_t n = ::read(fd, buffer, sizeof buffer);
      if (n == 0) break;
      if (n < 0) ::_exit(4);
      [[maybe_unused]] auto written = ::write(STDOUT_FILENO, buffer, static_cast<std::size_t>(n));
    }
    ::_exit(0);
  });
  ASSERT_TRUE(WIFEXITED(child.status));
  EXPECT_EQ(WEXITSTATUS(child.status), 0) << "2 connect, 3 write, 4 read failed";
  EXPECT_EQ(status_line(child.output), "HTTP/1.1 403 Forbidden");
  EXPECT_THAT(child.output, HasSubstr("\r\nConnection: close\r\n"));
  EXPECT_EQ(body_of(child.output), "root only\n");
  EXPECT_TRUE(log.empty()) << "the answers were asked for a non-root peer";
  EXPECT_EQ(server->refused_peers(), 1u);
  EXPECT_EQ(server->request_counts().count(403), 1u);
}

// Without the mode opened, the file mode alone keeps the same peer out.
TEST_F(ControlServerTest, TheSocketsModeAloneKeepsANonRootPeerOut) {
  start();
  open_directory();
  const auto path = socket_path;
  const child_result child = run_child([&] {
    become(kNobody);
    ::_exit(connect_to(path) >= 0 ? 1 : errno == EACCES ? 0 : 2);
  });
  ASSERT_TRUE(WIFEXITED(child.status));
  EXPECT_EQ(WEXITSTATUS(child.status), 0) << "1: connected, 2: another error than EACCES";
}

TEST_F(ControlServerExchange, AnOversizeRequestIs431AndCloses) {
  start();
  const std::string answer = exchange("GET /status HTTP/1.1\r\nHost: localhost\r\nX-Big: " +
                                      std::string(kMaxRequestBytes, 'x') + "\r\n\r\n");
  EXPECT_EQ(status_line(answer), "HTTP/1.1 431 Request Header Fields Too Large");
  EXPECT_TRUE(log.empty());
}

TEST_F(ControlServerExchange, ARequestWithABodyIsRefused) {
  start();
  EXPECT_EQ(status_line(exchange("POST /drill HTTP/1.1\r\nHost: localhost\r\nContent-Length: "
                                 "5\r\n\r\nhello")),
            "HTTP/1.1 413 Payload Too Large");
  EXPECT_EQ(status_line(exchange("POST /drill HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: "
                                 "chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")),
            "HTTP/1.1 400 Bad Request");
  EXPECT_TRUE(log.empty());
}

TEST_F(ControlServerExchange, APostWithoutABodyIsAnswered) {
  start();
  // curl -X POST sends no Content-Length; a Content-Length of 0 is no body either.
  EXPECT_EQ(body_of(exchange("POST /drill HTTP/1.1\r\nHost: localhost\r\n\r\n")), "POST /drill\n");
  EXPECT_EQ(body_of(exchange("POST /drill?stop HTTP/1.1\r\nHost: localhost\r\nContent-Length: "
                             "0\r\n\r\n")),
            "POST /drill?stop\n");
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0].method, "POST");
  EXPECT_EQ(log[1].target, "/drill?stop");
}

TEST_F(ControlServerTest, CurlByHandPostsADrill) {
  start();
  const auto path = socket_path.string();
  const child_result child = run_child([&] {
    ::execl("/usr/bin/curl", "curl", "--silent", "--show-error", "--max-time", "10",
            "--unix-socket", path.c_str(), "-X", "POST", "http://localhost/drill", nullptr);
    ::_exit(127);
  });
  ASSERT_TRUE(WIFEXITED(child.status));
  ASSERT_NE(WEXITSTATUS(child.status), 127) << "no /usr/bin/curl (scripts/deps.sh installs it)";
  EXPECT_EQ(WEXITSTATUS(child.status), 0);
  EXPECT_EQ(child.output, "POST /drill\n");
}

// The descriptors of every socket (listening or accepted) bound to `path`, from /proc/net/unix's
// inodes and /proc/self/fd's links.
std::vector<int> descriptors_of(const std::filesystem::path& path) {
  std::vector<std::string> inodes;
  std::ifstream table("/proc/net/unix");
  for (std::string line; std::getline(table, line);) {
    std::istringstream fields(line);
    std::vector<std::string> f;
    for (std::string field; fields >> field;) f.push_back(field);
    if (f.size() == 8 && f[7] == path.string()) inodes.push_back("socket:[" + f[6] + "]");
  }
  std::vector<int> fds;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const auto target = std::filesystem::read_symlink(entry.path(), ec);
    if (ec) continue;
    if (std::find(inodes.begin(), inodes.end(), target.string()) != inodes.end()) {
      fds.push_back(std::stoi(entry.path().filename().string()));
    }
  }
  return fds;
}

TEST_F(ControlServerTest, TheSocketIsMode0600AndItsDescriptorsCloseOnExec) {
  const mode_t umask_before = ::umask(022);
  start();
  EXPECT_EQ(::umask(022), 022) << "listen() left its umask behind";
  ::umask(umask_before);
  struct stat st {};
  ASSERT_EQ(::lstat(socket_path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(st.st_uid, 0u);

  // An accepted connection too.
  local::socket client(io);
  client.connect(local::endpoint(socket_path.native()));
  run_until([&] { return descriptors_of(socket_path).size() == 2; });
  const auto fds = descriptors_of(socket_path);
  ASSERT_EQ(fds.size(), 2u) << "the listener and the accepted connection";
  for (const int fd : fds) {
    EXPECT_NE(::fcntl(fd, F_GETFD) & FD_CLOEXEC, 0) << "fd " << fd;
  }
}

TEST_F(ControlServerExchange, AStaleSocketIsReplaced) {
  {
    // A socket file nobody listens on, as a killed shim leaves it.
    local::socket stale(io);
    stale.open();
    stale.bind(local::endpoint(socket_path.native()));
  }
  ASSERT_TRUE(std::filesystem::is_socket(socket_path));
  start();
  EXPECT_EQ(body_of(exchange("GET /status HTTP/1.1\r\nHost: localhost\r\n\r\n")), "GET /status\n");
}

TEST_F(ControlServerExchange, ALiveSocketIsLeftToItsListener) {
  start();
  control_server second(io, recording_answers(log));
  try {
    second.listen(socket_path);
    ADD_FAILURE() << "a second server took the socket of a live one";
  } catch (const std::system_error& e) {
    EXPECT_THAT(e.what(), HasSubstr(socket_path.string()));
    EXPECT_THAT(e.what(), HasSubstr("another process is listening on it"));
  }
  second.stop();
  EXPECT_TRUE(std::filesystem::is_socket(socket_path));
  EXPECT_EQ(body_of(exchange("GET /status HTTP/1.1\r\nHost: localhost\r\n\r\n")), "GET /status\n");
}

TEST_F(ControlServerTest, ARegularFileAtThePathIsAnErrorAndLeftAlone) {
  std::ofstream(socket_path) << "not a socket\n";
  server = std::make_unique<control_server>(io, recording_answers(log));
  try {
    server->listen(socket_path);
    ADD_FAILURE() << "listen() took the place of a regular file";
  } catch (const std::system_error& e) {
    EXPECT_THAT(e.what(), StartsWith("control socket " + socket_path.string() + ": "));
    EXPECT_THAT(e.what(), HasSubstr("not a socket"));
  }
  server.reset();
  std::ifstream in(socket_path);
  std::string content;
  std::getline(in, content);
  EXPECT_EQ(content, "not a socket");
}

TEST_F(ControlServerTest, StopRemovesTheSocket) {
  start();
  EXPECT_EQ(server->path(), socket_path);
  server->stop();
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(socket_path)));
  EXPECT_TRUE(server->path().empty());
  server->stop();  // twice is nothing
}

TEST_F(ControlServerTest, StopLeavesASocketThatReplacedItsOwn) {
  start();
  std::filesystem::remove(socket_path);
  {
    local::socket other(io);
    other.open();
    other.bind(local::endpoint(socket_path.native()));
  }
  server->stop();
  EXPECT_TRUE(std::filesystem::is_socket(socket_path));
}

// Nothing of the control socket's routes on the network listener, nor the other way round.
TEST_F(ControlServerExchange, TheReadinessServerAndTheControlSocketShareNoRoute) {
  start();
  shim_status status;
  readiness_server readiness(io, status);
  readiness.listen({{"127.0.0.1", 0}});
  asio::ip::tcp::socket tcp(io);
  tcp.connect(readiness.endpoints().front());
  const std::string_view request =
      "POST /drill HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n";
  asio::write(tcp, asio::buffer(request));
  std::string answer;
  bool closed = false;
  asio::async_read(tcp, asio::dynamic_buffer(answer),
                   [&](beast::error_code, std::size_t) { closed = true; });
  ASSERT_TRUE(run_until([&] { return closed; }));
  EXPECT_EQ(status_line(answer), "HTTP/1.1 404 Not Found");
  EXPECT_TRUE(log.empty());
  // And /readyz on the control socket is the control answers', not the readiness server's.
  EXPECT_EQ(body_of(exchange("GET /readyz HTTP/1.1\r\nHost: localhost\r\n\r\n")), "GET /readyz\n");
  EXPECT_EQ(readiness.request_counts().count(http_handler::readyz, 200), 0u);
}

}  // namespace
}  // namespace shim::control_test
