// The measuring instruments on a sandboxed node: observers that timestamp logind's signal and
// READY=1, the shim and its prober, and a stand-in kube-apiserver over HTTPS.

#pragma once

#include <fmt/core.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "http_probe.hpp"
#include "node_sandbox.hpp"
#include "private_bus.hpp"
#include "process.hpp"
#include "test_pki.hpp"

namespace bench {

using namespace std::chrono_literals;
using sandbox::monotonic_us;

// The observers below are measuring instruments that sleep until their event arrives. On a busy
// machine an ordinary thread can wait milliseconds for a CPU after its wake-up, which would move
// its timestamps; real-time priority makes it run at once. Returns false if that is not allowed.
bool make_this_thread_realtime();

extern std::atomic<bool> observers_realtime;  // false once SCHED_FIFO was refused

// An independent connection to the sandbox bus, in its own thread, that timestamps logind's
// PrepareForShutdown as soon as it is read from the socket: the thread sleeps in sd_bus_wait, so
// the timestamp is taken within a wake-up of the message's arrival, the same moment the shim's own
// connection receives its copy from dbus-daemon.
class prepare_for_shutdown_observer {
 public:
  explicit prepare_for_shutdown_observer(std::string address) : address_(std::move(address)) {
    std::promise<void> ready;
    auto started = ready.get_future();
    thread_ = std::thread([this, &ready] { run(ready); });
    started.get();
  }
  ~prepare_for_shutdown_observer() {
    stop_ = true;
    thread_.join();
  }

  // First PrepareForShutdown(start) received at or after since_us.
  std::optional<std::uint64_t> seen(bool start, std::uint64_t since_us) {
    std::lock_guard lock(mutex_);
    for (auto& [s, at] : seen_) {
      if (s == start && at >= since_us) return at;
    }
    return std::nullopt;
  }

 private:
  void run(std::promise<void>& ready) {
    if (!make_this_thread_realtime()) observers_realtime = false;
    try {
      sandbox::private_bus bus(address_);
      auto slot = bus.add_match(
          "org.freedesktop.login1", "/org/freedesktop/login1", "org.freedesktop.login1.Manager",
          "PrepareForShutdown",
          [](sd_bus_message* m, void* self, sd_bus_error*) -> int {
            const auto at = monotonic_us();
            int start = 0;
            if (sd_bus_message_read(m, "b", &start) >= 0) {
              auto* o = static_cast<prepare_for_shutdown_observer*>(self);
              std::lock_guard lock(o->mutex_);
              o->seen_.emplace_back(start != 0, at);
            }
            return 0;
          },
          this);
      ready.set_value();
      while (!stop_) {
        while (sd_bus_process(bus.get(), nullptr) > 0) {
        }
        sd_bus_wait(bus.get(), 100'000);
      }
    } catch (...) {
      ready.set_exception(std::current_exception());
    }
  }

  std::string address_;
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::vector<std::pair<bool, std::uint64_t>> seen_;
  std::thread thread_;
};

// A NOTIFY_SOCKET for the shim: a datagram socket read by its own thread, which timestamps each
// READY=1 on receipt.
class notify_listener {
 public:
  explicit notify_listener(std::filesystem::path path) : path_(std::move(path)) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path_.c_str(), sizeof addr.sun_path - 1);
    std::filesystem::remove(path_);
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0) {
      throw std::runtime_error("cannot bind the notify socket " + path_.string());
    }
    timeval tv{0, 100'000};  // lets the thread notice stop_
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    thread_ = std::thread([this] {
      if (!make_this_thread_realtime()) observers_realtime = false;
      char buf[4096];
      while (!stop_) {
        const ssize_t n = recv(fd_, buf, sizeof buf, 0);
        if (n <= 0) continue;
        const auto at = monotonic_us();
        if (std::string_view(buf, static_cast<std::size_t>(n)).find("READY=1") !=
            std::string_view::npos) {
          std::lock_guard lock(mutex_);
          ready_.push_back(at);
        }
      }
    });
  }
  ~notify_listener() {
    stop_ = true;
    thread_.join();
    close(fd_);
  }
  std::string env() const { return "NOTIFY_SOCKET=" + path_.string(); }
  std::optional<std::uint64_t> ready_since(std::uint64_t since_us) {
    std::lock_guard lock(mutex_);
    for (auto at : ready_) {
      if (at >= since_us) return at;
    }
    return std::nullopt;
  }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::vector<std::uint64_t> ready_;
  std::thread thread_;
};

bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout,
                std::chrono::microseconds step = 1ms);

bool wait_http_200(std::uint16_t port, std::chrono::milliseconds timeout,
                   const std::string& target = "/readyz");

struct running_shim {
  sandbox::child_process* process = nullptr;
  std::uint16_t port = 0;
  std::filesystem::path event_log;

