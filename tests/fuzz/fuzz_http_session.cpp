// http_session: the readiness server's real session code, on one end of a socket pair, fed the
// input in the pieces the input itself chooses, each arriving in a read of its own as a socket
// would deliver it. Whatever comes in, nothing asserts (this target's copy of the server is built
// with assertions on), the heap never holds more than a bound for one connection (the request
// limit, the largest answer and the session's own objects), and the session is gone once the
// client has closed.
//
// Input: a sequence of pieces, each a 2-byte little-endian length and that many bytes (fewer if the
// input ends first). A length of 0 half-closes the client's side (EOF for the server).
#include <fcntl.h>
#include <sanitizer/allocator_interface.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string_view>

#include "http/http_answer.hpp"
#include "http/http_connections.hpp"
#include "http/http_session.hpp"
#include "http/prometheus_metrics.hpp"
#include "readiness/shim_status.hpp"

namespace {

namespace asio = boost::asio;

// What one connection may hold besides its answer: the request buffer (the request limit) and
// 4 KiB for the session's own objects (socket, timer, parser, pending handlers; 1.6 KiB measured).
// A session that kept what it reads would pass it with the 32 KiB of the endless trailer and chunk
// extension seeds, which also set libFuzzer's input size limit.
constexpr std::size_t kHeapBound = shim::kMaxRequestBytes + 4 * 1024;

void settle(asio::io_context& io) {
  io.restart();
  while (io.poll() != 0) io.restart();
}

// Reads (and drops) what the server has written so far.
void drain(int fd) {
  char sink[16 * 1024];
  while (::read(fd, sink, sizeof sink) > 0) {
  }
}

// `answer`: the largest answer the session may be holding, /metrics with its head.
void check_heap(std::size_t baseline, std::size_t answer) {
  const std::size_t now = __sanitizer_get_current_allocated_bytes();
  const std::size_t bound = kHeapBound + answer;
  if (now > baseline && now - baseline > bound) {
    std::fprintf(stderr, "heap grew by %zu bytes for one connection (bound %zu)\n", now - baseline,
                 bound);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, fds) != 0) std::abort();
  const int client = fds[1];

  asio::io_context io(1);
  shim::shim_status status;
  status.listener_bound = true;
  status.logind.inhibitor = shim::logind_row::inhibitor_state::held;
  auto connections = std::make_shared<shim::http_connections>(io, shim::http_limits{},
                                                              shim::readiness_answers(status));
  // The largest answer, /metrics with its head. Rendered once: it reads /proc, and rendering it
  // at each step took the target from about 2,800 inputs a second to 70. Every input starts from
  // this state; 1 KiB covers what its counters and process figures may grow by.
  static const std::size_t kLargestAnswer =
      shim::render_metrics(status, connections->counts()).size() + 1024;
  const std::size_t baseline = __sanitizer_get_current_allocated_bytes();
  {
    // A stream socket is what the session reads; Asio does not look at its address family.
    using session = shim::http_session<asio::ip::tcp>;
    session::socket_type socket(io);
    socket.assign(asio::ip::tcp::v4(), fds[0]);
    std::make_shared<session>(connections, std::move(socket), shim::tcp_peer{})->start();
  }
  settle(io);

  std::string_view input(reinterpret_cast<const char*>(data), size);
  bool open = true;
  while (open && input.size() >= 2) {
    const std::size_t length = static_cast<std::uint8_t>(input[0]) |
                               static_cast<std::size_t>(static_cast<std::uint8_t>(input[1])) << 8;
    input.remove_prefix(2);
    if (length == 0) {
      ::shutdown(client, SHUT_WR);
      settle(io);
      break;
    }
    std::string_view piece = input.substr(0, length);
    input.remove_prefix(piece.size());
    while (!piece.empty()) {
      const ssize_t n = ::send(client, piece.data(), piece.size(), MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN) {
        open = false;  // the server has closed
        break;
      }
      if (n > 0) piece.remove_prefix(static_cast<std::size_t>(n));
      settle(io);
      drain(client);
      check_heap(baseline, kLargestAnswer);
    }
  }
  drain(client);
  ::close(client);
  settle(io);
  if (!connections->empty()) {
    std::fprintf(stderr, "the session outlived its client\n");
    std::abort();
  }
  connections->close_all();
  return 0;
}
