// Hostile HTTP clients against the shim on a sandboxed node (issue 8, items 0, 1 and 10): one
// request that aborted it, a flood that grew its memory without bound, and a low descriptor limit
// that starved fresh probes. Every test holds the shim's lock against the real logind, as on a
// node.

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "shim_harness.hpp"

namespace shim_it {
namespace {

// A plain TCP connection to the shim on 127.0.0.1, closed on destruction.
class raw_connection {
 public:
  explicit raw_connection(std::uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    const int one = 1;
    if (connected_) ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~raw_connection() {
    if (fd_ >= 0) ::close(fd_);
  }
  raw_connection(const raw_connection&) = delete;
  raw_connection& operator=(const raw_connection&) = delete;

  bool connected() const { return connected_; }

  // All of `bytes`, or false once the shim has closed or reset the connection.
  bool send_all(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

// VmRSS or VmHWM of a process, in KiB.
std::optional<std::uint64_t> status_kib(pid_t pid, std::string_view field) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(field) && line.size() > field.size() && line[field.size()] == ':') {
      return std::stoull(line.substr(field.size() + 1));
    }
  }
  return std::nullopt;
}

// Nearest-rank percentile of sorted samples.
double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const auto rank =
      static_cast<std::size_t>(std::ceil(p / 100 * static_cast<double>(sorted.size())));
  return sorted[std::clamp<std::size_t>(rank, 1, sorted.size()) - 1];
}

class FaultHttp : public ShimTest {
 protected:
  // The shim in attach mode, run through `launcher` (an argv prefix) if given.
  shim start_attached(std::vector<std::string> launcher = {}) {
    auto api = start_apiserver("kube-apiserver");
    shim_options o = attach_to(api);
    o.launcher = std::move(launcher);
    auto s = start_shim(o);
    EXPECT_TRUE(wait_shim_lock(true)) << "the shim holds no lock";
    return s;
  }

