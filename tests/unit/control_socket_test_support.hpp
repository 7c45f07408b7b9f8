// What the control socket's tests share: a private directory for the socket, answers that say what
// they were asked, and children (another uid, curl, the client) whose output is read on the loop
// while the server answers them.

#pragma once

#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/read.hpp>
#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "http/control_server.hpp"
#include "http/http_answer.hpp"
#include "run_until.hpp"

namespace shim::control_test {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using namespace std::chrono_literals;

inline constexpr uid_t kNobody = 65534;

// A directory of its own, removed at the end.
struct temp_dir {
  temp_dir() {
    char tmpl[] = "/tmp/control-socket-test.XXXXXX";
    const char* made = ::mkdtemp(tmpl);
    if (made == nullptr) throw std::runtime_error("mkdtemp");
    path = made;
  }
  ~temp_dir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  std::filesystem::path path;
};

// What the answers were asked.
struct asked {
  std::string method;
  std::string target;
  http_peer peer;
};

// Answers "METHOD TARGET" with 200 and closes; records each request.
inline http_answers recording_answers(std::vector<asked>& log) {
  return {
      .respond =
          [&log](const http_request& request, const http_peer& peer, http_request_counts& counts,
                 std::string& out) {
            log.push_back(
                {std::string(request.method_string()), std::string(request.target()), peer});
            counts.add(http_handler::other, 200);
            append_closing_answer(
                http::status::ok,
                std::string(request.method_string()) + " " + std::string(request.target()) + "\n",
                out);
            return false;
          },
      .refuse = [](http::status code, http_request_counts& counts,
                   std::string& out) { append_refusal(code, counts, out); },
  };
}

// In a child: become `uid` (and its group, no supplementary groups) for good.
inline void become(uid_t uid) {
  if (::setgroups(0, nullptr) != 0 || ::setresgid(uid, uid, uid) != 0 ||
      ::setresuid(uid, uid, uid) != 0) {
    ::_exit(126);
  }
}

struct child_result {
  std::string output;  // what it wrote to its stdout
  int status = -1;     // waitpid's
};

class ControlServerTest : public ::testing::Test {
 protected:
  bool run_until(const std::function<bool()>& done) { return shim::run_until(io, done); }

  void start(http_limits limits = {}) {
    server = std::make_unique<control_server>(io, recording_answers(log), limits);
    server->listen(socket_path);
  }

  // Forks a child that runs `body` with its stdout on a pipe, and runs the loop (the server
  // answering it) until the child has closed the pipe; then reaps it.
  child_result run_child(const std::function<void()>& body) {
    int fds[2];
    EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::dup2(fds[1], STDOUT_FILENO);
      body();
      ::_exit(0);
    }
    ::close(fds[1]);
    child_result out;
    asio::posix::stream_descriptor pipe(io, fds[0]);
    bool done = false;
    asio::async_read(pipe, asio::dynamic_buffer(out.output),
                     [&](beast::error_code, std::size_t) { done = true; });
    EXPECT_TRUE(run_until([&] { return done; })) << "the child never finished";
    ::waitpid(pid, &out.status, 0);
    return out;
  }

  // In a child: a connected socket to `path`, or -1 with errno.
  static int connect_to(const std::filesystem::path& path) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    path.native().copy(address.sun_path, sizeof address.sun_path - 1);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) return -1;
    return fd;
  }

  // Lets another uid reach the socket file, whose own mode still keeps it out.
  void open_directory() {
    std::filesystem::permissions(
        dir.path, std::filesystem::perms::owner_all | std::filesystem::perms::others_exec);
  }

  // Lets another uid connect, so that the uid check, not the file mode, is what refuses it: the
  // mode alone already would (connect() needs write permission on the socket file).
  void open_to_everyone() {
    open_directory();
    std::filesystem::permissions(socket_path, std::filesystem::perms::all);
  }

  asio::io_context io;
  temp_dir dir;
  std::filesystem::path socket_path = dir.path / "control.sock";
  std::vector<asked> log;
  std::unique_ptr<control_server> server;
};

}  // namespace shim::control_test
