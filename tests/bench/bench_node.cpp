#include "bench_node.hpp"

#include <fmt/core.h>
#include <pthread.h>
#include <sched.h>

#include <system_error>
#include <utility>

namespace bench {

bool make_this_thread_realtime() {
  sched_param param{};
  param.sched_priority = 50;
  return pthread_setschedparam(pthread_self(), SCHED_FIFO, &param) == 0;
}

std::atomic<bool> observers_realtime{true};

bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout,
                std::chrono::microseconds step) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(step);
  }
  return true;
}

bool wait_http_200(std::uint16_t port, std::chrono::milliseconds timeout,
                   const std::string& target) {
  sandbox::http_client client(port);
  return wait_until(
      [&] {
        auto r = client.get(target, 1000ms);
        return r.ok && r.status == 200;
      },
      timeout, 10ms);
}

namespace {
std::filesystem::path state_root;
int shims_spawned = 0;  // each shim's directory is new: a record is never another run's
}  // namespace

void set_state_root(std::filesystem::path root) { state_root = std::move(root); }

running_shim spawn_shim(sandbox::node_sandbox& sb, const std::string& name,
                        const std::vector<std::string>& flags, const std::vector<std::string>& env,
                        std::string binary) {
  running_shim s;
  s.port = sandbox::pick_free_port();
  s.event_log = sb.path(name + "-events.jsonl");
  if (binary.empty()) binary = sb.tools().shim;
  std::vector<std::string> argv{binary, fmt::format("--listen=127.0.0.1:{}", s.port),
                                "--event-log=" + s.event_log.string(), "--log-format=json"};
  if (!state_root.empty()) {
    const auto dir = state_root / fmt::format("{}-{}", shims_spawned++, name);
    std::filesystem::create_directories(dir);
    std::filesystem::permissions(
        dir, std::filesystem::perms::owner_all | std::filesystem::perms::group_read |
                 std::filesystem::perms::group_exec | std::filesystem::perms::others_read |
                 std::filesystem::perms::others_exec);
    argv.push_back("--state-dir=" + dir.string());
  }
  argv.insert(argv.end(), flags.begin(), flags.end());
  s.process = &sb.spawn(name, argv, env);
  return s;
}

void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

void wait_shim_ready_and_locked(sandbox::node_sandbox& sb, const running_shim& s) {
  require(wait_http_200(s.port, 30s), "the shim did not become ready (/readyz 200)");
  require(sb.wait_for_inhibitor("shutdown-shim", true, 30s), "the shim did not take its lock");
}

std::optional<double> upstream_probes(std::uint16_t port) {
  sandbox::http_client client(port);
  const auto r = client.get("/metrics");
  const std::string name = "\nshutdown_shim_upstream_probe_duration_seconds_count ";
  const auto at = r.body.find(name);
  if (!r.ok || at == std::string::npos) return std::nullopt;
  return std::stod(r.body.substr(at + name.size()));
}

}  // namespace bench
