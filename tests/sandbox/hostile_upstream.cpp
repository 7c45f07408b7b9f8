// Whatever may answer on the upstream port instead of kube-apiserver (issue 18, item 2): with an
// http:// URL or --upstream-insecure-skip-verify, an unprivileged user who binds the port while
// kube-apiserver is down. Plain HTTP on 127.0.0.1; every connection gets the same answer to its
// first request:
//   --answer=huge-length   200 with "Content-Length: 1099511627776" and two bytes of body (the
//                          answer that ended the shim in std::bad_alloc), then the connection open
//   --answer=stream        200 announcing 100 MiB, then the 100 MiB as fast as the peer reads them
//                          (what raised the shim's high-water mark by 64 MiB)
//   --answer=stream-unannounced  the same without a Content-Length: the body ends at the close
//   --answer=huge-header   200 whose header block goes on for 1 MiB
//   --answer=ok            200 "ok" and Connection: close: the same probing, answered well (the
//                          tests' baseline)
// hostile_upstream --answer=KIND --port-file=PATH [--connection-log=PATH]
// The port (chosen by the kernel) is written to --port-file once it listens; --connection-log gets
// "ACCEPTED monotonic_us" per connection (sandbox::read_timed_lines). Exit 0 on SIGTERM.

#include <fmt/core.h>
#include <signal.h>
#include <time.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>

namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

constexpr std::size_t kStreamBytes = 100 * 1024 * 1024;
constexpr std::size_t kChunk = 64 * 1024;
constexpr std::size_t kHeaderBytes = 1024 * 1024;
// A request head from the shim is a few hundred bytes.
constexpr std::size_t kMaxRequest = 16 * 1024;

std::uint64_t monotonic_us() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000 +
         static_cast<std::uint64_t>(ts.tv_nsec) / 1000;
}

struct options {
  std::string answer;
  std::string port_file;
  std::string connection_log;
};

class session : public std::enable_shared_from_this<session> {
 public:
  session(tcp::socket socket, const options& o)
      : socket_(std::move(socket)), opts_(o), request_(kMaxRequest) {}

  void start() {
    asio::async_read_until(socket_, request_, "\r\n\r\n",
                           [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                             if (!ec) self->answer();
                           });
  }

 private:
  void answer() {
    if (opts_.answer == "ok") {
      head_ = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
    } else if (opts_.answer == "huge-length") {
      head_ = "HTTP/1.1 200 OK\r\nContent-Length: 1099511627776\r\n\r\nok";
    } else if (opts_.answer == "stream") {
      head_ = fmt::format("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", kStreamBytes);
    } else if (opts_.answer == "stream-unannounced") {
      head_ = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n";
    } else {
      head_ = "HTTP/1.1 200 OK\r\nX-Padding: " + std::string(kHeaderBytes, 'x') + "\r\n\r\n";
    }
    asio::async_write(socket_, asio::buffer(head_),
                      [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                        if (ec) return;
                        if (self->opts_.answer.starts_with("stream")) return self->stream();
                        self->hold();
                      });
  }

  void stream() {
    if (sent_ >= kStreamBytes) return;
    chunk_.assign(kChunk, 'x');
    asio::async_write(socket_, asio::buffer(chunk_),
                      [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
                        if (ec) return;
                        self->sent_ += n;
                        self->stream();
                      });
  }

  // Keeps the connection until the peer goes: the shim must give up on its own bounds.
  void hold() {
    socket_.async_read_some(asio::buffer(sink_),
                            [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                              if (!ec) self->hold();
                            });
  }

  tcp::socket socket_;
  const options& opts_;
  asio::streambuf request_;
  std::string head_, chunk_;
  std::size_t sent_ = 0;
  char sink_[4096];
};

void accept(tcp::acceptor& acceptor, const options& o) {
  acceptor.async_accept([&acceptor, &o](boost::system::error_code ec, tcp::socket socket) {
    if (ec) return;
    if (!o.connection_log.empty()) {
      std::ofstream(o.connection_log, std::ios::app) << "ACCEPTED " << monotonic_us() << "\n";
    }
    std::make_shared<session>(std::move(socket), o)->start();
    accept(acceptor, o);
  });
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a(argv[i]);
    if (a.starts_with("--answer=")) {
      o.answer = a.substr(9);
    } else if (a.starts_with("--port-file=")) {
      o.port_file = a.substr(12);
    } else if (a.starts_with("--connection-log=")) {
      o.connection_log = a.substr(17);
    } else {
      fmt::print(stderr, "hostile_upstream: unknown argument {}\n", a);
      return 2;
    }
  }
  if ((o.answer != "huge-length" && o.answer != "stream" && o.answer != "stream-unannounced" &&
       o.answer != "huge-header" && o.answer != "ok") ||
      o.port_file.empty()) {
    fmt::print(
        stderr,
        "usage: hostile_upstream --answer=huge-length|stream|stream-unannounced|huge-header|ok "
        "--port-file=PATH [--connection-log=PATH]\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  asio::io_context io(1);
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  asio::signal_set signals(io, SIGTERM, SIGINT);
  signals.async_wait([&](boost::system::error_code, int) { io.stop(); });
  {
    const std::string temp = o.port_file + ".tmp";
    std::ofstream(temp) << acceptor.local_endpoint().port() << "\n";
    std::rename(temp.c_str(), o.port_file.c_str());
  }
  accept(acceptor, o);
  io.run();
  return 0;
}
