// The sections measured through logind and signals: reboots and their hold, SIGTERM, start-up,
// idle, and the apiserver's crash and hang against the target and upstream checks.

#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench_options.hpp"
#include "bench_proc.hpp"
#include "node_sandbox.hpp"

namespace bench {

struct hold_scenario {
  std::string name;
  std::string apiserver_shutdown_delay;
  std::string later;  // which condition is expected to come last
};

struct reboot_sample {
  std::uint64_t reboot_us = 0, prepare_us = 0, first_503_us = 0, initiated_us = 0;
  std::uint64_t met_us = 0, target_exit_us = 0, target_exited_event_us = 0, released_us = 0;
  std::uint64_t start_unit_us = 0;
  bool drain_was_later = false;
  double probe_interval_us = 0;
};

std::vector<reboot_sample> run_reboots(const options& o, const hold_scenario& sc);

struct sigterm_sample {
  std::uint64_t kill_us = 0, first_503_us = 0, initiated_us = 0;
  double probe_interval_us = 0;
};

std::vector<sigterm_sample> run_sigterms(const options& o);

struct startup_sample {
  double ready_notify_ms = NAN, first_200_ms = NAN;
};

// Spawn (just before fork) to READY=1 on our NOTIFY_SOCKET and to the first 200 on /readyz. The
// HTTP side retries every 200 us, so it is late by up to that plus one request.
std::vector<startup_sample> run_startups(sandbox::node_sandbox& sb, const options& o,
                                         bool with_lock);

struct idle_window {
  std::uint64_t voluntary = 0, involuntary = 0, cpu_ticks = 0;
};

struct idle_sample {
  std::string mode;
  // Two consecutive windows: the first starts half a second after the harness's last request,
  // the second when the first ends (past the shim's 10 s HTTP read deadline).
  idle_window first, second;
  std::size_t threads = 0;
  std::uint64_t hwm_kb = 0, rss_kb = 0, anon_kb = 0, file_kb = 0;
  std::uint64_t pss_kb = 0, private_kb = 0;  // from smaps_rollup; private = USS
  std::vector<mapping_use> mappings;
  // With the upstream check on: the probes made over both windows (from the metrics read just
  // before the first window and just after the second).
  std::optional<double> probes;
};

// The shims idle side by side: one with --inhibit=off, one holding the lock against logind, and
// one with --inhibit=off whose upstream check probes an HTTPS apiserver (OpenSSL loaded).
std::vector<idle_sample> run_idle(sandbox::node_sandbox& sb, const options& o);

struct upstream_report {
  std::vector<double> crash_ms;  // SIGKILL of the apiserver -> first 503 (the target check)
  std::vector<double> hang_ms;   // SIGSTOP of the apiserver -> first 503 (the upstream check)
  std::vector<double> crash_probe_interval_us;
};

upstream_report run_upstream(sandbox::node_sandbox& sb, const options& o);

}  // namespace bench
