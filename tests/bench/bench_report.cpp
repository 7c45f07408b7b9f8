#include "bench_report.hpp"

#include <fmt/core.h>
#include <linux/magic.h>
#include <sys/statfs.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <boost/version.hpp>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <system_error>
#include <thread>

#include "bench_node.hpp"
#include "bench_proc.hpp"
#include "bench_stats.hpp"

namespace bench {

using namespace std::chrono_literals;
using sandbox::monotonic_us;

std::string dpkg_version(const std::string& package) {
  return run_and_read("dpkg-query -W -f '${Version}' " + package + " 2>/dev/null");
}

std::string load_average() {
  std::string text = sandbox::read_text_file("/proc/loadavg");
  return text.substr(0, text.find(' ', text.find(' ', text.find(' ') + 1) + 1));
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  return std::string(text, std::strftime(text, sizeof text, "%Y-%m-%d %H:%M UTC", &tm));
}

// Where the shims kept their records, and whether that is a tmpfs as /run is on a node.
std::string state_directories(const std::string& root) {
  if (root.empty()) return "the shim's default (/run/shutdown-shim on this machine's /run)";
  struct statfs fs {};
  const bool tmpfs = ::statfs(root.c_str(), &fs) == 0 && fs.f_type == TMPFS_MAGIC;
  return fmt::format("one per shim under `{}` ({})", root, tmpfs ? "tmpfs" : "not a tmpfs");
}

void print_machine(const options& o, const std::string& started, const std::string& load_at_start) {
  utsname u{};
  uname(&u);
  std::string cpu;
  {
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);) {
      if (line.starts_with("model name")) {
        cpu = line.substr(line.find(':') + 2);
        break;
      }
    }
  }
  const std::string shim = sandbox::tool_paths::from_environment().shim;
  std::cout << "## Machine and versions\n\n| | |\n| --- | --- |\n";
  std::cout << fmt::format("| date | {} (start of the run) |\n", started);
  std::cout << fmt::format("| CPU | {} x {} (`nproc` {}) |\n", cpu,
                           std::thread::hardware_concurrency(), sysconf(_SC_NPROCESSORS_ONLN));
  std::cout << fmt::format("| kernel | {} {} |\n", u.sysname, u.release);
  std::cout << fmt::format("| load average (1/5/15 min) | at start {}, at end {} |\n",
                           load_at_start, load_average());
  std::cout << fmt::format("| shim build | {} |\n", o.build_info);
  std::cout << fmt::format("| g++ | {} |\n", first_line(run_and_read("g++ --version")));
  std::cout << fmt::format("| Boost | {} (headers the shim was built with) |\n", BOOST_LIB_VERSION);
  std::cout << fmt::format("| fmt | {} |\n", dpkg_version("libfmt9"));
  std::cout << fmt::format("| systemd (logind, libsystemd0) | {}, {} |\n", dpkg_version("systemd"),
                           dpkg_version("libsystemd0"));
  std::cout << fmt::format("| dbus-daemon | {} |\n", dpkg_version("dbus-daemon"));
  std::cout << fmt::format("| HAProxy | {} |\n", first_line(run_and_read("/usr/sbin/haproxy -v")));
  std::cout << fmt::format("| nginx | {} ({}) |\n",
                           first_line(run_and_read("/usr/sbin/nginx -v 2>&1")),
                           dpkg_version("nginx-light").empty() ? "nginx" : "nginx-light");
  std::cout << fmt::format("| wrk | {} |\n", first_line(run_and_read("/usr/bin/wrk -v 2>&1")));
  std::cout << fmt::format("| shim binary | `{}` |\n", shim);
  std::cout << fmt::format("| shim state directories (record of signalled processes) | {} |\n",
                           state_directories(o.state_dir));
  std::cout << fmt::format(
      "| timestamping threads (bus observer, NOTIFY_SOCKET reader) | {} |\n\n",
      observers_realtime ? "SCHED_FIFO priority 50"
                         : "ordinary priority (SCHED_FIFO refused): their timestamps may be late");
}

