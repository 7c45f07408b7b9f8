#include "http/control_client.hpp"

#include <fmt/format.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cerrno>
#include <cstdint>
#include <optional>
#include <utility>

#include "util/errno_error.hpp"

namespace shim {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using local = asio::local::stream_protocol;

namespace {

// The answer's head at most: status line and fields, which the shim keeps to a few lines.
constexpr std::size_t kMaxControlAnswerHead = 16 * 1024;

// Method and target go into the request line as they are: no byte that would end or split it.
bool fits_request_line(std::string_view text) {
  return !text.empty() && std::none_of(text.begin(), text.end(), [](char c) {
    return static_cast<unsigned char>(c) <= ' ' || c == '\x7f';
  });
}

int errno_of(const beast::error_code& ec) {
  return ec.category() == boost::system::system_category() ? ec.value() : 0;
}

std::string failure_text(const std::filesystem::path& socket_path, const beast::error_code& ec,
                         std::string_view step) {
  const std::string where = socket_path.string();
  const int error = errno_of(ec);
  // No socket file, or one that nothing listens on (a shim that was killed).
  if (error == ENOENT || error == ECONNREFUSED) {
    return "no shutdown-shim is listening on " + where + ": " + ec.message();
  }
  if (error == EACCES || error == EPERM) {
    return "the control socket " + where + " is root's: " + ec.message();
  }
  if (ec == http::error::body_limit || ec == http::error::header_limit ||
      ec == http::error::buffer_overflow) {
    return "the answer on " + where + " is too large: " + ec.message();
  }
  if (ec == http::error::end_of_stream || ec == http::error::partial_message ||
      ec == asio::error::eof || ec == asio::error::connection_reset) {
    return "the shim on " + where +
           " closed the connection without a whole answer: " + ec.message();
  }
  return std::string(step) + " on " + where + ": " + ec.message();
}

// Why what listens at `socket_path` may not speak for a shim, which is root's (issue 35, item 9: a
// socket planted where others may write made root's `status` print "ready"); nullopt when it may.
// The file is checked before the connect, the listener's uid (SO_PEERCRED) after it.
std::optional<std::string> not_roots_file(const std::filesystem::path& socket_path) {
  struct stat st {};
  if (::lstat(socket_path.c_str(), &st) != 0) return std::nullopt;  // the connect says why
  if (!S_ISSOCK(st.st_mode)) {
    return fmt::format("refusing {}: it is not a socket (mode {:o})", socket_path.string(),
                       st.st_mode);
  }
  if (st.st_uid != 0) {
    return fmt::format("refusing {}: it is owned by uid {}, not by root as a shim's socket is",
                       socket_path.string(), st.st_uid);
  }
  return std::nullopt;
}

std::optional<std::string> not_roots_listener(const std::filesystem::path& socket_path, int fd) {
  ucred peer{};
  socklen_t size = sizeof peer;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0) {
    return fmt::format("refusing {}: SO_PEERCRED: {}", socket_path.string(),
                       errno_text(errno, "getsockopt"));
  }
  if (peer.uid != 0) {
    return fmt::format("refusing {}: the process listening on it (PID {}) runs as uid {}, not root",
                       socket_path.string(), peer.pid, peer.uid);
  }
  return std::nullopt;
}

}  // namespace

bool is_no_daemon(const result<control_answer>& failed) {
  return !failed && (failed.error_code() == ENOENT || failed.error_code() == ECONNREFUSED);
}

result<control_answer> control_request(const std::filesystem::path& socket_path,
                                       std::string_view method, std::string_view target,
                                       control_client_limits limits) {
  using R = result<control_answer>;
  if (!fits_request_line(method) || !fits_request_line(target)) {
    return R::failure("not a request line: '" + std::string(method) + " " + std::string(target) +
                      "'");
  }
  // A loop of its own, run for the timeout: asio's blocking reads would wait without bound.
  asio::io_context io(1);
  local::socket socket(io);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.header_limit(static_cast<std::uint32_t>(kMaxControlAnswerHead));
  parser.body_limit(limits.max_answer_bytes);
  std::string request = std::string(method) + " " + std::string(target) +
                        " HTTP/1.1\r\nHost: localhost\r\nUser-Agent: shutdown-shim\r\n"
                        "Connection: close\r\n\r\n";
  std::optional<R> failed;
  bool done = false;
  auto fail_with = [&](R failure) {
    failed = std::move(failure);
    done = true;
  };
  auto fail = [&](const beast::error_code& ec, std::string_view step) {
    fail_with(R::failure(failure_text(socket_path, ec, step), errno_of(ec)));
  };

  local::endpoint endpoint;
  try {
    endpoint = local::endpoint(socket_path.native());
  } catch (const boost::system::system_error& e) {
    return R::failure("control socket " + socket_path.string() + ": " + e.code().message(),
                      errno_of(e.code()));
  }
  // Close-on-exec from the start: not inherited by whatever the CLI may run.
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return R::errno_failure(errno, "socket for " + socket_path.string());
  socket.assign(local(), fd);
  if (auto why = not_roots_file(socket_path)) return R::failure(std::move(*why));
  socket.async_connect(endpoint, [&](beast::error_code ec) {
    if (ec) return fail(ec, "connect");
    if (auto why = not_roots_listener(socket_path, socket.native_handle())) {
      return fail_with(R::failure(std::move(*why)));
    }
    asio::async_write(socket, asio::buffer(request), [&](beast::error_code, std::size_t) {
      // Read even when the write failed: a peer that answered before it read the request (a
      // refusal) and closed is still to be heard. The head first: Beast 1.74's http::async_read
      // loses the body_limit error of a Content-Length over the limit and reads the whole body.
      http::async_read_header(socket, buffer, parser, [&](beast::error_code ec, std::size_t) {
        if (ec) return fail(ec, "read");
        http::async_read(socket, buffer, parser, [&](beast::error_code ec, std::size_t) {
          if (ec) return fail(ec, "read");
          done = true;
        });
      });
    });
  });
  io.run_for(limits.timeout);
  if (!done) {
    return R::failure("no answer on " + socket_path.string() + " within " +
                      std::to_string(limits.timeout.count()) + " ms");
  }
  if (failed) return *failed;
  auto message = parser.release();
  return R::success({.status = message.result_int(), .body = std::move(message.body())});
}

}  // namespace shim
