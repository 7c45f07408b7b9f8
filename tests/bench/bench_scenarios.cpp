#include "bench_scenarios.hpp"

#include <fmt/core.h>
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <system_error>
#include <thread>
#include <utility>

#include "bench_node.hpp"
#include "bench_stats.hpp"

namespace bench {

using namespace std::chrono_literals;
using sandbox::monotonic_us;

std::vector<reboot_sample> run_reboots(const options& o, const hold_scenario& sc) {
  sandbox::node_sandbox sb;
  try {
    prepare_for_shutdown_observer observer(sb.bus_address());
    const auto pidfile = sb.path("kube-apiserver.pid");
    const auto port_file = sb.path("kube-apiserver.port");
    const std::uint64_t drain_us = duration_us(o.drain);

    auto start_apiserver = [&](int i) {
      std::error_code ec;
      std::filesystem::remove(pidfile, ec);
      std::filesystem::remove(port_file, ec);
      const auto lifecycle = sb.path(fmt::format("kube-apiserver-{}.lifecycle", i));
      auto& p = sb.spawn(
          fmt::format("kube-apiserver-{}", i),
          {sb.tools().fake_apiserver, "--listen=127.0.0.1:0", "--port-file=" + port_file.string(),
           "--pidfile=" + pidfile.string(), "--lifecycle-log=" + lifecycle.string(),
           "--shutdown-delay-duration=" + sc.apiserver_shutdown_delay, "--name=kube-apiserver"});
      require(wait_until([&] { return !sandbox::read_text_file(port_file).empty(); }, 30s),
              "fake_apiserver did not listen");
      return std::make_pair(&p, lifecycle);
    };

    auto api = start_apiserver(0);
    auto shim = spawn_shim(
        sb, "shutdown-shim",
        {"--drain-delay=" + o.drain, "--exit-timeout=5s", "--target-pidfile=" + pidfile.string()});
    std::vector<reboot_sample> samples;
    for (int i = 0; i < o.reboots; ++i) {
      if (i > 0) api = start_apiserver(i);
      wait_shim_ready_and_locked(sb, shim);
      reboot_sample r;
      timed_prober probe(shim.port);
      r.reboot_us = sb.reboot();
      require(wait_until(
                  [&] {
                    return observer.seen(true, r.reboot_us) &&
                           probe.prober.first_status_at(503, r.reboot_us);
                  },
                  10s),
              "no PrepareForShutdown(true) or no 503 after Reboot()");
      probe.stop();
      r.prepare_us = *observer.seen(true, r.reboot_us);
      r.first_503_us = *probe.prober.first_status_at(503, r.reboot_us);
      r.probe_interval_us = probe.interval_us();
      auto start = sb.wait_for_start_unit("reboot.target", 30s, r.reboot_us);
      require(start.has_value(), "logind never started reboot.target");
      r.start_unit_us = start->usec;
      require(api.first->wait_for_exit(30s).has_value(), "the apiserver did not exit");
      require(wait_until(
                  [&] { return shim.event_at("InhibitorReleased", r.reboot_us).has_value(); }, 10s),
              "no InhibitorReleased event");
      r.initiated_us = shim.event_at("ShutdownInitiated", r.reboot_us).value_or(0);
      r.released_us = *shim.event_at("InhibitorReleased", r.reboot_us);
      r.target_exited_event_us = shim.event_at("TargetExited", r.reboot_us).value_or(0);
      for (const auto& l : sandbox::read_timed_lines(api.second)) {
        if (l.word == "EXIT") r.target_exit_us = l.usec;
      }
      require(r.initiated_us && r.target_exit_us, "ShutdownInitiated or the target's EXIT missing");
      r.drain_was_later = r.initiated_us + drain_us >= r.target_exit_us;
      r.met_us = std::max(r.initiated_us + drain_us, r.target_exit_us);
      samples.push_back(r);
      std::cerr << fmt::format(
          "  {} reboot {}/{}: PrepareForShutdown->503 {:.2f} ms, release-met {:.2f} ms, "
          "StartUnit-met {:.2f} ms\n",
          sc.name, i + 1, o.reboots, us_to_ms(diff_us(r.prepare_us, r.first_503_us)),
          us_to_ms(diff_us(r.met_us, r.released_us)), us_to_ms(diff_us(r.met_us, r.start_unit_us)));

      // Cancel the reboot job: logind says PrepareForShutdown(false), the shim takes its lock
      // again and is ready once a target runs again.
      const auto before = sb.prepare_for_shutdown_signals().size();
      sb.cancel_last_job();
      require(sb.wait_for_prepare_for_shutdown(false, 30s, before),
              "no PrepareForShutdown(false) after the cancel");
    }
    return samples;
  } catch (...) {
    sb.dump_logs(std::cerr, 40);
    throw;
  }
}

std::vector<sigterm_sample> run_sigterms(const options& o) {
  sandbox::node_sandbox sb;
  try {
    // PID 1 is stopping: the shim's own SIGTERM is a real shutdown (attach mode), as when systemd
    // stops the unit during `systemctl reboot --force`.
    sb.set_system_state("stopping");
    std::vector<sigterm_sample> samples;
    for (int i = 0; i < o.sigterms; ++i) {
      auto shim = spawn_shim(sb, fmt::format("shutdown-shim-{}", i),
                             {"--drain-delay=200ms", "--exit-timeout=0s"});
      wait_shim_ready_and_locked(sb, shim);
      sigterm_sample r;
      timed_prober probe(shim.port);
      r.kill_us = monotonic_us();
      shim.process->signal(SIGTERM);
      require(
          wait_until([&] { return probe.prober.first_status_at(503, r.kill_us).has_value(); }, 10s),
          "no 503 after SIGTERM");
      probe.stop();
      r.first_503_us = *probe.prober.first_status_at(503, r.kill_us);
      r.probe_interval_us = probe.interval_us();
      require(shim.process->wait_for_exit(30s).has_value(), "the shim did not exit after SIGTERM");
      r.initiated_us = shim.event_at("ShutdownInitiated", r.kill_us).value_or(0);
      require(sb.wait_for_inhibitor("shutdown-shim", false, 30s), "the lock outlived the shim");
      samples.push_back(r);
      std::cerr << fmt::format("  SIGTERM {}/{}: kill->503 {:.2f} ms\n", i + 1, o.sigterms,
                               us_to_ms(diff_us(r.kill_us, r.first_503_us)));
    }
    return samples;
  } catch (...) {
    sb.dump_logs(std::cerr, 40);
    throw;
  }
}

std::vector<startup_sample> run_startups(sandbox::node_sandbox& sb, const options& o,
                                         bool with_lock) {
  notify_listener notify(sb.path(with_lock ? "notify-lock.sock" : "notify-off.sock"));
  std::vector<startup_sample> samples;
  for (int i = 0; i < o.starts; ++i) {
    const auto t0 = monotonic_us();
    auto shim = spawn_shim(sb, fmt::format("startup-{}-{}", with_lock ? "lock" : "off", i),
                           {"--drain-delay=1s", with_lock ? "--inhibit=required" : "--inhibit=off"},
                           {notify.env()});
    sandbox::http_client client(shim.port);
    startup_sample s;
    require(wait_until(
                [&] {
                  auto r = client.get("/readyz", 1000ms);
                  if (r.ok && r.status == 200) s.first_200_ms = us_to_ms(diff_us(t0, r.at_us));
                  return r.ok && r.status == 200;
                },
                30s, 200us),
            "the shim never answered 200");
    require(wait_until([&] { return notify.ready_since(t0).has_value(); }, 10s), "no READY=1");
    s.ready_notify_ms = us_to_ms(diff_us(t0, *notify.ready_since(t0)));
    samples.push_back(s);
    std::cerr << fmt::format("  start {}/{} ({}): READY=1 {:.2f} ms, first 200 {:.2f} ms\n", i + 1,
                             o.starts, with_lock ? "lock" : "--inhibit=off", s.ready_notify_ms,
                             s.first_200_ms);
    client.disconnect();
    shim.process->kill_and_reap();
    if (with_lock) {
      require(sb.wait_for_inhibitor("shutdown-shim", false, 30s), "the lock outlived the shim");
    }
  }
  return samples;
}

std::vector<idle_sample> run_idle(sandbox::node_sandbox& sb, const options& o) {
  tls_apiserver api(sb);
  auto off = spawn_shim(sb, "idle-off", {"--inhibit=off"});
  auto lock = spawn_shim(sb, "idle-lock", {"--inhibit=required"});
  auto polling_flags = api.shim_flags();
  polling_flags.push_back("--inhibit=off");
  auto polling = spawn_shim(sb, "idle-upstream", polling_flags);
  require(wait_http_200(off.port, 30s), "the --inhibit=off shim did not become ready");
  require(wait_http_200(polling.port, 30s), "the shim with the upstream check did not get ready");
  wait_shim_ready_and_locked(sb, lock);
  const auto probes_before = upstream_probes(polling.port);
  std::this_thread::sleep_for(500ms);
  const std::string polling_mode =
      fmt::format("--inhibit=off, upstream check on (HTTPS every {} ms)", kProbeInterval.count());
  std::vector<std::pair<std::string, running_shim*>> shims{
      {"--inhibit=off", &off}, {"lock held against logind", &lock}, {polling_mode, &polling}};
  struct snapshot {
    wakeups w;
    std::uint64_t ticks;
  };
  auto take = [&] {
    std::vector<snapshot> v;
    for (auto& [mode, s] : shims) {
      v.push_back({count_wakeups(s->process->pid()), cpu_ticks(s->process->pid())});
    }
    return v;
  };
  auto window = [](const snapshot& a, const snapshot& b) {
    return idle_window{b.w.voluntary - a.w.voluntary, b.w.involuntary - a.w.involuntary,
                       b.ticks - a.ticks};
  };
  const auto t0 = take();
  std::this_thread::sleep_for(std::chrono::seconds(o.idle_seconds));
  const auto t1 = take();
  std::this_thread::sleep_for(std::chrono::seconds(o.idle_seconds));
  const auto t2 = take();
  std::vector<idle_sample> samples;
  for (std::size_t i = 0; i < shims.size(); ++i) {
    const pid_t pid = shims[i].second->process->pid();
    auto status = proc_status_kb(pid);
    idle_sample s;
    s.mode = shims[i].first;
    s.first = window(t0[i], t1[i]);
    s.second = window(t1[i], t2[i]);
    s.threads = t2[i].w.threads;
    s.hwm_kb = status["VmHWM"];
    s.rss_kb = status["VmRSS"];
    s.anon_kb = status["RssAnon"];
    s.file_kb = status["RssFile"];
    s.mappings = rss_by_mapping(pid);
    auto rollup = smaps_rollup_kb(pid);
    s.pss_kb = rollup["Pss"];
    s.private_kb = rollup["Private_Clean"] + rollup["Private_Dirty"];
    samples.push_back(std::move(s));
  }
  const auto probes_after = upstream_probes(polling.port);
  require(probes_before && probes_after, "no upstream probe count in /metrics");
  samples.back().probes = *probes_after - *probes_before;
  off.process->kill_and_reap();
  lock.process->kill_and_reap();
  polling.process->kill_and_reap();
  return samples;
}

upstream_report run_upstream(sandbox::node_sandbox& sb, const options& o) {
  upstream_report r;
  tls_apiserver api(sb);
  auto flags = api.shim_flags();
  flags.push_back("--inhibit=off");
  auto shim = spawn_shim(sb, "upstream-shim", flags);
  for (int i = 0; i < o.crashes; ++i) {
    require(wait_http_200(shim.port, 30s), "the shim did not get ready with its apiserver up");
    timed_prober probe(shim.port);
    const auto kill_us = monotonic_us();
    api.process().signal(SIGKILL);
    require(wait_until([&] { return probe.prober.first_status_at(503, kill_us).has_value(); }, 10s),
            "no 503 after the apiserver's SIGKILL");
    probe.stop();
    r.crash_ms.push_back(us_to_ms(diff_us(kill_us, *probe.prober.first_status_at(503, kill_us))));
    r.crash_probe_interval_us.push_back(probe.interval_us());
    require(api.process().wait_for_exit(10s).has_value(), "the killed apiserver was not reaped");
    std::cerr << fmt::format("  crash {}/{}: SIGKILL->503 {:.2f} ms\n", i + 1, o.crashes,
                             r.crash_ms.back());
    api.start();
  }
  const auto window = kProbeFall * (kProbeInterval + kProbeTimeout);
  for (int i = 0; i < o.hangs; ++i) {
    require(wait_http_200(shim.port, 30s), "the shim did not get ready with its apiserver up");
    // One probe a millisecond: the hang takes seconds to detect, a tight loop would only load
    // the machine the shim's probe timing runs on.
    sandbox::http_prober prober(shim.port, "/readyz", 1000us, 120s);
    require(wait_until([&] { return !prober.changes().empty(); }, 10s), "the prober got no answer");
    const auto stop_us = monotonic_us();
    api.process().signal(SIGSTOP);
    const bool unready =
        wait_until([&] { return prober.first_status_at(503, stop_us).has_value(); }, 3 * window);
    prober.stop();
    api.process().signal(SIGCONT);
    require(unready, "no 503 while the apiserver hung");
    r.hang_ms.push_back(us_to_ms(diff_us(stop_us, *prober.first_status_at(503, stop_us))));
    std::cerr << fmt::format("  hang {}/{}: SIGSTOP->503 {:.0f} ms\n", i + 1, o.hangs,
                             r.hang_ms.back());
  }
  shim.process->kill_and_reap();
  api.process().kill_and_reap();
  return r;
}

}  // namespace bench