void print_unready(const std::vector<reboot_sample>& reboots,
                   const std::vector<sigterm_sample>& sigterms) {
  std::cout << "## Unready latency\n\n"
               "How long after the shutdown cue a client probing `/readyz` first sees 503. The "
               "prober is one thread sending GET /readyz back to back on one keep-alive "
               "connection; \"first 503\" is the moment that 503 response was read, so each "
               "figure is late by up to one probe round trip (mean probe interval: ";
  std::vector<double> intervals;
  for (const auto& r : reboots) intervals.push_back(r.probe_interval_us);
  for (const auto& r : sigterms) intervals.push_back(r.probe_interval_us);
  std::cout << fmt::format(
      "p50 {:.0f} us, max {:.0f} us), plus any wait of the prober's ordinary-priority thread for a "
      "CPU: on a busy machine the figures err on the late side.\n\n",
      median(intervals), percentile(intervals, 100));
  std::cout
      << "- *PrepareForShutdown -> first 503*: from the moment an independent bus connection (its "
         "own thread, blocked in `sd_bus_wait`, SCHED_FIFO so that a busy machine does not delay "
         "its timestamp) read logind's `PrepareForShutdown(true)` to the first 503. The shim's "
         "connection receives its copy from dbus-daemon at the same moment, "
         "so this is the shim's reaction plus at most one probe.\n"
         "- *SIGTERM -> first 503*: from just before `kill(shim, SIGTERM)` to the first 503 "
         "(attach mode, lock held, PID 1's `SystemState` = stopping).\n"
         "- Context rows: logind's own part (Reboot() call -> its signal), and the shim's "
         "`ShutdownInitiated` event (its monotonic time) after the observer's receipt.\n\n";
  print_distribution_table({
      {"PrepareForShutdown -> first 503",
       to_ms(reboots, &reboot_sample::prepare_us, &reboot_sample::first_503_us), "p99 < 5 ms",
       p99_below(5)},
      {"SIGTERM -> first 503",
       to_ms(sigterms, &sigterm_sample::kill_us, &sigterm_sample::first_503_us), "p99 < 5 ms",
       p99_below(5)},
      {"(context) Reboot() call -> PrepareForShutdown seen",
       to_ms(reboots, &reboot_sample::reboot_us, &reboot_sample::prepare_us),
       "",
       {}},
      {"(context) PrepareForShutdown seen -> ShutdownInitiated event",
       to_ms(reboots, &reboot_sample::prepare_us, &reboot_sample::initiated_us),
       "",
       {}},
      {"(context) SIGTERM -> ShutdownInitiated event",
       to_ms(sigterms, &sigterm_sample::kill_us, &sigterm_sample::initiated_us),
       "",
       {}},
  });
}

void print_hold(const options& o,
                const std::vector<std::pair<hold_scenario, std::vector<reboot_sample>>>& runs) {
  std::cout
      << "## Hold accuracy\n\n"
      << fmt::format(
             "Conditions met = the later of (`ShutdownInitiated` + drain {}) and the target's "
             "exit (the stand-in apiserver's `EXIT` line, written just before it returns "
             "from main). Lock released = the shim's `InhibitorReleased` event (written just "
             "after it closes the lock fd). `StartUnit(reboot.target)` = when the stand-in "
             "manager received logind's call. \"lock released - conditions met\" is the shim's "
             "part of the total, \"StartUnit - lock released\" logind's (it can come out "
             "slightly negative: the event is stamped just after the close, and logind may "
             "already have reacted).\n\n",
             o.drain);
  for (const auto& [sc, samples] : runs) {
    std::size_t drain_later = 0;
    for (const auto& s : samples) drain_later += s.drain_was_later ? 1 : 0;
    std::cout << fmt::format(
        "### {} (apiserver exits {} after its SIGTERM; the drain was the later condition in {} "
        "of {} reboots)\n\n",
        sc.name, sc.apiserver_shutdown_delay, drain_later, samples.size());
    std::vector<distribution_row> rows{
        {"lock released - conditions met (shim)",
         to_ms(samples, &reboot_sample::met_us, &reboot_sample::released_us), "within 20 ms (p99)",
         [](double, double p99, double) { return p99 <= 20 && p99 >= 0; }},
        {"StartUnit - lock released (logind)",
         to_ms(samples, &reboot_sample::released_us, &reboot_sample::start_unit_us),
         "",
         {}},
        {"StartUnit - conditions met (total)",
         to_ms(samples, &reboot_sample::met_us, &reboot_sample::start_unit_us),
         "within 20 ms (p99)", [](double, double p99, double) { return p99 <= 20 && p99 >= 0; }},
    };
    if (sc.later == "target") {
      rows.insert(rows.begin(),
                  distribution_row{"(context) shim's TargetExited event - target's EXIT line",
                                   to_ms(samples, &reboot_sample::target_exit_us,
                                         &reboot_sample::target_exited_event_us),
                                   "",
                                   {}});
    }
    print_distribution_table(rows);
  }
}

