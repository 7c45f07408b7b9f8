// What the load balancer's measurement costs the shim (issue 23, item 4): nanoseconds per
// health_checker_watch::record(), which runs on every /readyz answer, and the wall and CPU time of
// one new_connection_sampler sample with n connections open to the port (and as many to another
// port, which the kernel filters out), and the longest a 1 ms timer on the same loop was late
// during the samples: how long an answer to /readyz could wait behind one (issue 35, item 5).
// Prints a markdown table; asserts nothing.
//   bench_lb [--records=N] [--samples=N] [--connections=N,N,...]
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/core.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lb/health_checker_watch.hpp"
#include "lb/new_connection_sampler.hpp"

namespace {

using namespace std::chrono_literals;
using clock = std::chrono::steady_clock;
using boost::asio::ip::tcp;

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// ns per record() from `addresses` peers in turn (the last of the table probing most: the
// longest scan), with or without a drill begun.
double record_ns(std::size_t addresses, bool begun, long records) {
  shim::health_checker_watch w;
  std::vector<shim::health_checker_watch::address> from;
  for (std::size_t i = 0; i < addresses; ++i) {
    from.push_back(boost::asio::ip::make_address("10.0." + std::to_string(i / 200) + "." +
                                                 std::to_string(i % 200 + 1)));
  }
  auto at = clock::time_point{} + 1000s;
  for (const auto& a : from) w.record(a, at, true);
  if (begun) w.begin(at + 1ms, 3);
  const auto start = clock::now();
  for (long i = 0; i < records; ++i) {
    at += 1ms;
    w.record(from[addresses - 1 - static_cast<std::size_t>(i) % addresses], at, !begun);
  }
  const auto elapsed = clock::now() - start;
  if (w.addresses() != addresses) std::abort();  // and keeps the loop from being optimized out
  return std::chrono::duration<double, std::nano>(elapsed).count() / static_cast<double>(records);
}

struct sample_cost {
  double wall_us;
  double cpu_us;
  double late_max_us;  // the longest a 1 ms timer waited behind the samples
  double late_p99_us;
};

// A 1 ms timer on the loop, re-armed at each expiry: how late each expiry ran.
class lateness_probe {
 public:
  explicit lateness_probe(boost::asio::io_context& io) : timer_(io) { arm(); }
  void stop() {
    stopped_ = true;
    timer_.cancel();
  }
  std::vector<double>& late_us() { return late_us_; }

 private:
  void arm() {
    timer_.expires_after(1ms);
    timer_.async_wait([this](const boost::system::error_code& ec) {
      if (ec || stopped_) return;
      late_us_.push_back(
          std::chrono::duration<double, std::micro>(clock::now() - timer_.expiry()).count());
      arm();
    });
  }
  boost::asio::steady_timer timer_;
  std::vector<double> late_us_;
  bool stopped_ = false;
};

// Connections held open by child processes: 30k of them to each of two ports take 120k
// descriptors, more than one process may have here (a hard limit of 20,000 and no
// CAP_SYS_RESOURCE). The kernel's socket table is the network namespace's, whoever holds them.
class connection_holders {
 public:
  static constexpr std::size_t kPerChild = 4000;  // 16,000 descriptors: both ends, both ports

  connection_holders(const tcp::acceptor& target, const tcp::acceptor& other, std::size_t n) {
    int stop[2];
    if (::pipe2(stop, O_CLOEXEC) != 0) fail("pipe2");
    stop_ = stop[1];
    for (std::size_t first = 0; first < n; first += kPerChild) {
      int ready[2];
      if (::pipe2(ready, O_CLOEXEC) != 0) fail("pipe2");
      const pid_t pid = ::fork();
      if (pid < 0) fail("fork");
      if (pid == 0) {
        ::close(stop[1]);
        ::close(ready[0]);
        hold(target, other, first, std::min(kPerChild, n - first), ready[1], stop[0]);
      }
      children_.push_back(pid);
      ::close(ready[1]);
      char byte = 0;
      const bool up = ::read(ready[0], &byte, 1) == 1;
      ::close(ready[0]);
      if (!up) fail("a child could not open its connections");
    }
    ::close(stop[0]);
  }
  ~connection_holders() {
    ::close(stop_);  // end of file: the children exit
    for (pid_t pid : children_) ::waitpid(pid, nullptr, 0);
  }

