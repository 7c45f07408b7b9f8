// What the load balancer's measurement costs the shim (issue 23, item 4): nanoseconds per
// health_checker_watch::record(), which runs on every /readyz answer, and the wall and CPU time of
// one new_connection_sampler sample with n connections open to the port (and as many to another
// port, which the kernel filters out). Prints a markdown table; asserts nothing.
//   bench_lb [--records=N] [--samples=N] [--connections=N,N,...]
#include <sys/resource.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <list>
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
};

sample_cost sample_us(std::size_t connections, int samples) {
  boost::asio::io_context io;
  tcp::acceptor target(io, tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0), true);
  tcp::acceptor other(io, tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0), true);
  target.listen(4096);
  other.listen(4096);
  std::list<tcp::socket> clients, servers;
  for (std::size_t i = 0; i < connections; ++i) {
    clients.emplace_back(io).connect(target.local_endpoint());
    servers.push_back(target.accept());
    clients.emplace_back(io).connect(other.local_endpoint());
    servers.push_back(other.accept());
  }
  shim::new_connection_sampler s(io, target.local_endpoint().port());
  const auto cpu = cpu_seconds();
  const auto start = clock::now();
  for (int i = 0; i < samples; ++i) {
    std::optional<shim::result<shim::new_connection_sampler::counts>> got;
    s.sample([&](auto r) { got.emplace(std::move(r)); });
    io.restart();
    while (!got && io.run_one() > 0) {
    }
    if (!got || !got->ok() || got->value().open != connections) {
      std::fprintf(stderr, "sample failed: %s\n", got && !got->ok() ? got->error().c_str() : "");
      std::exit(1);
    }
  }
  const double n = samples;
  return {.wall_us = std::chrono::duration<double, std::micro>(clock::now() - start).count() / n,
          .cpu_us = (cpu_seconds() - cpu) * 1e6 / n};
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
  // 4 descriptors a connection to each port: both ends of both. As many as the hard limit allows.
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = files.rlim_max;
  setrlimit(RLIMIT_NOFILE, &files);
  std::setvbuf(stdout, nullptr, _IONBF, 0);

  std::printf("| health_checker_watch::record() | ns |\n| --- | --- |\n");
  for (std::size_t addresses : {3u, 64u}) {
    for (bool begun : {false, true}) {
      std::printf("| %zu addresses%s | %.1f |\n", addresses, begun ? ", a drill begun" : "",
                  record_ns(addresses, begun, records));
    }
  }
  std::printf(
      "\n| one sample, n connections to the port (+ n to another) | wall us | CPU us |\n"
      "| --- | --- | --- |\n");
  for (std::size_t n : connection_counts(argc, argv)) {
    const auto c = sample_us(n, samples);
    std::printf("| %zu | %.1f | %.1f |\n", n, c.wall_us, c.cpu_us);
  }
}
