// bench_driver: the measurements behind scripts/bench, printed as one markdown report.
//
// Everything runs on a sandboxed node (tests/sandbox: private dbus-daemon, the real systemd-logind,
// the stand-in PID 1 manager); nothing talks to the machine's own system bus. All times are
// CLOCK_MONOTONIC, which the harness, the stand-ins and the shim's event log share. The figures
// are distributions and ratios of one run; nothing here decides pass or fail except the plain
// comparison with the project's targets, which is reported, not enforced.

#include <fmt/core.h>
#include <unistd.h>

#include <cstdint>
#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench_http.hpp"
#include "bench_node.hpp"
#include "bench_options.hpp"
#include "bench_report.hpp"
#include "bench_scenarios.hpp"
#include "bench_stats.hpp"
#include "node_sandbox.hpp"

namespace bench {

int run(const options& o) {
  set_state_root(o.state_dir);
  const std::string started = utc_now();
  const std::string load_at_start = load_average();
  std::vector<std::string> summary;
  std::vector<std::pair<hold_scenario, std::vector<reboot_sample>>> holds;
  std::vector<reboot_sample> all_reboots;
  std::vector<sigterm_sample> sigterms;
  std::vector<startup_sample> start_off, start_lock;
  std::vector<idle_sample> idle;
  std::optional<http_report> http;
  std::optional<upstream_report> upstream;

  if (o.sections.count("reboot")) {
    const std::uint64_t drain_ms = duration_us(o.drain) / 1000;
    for (const hold_scenario& sc :
         {hold_scenario{"the target exits after the drain", fmt::format("{}ms", drain_ms + 300),
                        "target"},
          hold_scenario{"the drain ends after the target exits", "0", "drain"}}) {
      std::cerr << "reboots: " << sc.name << "\n";
      auto samples = run_reboots(o, sc);
      all_reboots.insert(all_reboots.end(), samples.begin(), samples.end());
      holds.emplace_back(sc, std::move(samples));
    }
  }
  if (o.sections.count("sigterm")) {
    std::cerr << "SIGTERM to the shim\n";
    sigterms = run_sigterms(o);
  }
  if (o.sections.count("startup") || o.sections.count("idle") || o.sections.count("http") ||
      o.sections.count("upstream")) {
    sandbox::node_sandbox sb;
    try {
      if (o.sections.count("startup")) {
        std::cerr << "start-up\n";
        start_off = run_startups(sb, o, false);
        start_lock = run_startups(sb, o, true);
      }
      if (o.sections.count("idle")) {
        std::cerr << "idle for " << o.idle_seconds << " s\n";
        idle = run_idle(sb, o);
      }
      if (o.sections.count("http")) {
        std::cerr << "wrk\n";
        http = run_http(sb, o);
      }
      if (o.sections.count("upstream")) {
        std::cerr << "apiserver crashes and hangs\n";
        upstream = run_upstream(sb, o);
      }
    } catch (...) {
      sb.dump_logs(std::cerr, 40);
      throw;
    }
  }

  std::cout << "# shutdown-shim benchmarks\n\n"
               "Produced by `scripts/bench` in one run on a sandboxed node (private dbus-daemon, "
               "the real systemd-logind, a stand-in PID 1 manager and kube-apiserver). Figures "
               "are distributions or ratios from this run only; the machine is shared and noisy, "
               "so compare runs by their ratios, not their absolute times. Percentiles are "
               "nearest-rank: with fewer than 100 samples p99 is one of the largest two.\n\n";
  print_machine(o, started, load_at_start);
  if (!all_reboots.empty() || !sigterms.empty()) {
    print_unready(all_reboots, sigterms);
    auto pfs = to_ms(all_reboots, &reboot_sample::prepare_us, &reboot_sample::first_503_us);
    auto term = to_ms(sigterms, &sigterm_sample::kill_us, &sigterm_sample::first_503_us);
    if (!pfs.empty()) {
      summary.push_back(fmt::format("unready p99 < 5 ms after PrepareForShutdown: {} ({})",
                                    percentile(pfs, 99) < 5 ? "met" : "missed",
                                    ms(percentile(pfs, 99))));
    }
    if (!term.empty()) {
      summary.push_back(fmt::format("unready p99 < 5 ms after SIGTERM: {} ({})",
                                    percentile(term, 99) < 5 ? "met" : "missed",
                                    ms(percentile(term, 99))));
    }
  }
  if (!holds.empty()) {
    print_hold(o, holds);
    for (const auto& [sc, samples] : holds) {
      const double shim_p99 =
          percentile(to_ms(samples, &reboot_sample::met_us, &reboot_sample::released_us), 99);
      const double p99 =
          percentile(to_ms(samples, &reboot_sample::met_us, &reboot_sample::start_unit_us), 99);
      summary.push_back(fmt::format(
          "lock released within 20 ms of the conditions ({}): {} (p99 {}); reboot.target started "
          "within 20 ms: {} (p99 {})",
          sc.name, shim_p99 <= 20 ? "met" : "missed", ms(shim_p99), p99 <= 20 ? "met" : "missed",
          ms(p99)));
    }
  }
  if (!start_off.empty() || !start_lock.empty() || !idle.empty() || http) {
    print_startup_idle(o, start_off, start_lock, idle, http ? &*http : nullptr, summary);
  }
  if (http) print_http(o, *http, summary);
  if (upstream) print_upstream(*upstream, summary);
  std::cout << "## Targets\n\n";
  for (const auto& s : summary) std::cout << "- " << s << "\n";
  std::cout << "\n";
  return 0;
}

}  // namespace bench

int main(int argc, char** argv) {
  // First of all: nothing in this process may reach the machine's own system bus.
  sandbox::prepare_sandbox_process();
  const auto opts = bench::parse_options(argc, argv);
  if (geteuid() != 0) {
    std::cerr << "bench_driver needs root: it runs systemd-logind in its own mount namespace\n";
    return 1;
  }
  try {
    return bench::run(opts);
  } catch (const std::exception& e) {
    std::cerr << "bench_driver: " << e.what() << "\n";
    return 1;
  }
}