 private:
  [[noreturn]] static void fail(const char* what) {
    std::perror(what);
    std::exit(1);
  }
  // In the child: connections first..first+count to both ports, from 127.0.0.2, .3, ... (one
  // source address has fewer ephemeral ports than 30k connections), both ends kept open.
  [[noreturn]] static void hold(const tcp::acceptor& target, const tcp::acceptor& other,
                                std::size_t first, std::size_t count, int ready, int stop) {
    for (std::size_t i = first; i < first + count; ++i) {
      for (const tcp::acceptor* to : {&target, &other}) {
        sockaddr_in from{.sin_family = AF_INET, .sin_port = 0, .sin_addr = {}, .sin_zero = {}};
        from.sin_addr.s_addr = htonl(0x7f000002u + static_cast<std::uint32_t>(i / 10000));
        sockaddr_in at = from;
        at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        at.sin_port = htons(to->local_endpoint().port());
        const int c = ::socket(AF_INET, SOCK_STREAM, 0);
        // Reset at exit, not closed: 60k sockets in TIME_WAIT would be walked by the next run's
        // samples (5.4 ms a sample with no connection open, 1.4 ms without them).
        const linger reset{.l_onoff = 1, .l_linger = 0};
        if (c < 0 || ::setsockopt(c, SOL_SOCKET, SO_LINGER, &reset, sizeof reset) != 0 ||
            ::bind(c, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0 ||
            ::connect(c, reinterpret_cast<sockaddr*>(&at), sizeof at) != 0 ||
            ::accept(const_cast<tcp::acceptor*>(to)->native_handle(), nullptr, nullptr) < 0) {
          std::perror("a held connection");
          ::_exit(1);
        }
      }
    }
    char byte = 1;
    if (::write(ready, &byte, 1) != 1) ::_exit(1);
    while (::read(stop, &byte, 1) < 0 && errno == EINTR) {
    }
    ::_exit(0);
  }

  int stop_ = -1;
  std::vector<pid_t> children_;
};

// A listener on a port below the ephemeral range (32768 and up): a client's ephemeral port on
// 127.0.0.2 may be the listener's number on 127.0.0.1, and would count as one of its sockets.
tcp::acceptor listener_below_ephemeral_ports(boost::asio::io_context& io) {
  for (std::uint16_t port = 20000; port < 32768; ++port) {
    tcp::acceptor a(io);
    boost::system::error_code ec;
    a.open(tcp::v4());
    a.bind(tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), port), ec);
    if (ec) continue;
    a.listen(4096);
    return a;
  }
  std::fprintf(stderr, "no free port below 32768\n");
  std::exit(1);
}

sample_cost sample_us(std::size_t connections, int samples) {
  boost::asio::io_context io;
  tcp::acceptor target = listener_below_ephemeral_ports(io);
  tcp::acceptor other = listener_below_ephemeral_ports(io);
  const connection_holders held(target, other, connections);
  shim::new_connection_sampler s(io, target.local_endpoint().port());
  const auto cpu = cpu_seconds();
  const auto start = clock::now();
  lateness_probe probe(io);
  for (int i = 0; i < samples; ++i) {
    std::optional<shim::result<shim::new_connection_sampler::counts>> got;
    s.sample([&](auto r) { got.emplace(std::move(r)); });
    io.restart();
    while (!got && io.run_one() > 0) {
    }
    if (!got || !got->ok() || got->value().open != connections) {
      std::fprintf(stderr, "sample failed: %s\n",
                   !got ? "no answer"
                   : !got->ok()
                       ? got->error().c_str()
                       : fmt::format("{} sockets open, {} expected", got->value().open, connections)
                             .c_str());
      std::exit(1);
    }
  }
  const double n = samples;
  const double wall_us = std::chrono::duration<double, std::micro>(clock::now() - start).count();
  const double cpu_us = (cpu_seconds() - cpu) * 1e6;
  probe.stop();
  auto& late = probe.late_us();
  std::sort(late.begin(), late.end());
  const auto at = [&late](double q) {
    return late.empty() ? 0.0
                        : late[static_cast<std::size_t>(q * static_cast<double>(late.size() - 1))];
  };
  return {.wall_us = wall_us / n,
          .cpu_us = cpu_us / n,
          .late_max_us = at(1.0),
          .late_p99_us = at(0.99)};
}

long flag(int argc, char** argv, std::string_view name, long fallback) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.starts_with(name) && arg.size() > name.size() && arg[name.size()] == '=') {
      return std::atol(argv[i] + name.size() + 1);
    }
  }
  return fallback;
}

std::vector<std::size_t> connection_counts(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (!arg.starts_with("--connections=")) continue;
    arg.remove_prefix(14);
    std::vector<std::size_t> out;
    while (!arg.empty()) {
      out.push_back(std::strtoul(std::string(arg.substr(0, arg.find(','))).c_str(), nullptr, 10));
      arg.remove_prefix(std::min(
          arg.size(), arg.find(',') == std::string_view::npos ? arg.size() : arg.find(',') + 1));
    }
    return out;
  }
  return {0, 100, 1000, 5000};
}

}  // namespace

int main(int argc, char** argv) {
  const long records = flag(argc, argv, "--records", 20'000'000);
  const int samples = static_cast<int>(flag(argc, argv, "--samples", 200));
  std::setvbuf(stdout, nullptr, _IONBF, 0);

  std::printf("| health_checker_watch::record() | ns |\n| --- | --- |\n");
  for (std::size_t addresses : {3u, 64u}) {
    for (bool begun : {false, true}) {
      std::printf("| %zu addresses%s | %.1f |\n", addresses, begun ? ", a drill begun" : "",
                  record_ns(addresses, begun, records));
    }
  }
  std::printf(
      "\n| one sample, n connections to the port (+ n to another) | wall us | CPU us | "
      "1 ms timer late, p99 us | max us |\n"
      "| --- | --- | --- | --- | --- |\n");
  for (std::size_t n : connection_counts(argc, argv)) {
    const auto c = sample_us(n, samples);
    std::printf("| %zu | %.1f | %.1f | %.0f | %.0f |\n", n, c.wall_us, c.cpu_us, c.late_p99_us,
                c.late_max_us);
  }
}