  // One GET /readyz on a new connection.
  static sandbox::http_result fresh_probe(const shim& s, std::chrono::milliseconds timeout) {
    sandbox::http_client client(s.port);
    return client.get("/readyz", timeout);
  }
};

// Item 0: these 49 bytes, in three writes, tripped Beast 1.74's assertion `n >= 5` in
// basic_parser::parse_chunk_header and aborted a shim built with assertions on (SIGABRT).
TEST_F(FaultHttp, AChunkedRequestSplitAcrossReadsDoesNotKillTheShim) {
  auto s = start_attached();
  ASSERT_FALSE(HasFailure());
  raw_connection c(s.port);
  ASSERT_TRUE(c.connected());
  for (const std::string_view write :
       {"GET / HTTP/1.1\r\nTransfer-Encoding:chunked\r\n\r\n", "0\r\n", "X"}) {
    c.send_all(write);
    // Separate reads for the shim: it has long read one write before the next is sent.
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_TRUE(s.process->running())
      << "the shim died: " << sandbox::describe_wait_status(*s.process->wait_status());
  const auto r = fresh_probe(s, 2000ms);
  EXPECT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.status, 200u);
  EXPECT_TRUE(sb().find_inhibitor("shutdown-shim")) << "the lock was lost";
}

// Item 1: 20 clients each push 8 MiB of an endless trailer or chunk extension (reconnecting when
// the shim closes on them). The shim reads and discards it: its RSS grows by less than 1 MiB, and
// fresh probes keep being answered meanwhile.
TEST_F(FaultHttp, EndlessTrailersAndChunkExtensionsDoNotGrowMemoryAndProbesAreAnswered) {
  constexpr int kClients = 20;
  constexpr std::size_t kBytesPerClient = 8 << 20;
  constexpr std::uint64_t kMaxGrowthKib = 1024;
  auto s = start_attached();
  ASSERT_FALSE(HasFailure());
  const pid_t pid = s.process->pid();
  // Warm up the paths a probe takes, then take the baseline.
  for (int i = 0; i < 20; ++i) fresh_probe(s, 2000ms);
  const auto rss_before = status_kib(pid, "VmRSS");
  ASSERT_TRUE(rss_before);

  std::atomic<int> running{kClients};
  std::atomic<std::uint64_t> pushed{0}, connections{0};
  std::vector<std::thread> flood;
  for (int i = 0; i < kClients; ++i) {
    flood.emplace_back([&, i] {
      const std::string head =
          "GET /readyz HTTP/1.1\r\nHost: node\r\nTransfer-Encoding: chunked\r\n\r\n";
      // Even clients: a final chunk and a trailer line that never ends; odd: a chunk extension.
      const std::string start = i % 2 == 0 ? "0\r\nX-Trailer: " : "1;ext=";
      const std::string filler(64 * 1024, i % 2 == 0 ? 't' : 'e');
      std::size_t sent = 0;
      while (sent < kBytesPerClient) {
        raw_connection c(s.port);
        ++connections;
        if (!c.connected() || !c.send_all(head + start)) continue;
        while (sent < kBytesPerClient && c.send_all(filler)) sent += filler.size();
      }
      pushed += sent;
      --running;
    });
  }

  std::vector<double> latencies_ms;
  int probes = 0, answered = 0;
  std::uint64_t rss_peak = *rss_before;
  while (running > 0) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = fresh_probe(s, 2000ms);
    ++probes;
    if (r.ok && r.status == 200) {
      ++answered;
      latencies_ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    if (auto rss = status_kib(pid, "VmRSS")) rss_peak = std::max(rss_peak, *rss);
    std::this_thread::sleep_for(5ms);
  }
  for (auto& t : flood) t.join();
  const auto hwm = status_kib(pid, "VmHWM");
  ASSERT_TRUE(hwm);
  rss_peak = std::max(rss_peak, *hwm);

  std::sort(latencies_ms.begin(), latencies_ms.end());
  const std::string figures = fmt::format(
      "FIGURES flood_mib={} flood_connections={} rss_before_kib={} rss_peak_kib={} "
      "rss_growth_kib={} probes={} answered_200={} probe_ms_p50={:.2f} probe_ms_p99={:.2f} "
      "probe_ms_max={:.2f}",
      pushed / (1 << 20), connections.load(), *rss_before, rss_peak, rss_peak - *rss_before, probes,
      answered, percentile(latencies_ms, 50), percentile(latencies_ms, 99),
      latencies_ms.empty() ? 0.0 : latencies_ms.back());
  std::cout << figures << std::endl;
  note(figures);
  RecordProperty("rss_growth_kib", std::to_string(rss_peak - *rss_before));

  ASSERT_TRUE(s.process->running()) << "the shim died";
  EXPECT_EQ(pushed.load(), std::uint64_t{kClients} * kBytesPerClient);
  EXPECT_LT(rss_peak - *rss_before, kMaxGrowthKib) << "memory grew with the bytes sent";
  EXPECT_GT(probes, 0);
  EXPECT_EQ(answered, probes) << "fresh probes went unanswered during the flood";
}

// Item 10: under RLIMIT_NOFILE=128, with more idle clients holding connections than the shim has
// descriptors for (those it cannot accept wait in the listen queue, ahead of any probe), every
// fresh probe still gets its 200. Sequential probes, each on a new connection with a 1 s timeout.
TEST_F(FaultHttp, FreshProbesGetThroughALowDescriptorLimitWhileIdleClientsHoldConnections) {
  constexpr int kIdle = 1000;
  constexpr int kProbes = 100;
  auto s = start_attached({"/usr/bin/prlimit", "--nofile=128:128", "--"});
  ASSERT_FALSE(HasFailure());
  // What the shim holds besides its HTTP connections (kReservedDescriptors' headroom).
  std::size_t own_fds = 0;
  for ([[maybe_unused]] const auto& fd :
       std::filesystem::directory_iterator(fmt::format("/proc/{}/fd", s.process->pid()))) {
    ++own_fds;
  }

  std::vector<std::unique_ptr<raw_connection>> idle;
  for (int i = 0; i < kIdle; ++i) {
    idle.push_back(std::make_unique<raw_connection>(s.port));
    ASSERT_TRUE(idle.back()->connected()) << "idle client " << i;
  }
  int answered = 0;
  std::vector<std::string> failures;
  for (int i = 0; i < kProbes; ++i) {
    const auto r = fresh_probe(s, 1000ms);
    if (r.ok && r.status == 200) {
      ++answered;
    } else if (failures.size() < 5) {
      failures.push_back(r.ok ? std::to_string(r.status) : r.error);
    }
  }
  const std::string figures =
      fmt::format("FIGURES nofile=128 shim_fds_before={} idle_clients={} probes={} answered_200={}",
                  own_fds, kIdle, kProbes, answered);
  std::cout << figures << std::endl;
  note(figures);
  for (const auto& f : failures) note("probe failed: " + f);
  EXPECT_EQ(answered, kProbes);
  EXPECT_TRUE(s.process->running()) << "the shim died";
}

}  // namespace
}  // namespace shim_it