  std::optional<std::uint64_t> event_at(const std::string& name, std::uint64_t since_us) const {
    for (const auto& e : sandbox::read_event_log(event_log)) {
      if (e.event == name && e.monotonic_us >= since_us) return e.monotonic_us;
    }
    return std::nullopt;
  }
};

// Below this directory every shim spawn_shim() starts gets a new state directory of its own (made
// 0755, as systemd makes a RuntimeDirectory= for each start); empty: the shim's default.
void set_state_root(std::filesystem::path root);

// `binary`: the shim under test (SHUTDOWN_SHIM) unless given.
running_shim spawn_shim(sandbox::node_sandbox& sb, const std::string& name,
                        const std::vector<std::string>& flags,
                        const std::vector<std::string>& env = {}, std::string binary = {});

void require(bool ok, const std::string& what);

void wait_shim_ready_and_locked(sandbox::node_sandbox& sb, const running_shim& s);

// A tight /readyz prober (no pause between requests, one keep-alive connection) that knows its own
// request rate, i.e. the resolution of "first 503 seen".
struct timed_prober {
  std::uint64_t started_us = monotonic_us();
  sandbox::http_prober prober;
  std::uint64_t stopped_us = 0;

  explicit timed_prober(std::uint16_t port) : prober(port, "/readyz", 0us, 120s) {
    require(wait_until([&] { return !prober.changes().empty(); }, 10s), "the prober got no answer");
    require(prober.changes().front().status == 200, "/readyz was not 200 before the trigger");
  }
  void stop() {
    prober.stop();
    stopped_us = monotonic_us();
  }
  double interval_us() const {
    return static_cast<double>(stopped_us - started_us) /
           static_cast<double>(std::max<std::uint64_t>(prober.requests(), 1));
  }
};

// The upstream probe as the sections below run it: kubelet's default probe period and timeout,
// HAProxy's default fall and rise.
inline constexpr std::chrono::milliseconds kProbeInterval{1000};
inline constexpr std::chrono::milliseconds kProbeTimeout{1000};
inline constexpr unsigned kProbeFall = 3;
inline constexpr unsigned kProbeRise = 2;

// fake_apiserver serving /readyz over HTTPS with the test PKI's server certificate (kubeadm's
// names), on a port that stays the same across restarts, with its pidfile for the target check.
class tls_apiserver {
 public:
  explicit tls_apiserver(sandbox::node_sandbox& sb)
      : sb_(sb),
        pki_(make_pki(sb.path("pki"))),
        port_(sandbox::pick_free_port()),
        pidfile_(sb.path("tls-apiserver.pid")) {
    start();
  }

  void start() {
    const auto port_file = sb_.path("tls-apiserver.port");
    std::error_code ec;
    std::filesystem::remove(port_file, ec);
    std::filesystem::remove(pidfile_, ec);
    process_ =
        &sb_.spawn(fmt::format("tls-apiserver-{}", starts_++),
                   {sb_.tools().fake_apiserver, fmt::format("--listen=127.0.0.1:{}", port_),
                    "--port-file=" + port_file.string(), "--pidfile=" + pidfile_.string(),
                    "--tls-cert-file=" + pki_.server.cert.string(),
                    "--tls-private-key-file=" + pki_.server.key.string(), "--name=kube-apiserver"});
    require(wait_until([&] { return !sandbox::read_text_file(port_file).empty(); }, 30s),
            "fake_apiserver did not listen");
  }

  sandbox::child_process& process() { return *process_; }

  // The shim's target check on the pidfile and its upstream check on /readyz, verified.
  std::vector<std::string> shim_flags() const {
    return {fmt::format("--upstream-readyz=https://127.0.0.1:{}/readyz", port_),
            "--upstream-ca-file=" + pki_.ca.string(),
            fmt::format("--upstream-interval={}ms", kProbeInterval.count()),
            fmt::format("--upstream-timeout={}ms", kProbeTimeout.count()),
            fmt::format("--upstream-fall={}", kProbeFall),
            fmt::format("--upstream-rise={}", kProbeRise),
            "--target-pidfile=" + pidfile_.string()};
  }

 private:
  static sandbox::test_pki make_pki(const std::filesystem::path& dir) {
    std::filesystem::create_directories(dir);
    return sandbox::test_pki::make(dir);
  }

  sandbox::node_sandbox& sb_;
  sandbox::test_pki pki_;
  std::uint16_t port_;
  std::filesystem::path pidfile_;
  sandbox::child_process* process_ = nullptr;
  int starts_ = 0;
};

// The upstream probes the shim has made so far, from its /metrics.
std::optional<double> upstream_probes(std::uint16_t port);

}  // namespace bench
