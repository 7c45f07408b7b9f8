// A guided run of the shim in a sandboxed node set up as kubeadm sets one up: fake_apiserver with
// kubeadm's --shutdown-delay-duration (none: k8s.io/apiserver's default, 0) watched by the shim in
// attach mode as its unit runs it (5 s drain, 10 s exit timeout, the signal planned from
// kube-apiserver's delay), a Reboot through the real logind, and a timeline of what everyone saw.
// Needs root (logind runs in its own mount namespace); touches only its private bus. Everything it
// starts is torn down before it exits.
//
//   shim_demo [--drain-delay=5s] [--exit-timeout=10s] [--apiserver-delay=0s] [--signal-delay=D]

#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "http_probe.hpp"
#include "node_sandbox.hpp"
#include "process.hpp"

namespace {

using namespace std::chrono_literals;

struct entry {
  std::uint64_t usec;
  std::string source;
  std::string text;
};

std::string flag_value(int argc, char** argv, std::string_view name, std::string fallback) {
  for (int i = 1; i < argc; ++i) {
    std::string_view a(argv[i]);
    if (a.starts_with(name) && a.size() > name.size() && a[name.size()] == '=') {
      return std::string(a.substr(name.size() + 1));
    }
  }
  return fallback;
}

bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

int run(int argc, char** argv) {
  const std::string drain = flag_value(argc, argv, "--drain-delay", "5s");
  const std::string exit_timeout = flag_value(argc, argv, "--exit-timeout", "10s");
  const std::string api_delay = flag_value(argc, argv, "--apiserver-delay", "0s");
  const std::string signal_delay = flag_value(argc, argv, "--signal-delay", "");

  sandbox::node_sandbox node;
  fmt::print("sandbox: {} (private bus {})\n", node.dir().string(), node.bus_address());

  const auto pidfile = node.path("kube-apiserver.pid");
  const auto port_file = node.path("kube-apiserver.port");
  const auto signal_log = node.path("kube-apiserver-signals.log");
  const auto lifecycle_log = node.path("kube-apiserver-lifecycle.log");
  auto& api = node.spawn(
      "kube-apiserver",
      {node.tools().fake_apiserver, "--listen=127.0.0.1:0", "--port-file=" + port_file.string(),
       "--pidfile=" + pidfile.string(), "--signal-log=" + signal_log.string(),
       "--lifecycle-log=" + lifecycle_log.string(), "--shutdown-delay-duration=" + api_delay,
       "--name=kube-apiserver"});
  if (!wait_until([&] { return !sandbox::read_text_file(pidfile).empty() || !api.running(); },
                  10s) ||
      !api.running()) {
    fmt::print(stderr, "fake_apiserver did not start\n");
    node.dump_logs(std::cerr);
    return 1;
  }

  const std::uint16_t port = sandbox::pick_free_port();
  const auto event_log = node.path("shim-events.jsonl");
  std::vector<std::string> shim_argv = {node.tools().shim,
                                        fmt::format("--listen=127.0.0.1:{}", port),
                                        "--target-pidfile=" + pidfile.string(),
                                        "--drain-delay=" + drain,
                                        "--exit-timeout=" + exit_timeout,
                                        "--signal=TERM",
                                        "--inhibit=auto",
                                        "--event-log=" + event_log.string(),
                                        "--log-format=json"};
  if (!signal_delay.empty()) shim_argv.push_back("--signal-delay=" + signal_delay);
  auto& shim = node.spawn("shutdown-shim", shim_argv);
  sandbox::http_client client(port);
  const bool ready = wait_until(
      [&] {
        auto r = client.get("/readyz", 500ms);
        return (r.ok && r.status == 200) || !shim.running();
      },
      30s);
  if (!ready || !shim.running() || !node.wait_for_inhibitor("shutdown-shim", true, 30s)) {
    fmt::print(stderr, "the shim did not become ready with its lock\n");
    node.dump_logs(std::cerr);
    return 1;
  }
  fmt::print("shim ready on 127.0.0.1:{}, holding its delay lock; drain {}, exit timeout {}\n",
             port, drain, exit_timeout);
  // What the shim will do, as /readyz?verbose says it (the target's command line read).
  std::string plan;
  wait_until(
      [&] {
        const auto r = client.get("/readyz?verbose", 500ms);
        const auto at = r.body.find("[+]signal-plan ok: ");
        if (at != std::string::npos) plan = r.body.substr(at, r.body.find('\n', at) - at);
        return plan.find("--shutdown-delay-duration=") != std::string::npos;
      },
      10s);
  fmt::print("{}\n", plan);

  sandbox::http_prober prober(port, "/readyz", 50ms);
  const std::uint64_t t0 = node.reboot();
  fmt::print("Reboot requested; waiting for logind to start reboot.target...\n");
  auto start = node.wait_for_start_unit("reboot.target", 120s, t0);
  api.wait_for_exit(30s);
  prober.stop();

  std::vector<entry> timeline;
  timeline.push_back({t0, "test", "logind Manager.Reboot(false) called"});
  bool seen_503 = false;
  for (const auto& c : prober.changes()) {
    if (c.at_us < t0) continue;
    if (c.status == 503 && !seen_503) {
      timeline.push_back({c.at_us, "probe", "first 503 on the shim's /readyz"});
      seen_503 = true;
    } else if (c.status == 0) {
      timeline.push_back({c.at_us, "probe", "shim /readyz unreachable: " + c.error});
    } else if (c.status != 503) {
      timeline.push_back({c.at_us, "probe", fmt::format("shim /readyz answers {}", c.status)});
    }
  }
  for (const auto& s : sandbox::read_timed_lines(signal_log)) {
    timeline.push_back({s.usec, "apiserver", s.word + " received"});
  }
  for (const auto& l : sandbox::read_timed_lines(lifecycle_log)) {
    if (l.word == "EXIT") {
      timeline.push_back({l.usec, "apiserver", "exited with " + l.detail});
    } else if (l.word == "STOPPED_LISTENING" || l.word == "UNREADY" || l.word == "NOT_ACCEPTING") {
      timeline.push_back({l.usec, "apiserver", l.word});
    }
  }
  for (const auto& e : sandbox::read_event_log(event_log)) {
    if (e.monotonic_us < t0) continue;
    timeline.push_back(
        {e.monotonic_us, "shim", e.event + (e.message.empty() ? "" : ": " + e.message)});
  }
  if (start) timeline.push_back({start->usec, "PID 1", "StartUnit(reboot.target) by logind"});
  std::stable_sort(timeline.begin(), timeline.end(),
                   [](const entry& a, const entry& b) { return a.usec < b.usec; });

  fmt::print("\ntimeline (t = 0 at the Reboot call):\n");
  for (const auto& e : timeline) {
    fmt::print("  t+{:>9.1f} ms  {:<10} {}\n",
               (static_cast<double>(e.usec) - static_cast<double>(t0)) / 1000.0, e.source, e.text);
  }
  fmt::print("\n{} probes of /readyz every 50 ms, {} not 2xx\n", prober.requests(),
             prober.failures());
  if (!start) {
    fmt::print(stderr, "logind never started reboot.target\n");
    node.dump_logs(std::cerr);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Nothing here may reach the machine's own system bus, even by accident.
  sandbox::prepare_sandbox_process();
  if (geteuid() != 0) {
    fmt::print(stderr, "shim_demo needs root: logind runs in its own mount namespace\n");
    return 77;
  }
  try {
    const int rc = run(argc, argv);
    sandbox::reap_orphans();
    return rc;
  } catch (const std::exception& e) {
    fmt::print(stderr, "shim_demo: {}\n", e.what());
    sandbox::reap_orphans();
    return 1;
  }
}