// The shim whose upstream check polls: its wake-ups are the probes', so the target is one probe
// per interval and a few wake-ups for each (timer, write, read), nothing more; its RSS has
// OpenSSL in it, which the 4 MiB target (set before the upstream check) does not allow for.
void print_idle_polling(const options& o, const idle_sample& s, std::vector<std::string>& summary) {
  const double probes = *s.probes;
  const double expected =
      2.0 * o.idle_seconds * 1000.0 / static_cast<double>(kProbeInterval.count());
  const auto wakes =
      s.first.voluntary + s.first.involuntary + s.second.voluntary + s.second.involuntary;
  const double per_probe = probes > 0 ? static_cast<double>(wakes) / probes : NAN;
  // The windows are 0.5 s short of the span the probe count covers: one probe more is allowed.
  const bool one_per_interval = probes <= expected + 1;
  std::cout << fmt::format(
      "| peak RSS idle, {} | VmHWM {} (VmRSS {}: anon {}, file {}); Pss {}, private (USS) {} | "
      "none (OpenSSL) |\n",
      s.mode, mib(s.hwm_kb), mib(s.rss_kb), mib(s.anon_kb), mib(s.file_kb), mib(s.pss_kb),
      mib(s.private_kb));
  std::cout << fmt::format(
      "| wake-ups idle, {}, 2 x {} s | {} voluntary + {} involuntary context switches for {:.0f} "
      "probes ({:.1f} per probe), {} CPU ticks | one probe per interval: **{}** |\n",
      s.mode, o.idle_seconds, s.first.voluntary + s.second.voluntary,
      s.first.involuntary + s.second.involuntary, probes, per_probe,
      s.first.cpu_ticks + s.second.cpu_ticks, one_per_interval ? "met" : "missed");
  summary.push_back(fmt::format(
      "idle with the upstream check on: one probe per interval: {} ({:.0f} probes in {} s, "
      "{:.1f} wake-ups per probe)",
      one_per_interval ? "met" : "missed", probes, 2 * o.idle_seconds, per_probe));
  summary.push_back(
      fmt::format("peak RSS idle with the upstream check on (OpenSSL loaded): {}", mib(s.hwm_kb)));
}

void print_startup_idle(const options& o, const std::vector<startup_sample>& off,
                        const std::vector<startup_sample>& lock,
                        const std::vector<idle_sample>& idle, const http_report* http,
                        std::vector<std::string>& summary) {
  const std::string shim = sandbox::tool_paths::from_environment().shim;
  std::cout << "## Footprint\n\n| what | measured | target |\n| --- | --- | --- |\n";
  std::error_code ec;
  const auto size = std::filesystem::file_size(shim, ec);
  const auto stripped_path =
      std::filesystem::temp_directory_path() / fmt::format("shutdown-shim-stripped.{}", getpid());
  run_and_read(fmt::format("strip -o {} {}", stripped_path.string(), shim));
  const auto stripped = std::filesystem::file_size(stripped_path, ec);
  std::filesystem::remove(stripped_path, ec);
  std::cout << fmt::format("| binary size | {} KiB as built, {} KiB stripped | |\n", size / 1024,
                           stripped / 1024);
  auto startup_row = [&](const char* what, const std::vector<startup_sample>& v) {
    std::vector<double> notify, http200;
    for (const auto& s : v) {
      notify.push_back(s.ready_notify_ms);
      http200.push_back(s.first_200_ms);
    }
    if (v.empty()) return;
    const bool met = percentile(http200, 100) < 50 && percentile(notify, 100) < 50;
    std::cout << fmt::format(
        "| start to ready, {} (n={}) | READY=1 p50 {} max {}; first 200 p50 {} max {} | < 50 ms: "
        "**{}** |\n",
        what, v.size(), ms(median(notify)), ms(percentile(notify, 100)), ms(median(http200)),
        ms(percentile(http200, 100)), met ? "met" : "missed");
    summary.push_back(
        fmt::format("ready within 50 ms of start ({}): {}", what, met ? "met" : "missed"));
  };
  startup_row("--inhibit=off", off);
  startup_row("lock taken from logind", lock);
  for (const auto& s : idle) {
    if (s.probes) {
      print_idle_polling(o, s, summary);
      continue;
    }
    const bool rss_met = s.hwm_kb < 4096;
    std::cout << fmt::format(
        "| peak RSS idle, {} | VmHWM {} (VmRSS {}: anon {}, file {}); Pss {}, private (USS) {} | "
        "VmHWM < 4 MiB: **{}** |\n",
        s.mode, mib(s.hwm_kb), mib(s.rss_kb), mib(s.anon_kb), mib(s.file_kb), mib(s.pss_kb),
        mib(s.private_kb), rss_met ? "met" : "missed");
    for (const auto* w : {&s.first, &s.second}) {
      const bool zero = w->voluntary + w->involuntary == 0;
      const bool first = w == &s.first;
      std::cout << fmt::format(
          "| wake-ups idle, {}, {} s {} | {} voluntary + {} involuntary context switches, {} CPU "
          "ticks, {} thread(s) | 0: **{}** |\n",
          s.mode, o.idle_seconds,
          first ? "from 0.5 s after the last HTTP request" : "right after that", w->voluntary,
          w->involuntary, w->cpu_ticks, s.threads, zero ? "met" : "missed");
      summary.push_back(fmt::format("zero idle wake-ups ({}, {} window): {} ({})", s.mode,
                                    first ? "first" : "second", zero ? "met" : "missed",
                                    w->voluntary + w->involuntary));
    }
    summary.push_back(fmt::format("peak RSS idle < 4 MiB ({}): {} ({})", s.mode,
                                  rss_met ? "met" : "missed", mib(s.hwm_kb)));
  }
  if (http) {
    std::cout << fmt::format(
        "| peak RSS under load (lock held) | VmHWM {} before the wrk runs, {} after | |\n",
        mib(http->shim_hwm_before_kb), mib(http->shim_hwm_after_kb));
  }
  std::cout << "\n";
  for (const auto& s : idle) {
    if (s.mode.find("lock") == std::string::npos && !s.probes) continue;
    std::cout << "### Where the idle RSS goes (" << s.mode
              << ", from /proc/PID/smaps)\n\n| mapping | Rss | private | shared |\n"
                 "| --- | ---: | ---: | ---: |\n";
    std::uint64_t total = 0, priv = 0;
    for (const auto& m : s.mappings) {
      total += m.rss_kb;
      priv += m.private_kb;
    }
    for (std::size_t i = 0; i < s.mappings.size() && i < 14; ++i) {
      const auto& m = s.mappings[i];
      std::cout << fmt::format("| {} | {} KiB | {} KiB | {} KiB |\n", m.name, m.rss_kb,
                               m.private_kb, m.shared_kb);
    }
    std::cout << fmt::format("| total ({} mappings) | {} KiB | {} KiB | |\n\n", s.mappings.size(),
                             total, priv);
  }
}

void print_http(const options& o, const http_report& r, std::vector<std::string>& summary) {
  std::cout << "## /readyz under load (wrk)\n\n"
            << fmt::format(
                   "`wrk -t{} -c{} -d{}s --latency` against each server on 127.0.0.1, {} rounds "
                   "interleaved (shim, nginx, HAProxy, repeat); the figures are the median over "
                   "the rounds, the ratios are to nginx's. nginx: one worker, `return 200 \"ok\"`, "
                   "no access log, keep-alive requests unlimited. HAProxy: `nbthread 1`, "
                   "`monitor-uri /readyz` (its answer is a 58-byte HTML body). The shim holds its "
                   "lock against the sandbox's logind. Nothing is pinned: wrk and the server share "
                   "the machine's cores, and \"server CPU\" is the server's CPU time over the run "
                   "(1.00 = one core busy); \"CPU/request\" divides the server's CPU time (all its "
                   "processes, 10 ms tick resolution) by the requests wrk completed: the figure "
                   "that depends least on what else the machine is doing.{}\n\n",
                   o.wrk_threads, o.wrk_connections, o.wrk_seconds, o.wrk_rounds,
                   o.shim_variants.empty()
                       ? ""
                       : " Rows `shutdown-shim (LABEL)` are other builds of the shim "
                         "(--shim-variant=LABEL=PATH), run after HAProxy in each round with the "
                         "same flags.");
  for (const auto& [mode, by_server] : r.results) {
    std::cout << "### " << mode << "\n\n"
              << "| server | req/s | p50 | p99 | req/s vs nginx | p99 vs nginx | server CPU | "
                 "CPU/request | CPU/request vs nginx | errors, non-2xx |\n"
                 "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
    auto med = [&](const std::string& server, double wrk_result::*field) {
      std::vector<double> v;
      for (const auto& x : by_server.at(server)) v.push_back(x.*field);
      return median(v);
    };
    const double nginx_rps = med("nginx", &wrk_result::requests_per_s);
    const double nginx_p99 = med("nginx", &wrk_result::p99_ms);
    const double nginx_cpu = med("nginx", &wrk_result::cpu_us_per_request);
    for (const auto& server : r.servers) {
      std::uint64_t errors = 0, non2xx = 0;
      for (const auto& x : by_server.at(server)) {
        errors += x.socket_errors;
        non2xx += x.non_2xx;
      }
      const double rps = med(server, &wrk_result::requests_per_s);
      const double p99 = med(server, &wrk_result::p99_ms);
      const double cpu = med(server, &wrk_result::cpu_us_per_request);
      std::cout << fmt::format(
          "| {} | {:.0f} | {:.3f} ms | {:.3f} ms | {:.2f} | {:.2f} | {:.2f} | {:.1f} us | {:.2f} "
          "| {}, {} |\n",
          server, rps, med(server, &wrk_result::p50_ms), p99, rps / nginx_rps, p99 / nginx_p99,
          med(server, &wrk_result::server_cpu), cpu, cpu / nginx_cpu, errors, non2xx);
      if (server == "shutdown-shim" || server == kPollingServer) {
        const std::string what = server == kPollingServer ? mode + ", upstream check on" : mode;
        summary.push_back(fmt::format("/readyz req/s >= nginx ({}): {} ({:.2f}x)", what,
                                      rps >= nginx_rps ? "met" : "missed", rps / nginx_rps));
        summary.push_back(fmt::format("/readyz p99 <= nginx ({}): {} ({:.2f}x)", what,
                                      p99 <= nginx_p99 ? "met" : "missed", p99 / nginx_p99));
      }
    }
    std::cout << "\n";
  }
}

void print_upstream(const upstream_report& r, std::vector<std::string>& summary) {
  const auto window = kProbeFall * (kProbeInterval + kProbeTimeout);
  std::cout << fmt::format(
      "## The target and upstream checks\n\n"
      "A shim (--inhibit=off) with its target check on the stand-in apiserver's pidfile and its "
      "upstream check on the apiserver's /readyz over HTTPS (CA file, interval {} ms, timeout {} "
      "ms, fall {}, rise {}). *Crash*: SIGKILL of the apiserver to the first 503, seen by a "
      "back-to-back prober (mean probe interval p50 {:.0f} us); the pidfd reports the exit, no "
      "probe is needed. *Hang*: SIGSTOP of the apiserver to the first 503, seen by a prober every "
      "millisecond; the configured window is fall x (interval + timeout) = {} ms.\n\n",
      kProbeInterval.count(), kProbeTimeout.count(), kProbeFall, kProbeRise,
      median(r.crash_probe_interval_us), window.count());
  const double window_ms = static_cast<double>(window.count());
  print_distribution_table({
      {"apiserver SIGKILL -> first 503", r.crash_ms, "p99 < 5 ms", p99_below(5)},
      {"apiserver SIGSTOP -> first 503", r.hang_ms, fmt::format("max <= {} ms", window.count()),
       [window_ms](double, double, double mx) { return mx <= window_ms; }},
  });
  if (!r.crash_ms.empty()) {
    const double p99 = percentile(r.crash_ms, 99);
    summary.push_back(fmt::format("apiserver crash to 503, p99 < 5 ms: {} (p50 {}, p99 {})",
                                  p99 < 5 ? "met" : "missed", ms(median(r.crash_ms)), ms(p99)));
  }
  if (!r.hang_ms.empty()) {
    const double mx = percentile(r.hang_ms, 100);
    summary.push_back(fmt::format("apiserver hang to 503 within the window ({} ms): {} (max {})",
                                  window.count(), mx <= window_ms ? "met" : "missed", ms(mx)));
  }
}

}  // namespace bench
