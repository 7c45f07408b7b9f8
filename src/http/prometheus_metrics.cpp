#include "http/prometheus_metrics.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <string_view>

#include "http/process_metrics.hpp"
#include "log/event_recorder.hpp"
#include "log/logger.hpp"
#include "util/build_version.hpp"

namespace shim {
namespace {

// A family's HELP and TYPE lines; its samples follow.
void append_family(std::string& out, std::string_view name, std::string_view type,
                   std::string_view help) {
  fmt::format_to(std::back_inserter(out), "# HELP {0} {1}\n# TYPE {0} {2}\n", name, help, type);
}

void append_metric(std::string& out, std::string_view name, std::string_view type,
                   std::string_view help, double value) {
  append_family(out, name, type, help);
  fmt::format_to(std::back_inserter(out), "{} {}\n", name, value);
}

void append_upstream_metrics(std::string& out, const upstream_status& upstream) {
  constexpr std::string_view kDuration = "shutdown_shim_upstream_probe_duration_seconds";
  append_family(out, kDuration, "histogram",
                "How long each probe of the upstream /readyz took, to its answer, its failure or "
                "its timeout.");
  const auto& bounds = upstream.bucket_bounds();
  const auto cumulative = upstream.cumulative_buckets();
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    fmt::format_to(std::back_inserter(out), "{}_bucket{{le=\"{}\"}} {}\n", kDuration, bounds[i],
                   cumulative[i]);
  }
  fmt::format_to(std::back_inserter(out),
                 "{0}_bucket{{le=\"+Inf\"}} {1}\n{0}_sum {2}\n{0}_count {1}\n", kDuration,
                 upstream.probes(), upstream.duration_sum_seconds());
  append_family(out, "shutdown_shim_upstream_probe_failures_total", "counter",
                "Failed probes of the upstream /readyz, by reason.");
  for (const auto& [reason, count] : upstream.failures()) {
    fmt::format_to(std::back_inserter(out),
                   "shutdown_shim_upstream_probe_failures_total{{reason=\"{}\"}} {}\n", reason,
                   count);
  }
  append_metric(out, "shutdown_shim_upstream_consecutive_failures", "gauge",
                "Failed probes of the upstream /readyz in a row (--upstream-fall turns the check "
                "failed).",
                upstream.consecutive_failures());
  append_metric(out, "shutdown_shim_upstream_consecutive_passes", "gauge",
                "Passed probes of the upstream /readyz in a row (--upstream-rise turns the check "
                "passed).",
                upstream.consecutive_passes());
}

// client_golang's names and HELP texts, so that dashboards made for any Go program work.
void append_process_metrics(std::string& out) {
  const process_figures p = read_process_figures();
  const auto append = [&out](std::string_view name, std::string_view type, std::string_view help,
                             const std::optional<double>& value) {
    if (value) append_metric(out, name, type, help, *value);
  };
  append("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.",
         p.cpu_seconds);
  append("process_open_fds", "gauge", "Number of open file descriptors.", p.open_fds);
  append("process_max_fds", "gauge", "Maximum number of open file descriptors.", p.max_fds);
  append("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
         p.resident_bytes);
  append("process_start_time_seconds", "gauge",
         "Start time of the process since unix epoch in seconds.", p.start_time);
}

double seconds(std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

std::string render_metrics(const shim_status& status, const http_request_counts& counts) {
  std::string out;
  // The readiness table once: the ready gauge and each check's gauge are the same rows.
  const auto checks = status.checks();
  const bool ready = std::all_of(checks.begin(), checks.end(), [](const auto& c) { return c.ok; });
  append_metric(out, "shutdown_shim_ready", "gauge", "Whether /readyz answers 200 (1) or 503 (0).",
                ready ? 1 : 0);
  append_family(out, "shutdown_shim_check", "gauge",
                "Whether each readiness check passes (1) or fails (0), as /readyz?verbose lists "
                "them.");
  for (const auto& check : checks) {
    fmt::format_to(std::back_inserter(out), "shutdown_shim_check{{name=\"{}\"}} {}\n", check.name,
                   check.ok ? 1 : 0);
  }
  append_metric(out, "shutdown_shim_draining", "gauge",
                "Whether a shutdown has started and the node is being drained.",
                status.phase.draining() ? 1 : 0);
  append_metric(out, "shutdown_shim_drilling", "gauge",
                "Whether a drill (shutdown-shim drill) keeps the node unready for the load "
                "balancer now.",
                status.phase.drilling() ? 1 : 0);
  append_metric(out, "shutdown_shim_drills_total", "counter",
                "Drills started since the shim started.", static_cast<double>(status.drills));
  append_metric(out, "shutdown_shim_inhibitor_held", "gauge",
                "Whether the shim holds a systemd-logind delay inhibitor lock.",
                status.logind.inhibitor == logind_row::inhibitor_state::held ? 1 : 0);
  const double start =
      status.phase.draining() ? seconds(status.phase_since_wall.time_since_epoch()) : 0.0;
  append_metric(out, "shutdown_shim_shutdown_start_time_seconds", "gauge",
                "Unix time at which the current drain started, 0 if none.", start);
  append_metric(out, "shutdown_shim_drain_delay_seconds", "gauge",
                "How long a shutdown keeps the node unready, counted from the moment it turns "
                "unready; the target's signal goes out shutdown_shim_signal_delay_seconds into "
                "it, then the drain runs on until it has elapsed.",
                seconds(status.drain_delay));
  append_metric(out, "shutdown_shim_hold_needed_seconds", "gauge",
                "How long the shim needs to hold a shutdown: drain delay plus exit timeout.",
                seconds(status.hold_needed));
  // Unknown is absent (docs/design.md, "Metrics"): until logind has said its InhibitDelayMaxUSec,
  // neither gauge is there, so an alert on too_short == 1 needs an absent() beside it.
  if (status.logind.delay_max_usec) {
    append_metric(out, "shutdown_shim_logind_inhibit_delay_max_seconds", "gauge",
                  "systemd-logind's InhibitDelayMaxUSec, in seconds; absent until logind has "
                  "said it.",
                  static_cast<double>(*status.logind.delay_max_usec) / 1e6);
    append_metric(out, "shutdown_shim_logind_inhibit_delay_too_short", "gauge",
                  "Whether logind would end a shutdown hold before the shim is done (1) or not "
                  "(0); absent until logind has said its InhibitDelayMaxUSec.",
                  status.logind_delay_too_short() ? 1 : 0);
  }
  if (status.previous) {
    append_metric(out, "shutdown_shim_previous_shutdown_clean", "gauge",
                  "Whether the last shutdown of an earlier boot drained in full (1) or not (0), "
                  "from the event log at start; absent when there is none.",
                  status.previous->clean() ? 1 : 0);
    if (status.previous->hold) {
      append_metric(out, "shutdown_shim_previous_shutdown_hold_seconds", "gauge",
                    "How long the last shutdown of an earlier boot was held, unready to the lock's "
                    "release; absent when its records do not say (a hold cut short).",
                    *status.previous->hold);
    }
    // The dashboard's unready-to-signal: whether the load balancer had the drain delay to drain
    // before kube-apiserver had its SIGTERM.
    if (status.previous->unready_to_signal) {
      append_metric(out, "shutdown_shim_previous_shutdown_unready_to_signal_seconds", "gauge",
                    "How long the last shutdown of an earlier boot kept the node unready before "
                    "the target's signal; absent when its records do not say (no signal).",
                    *status.previous->unready_to_signal);
    }
  }
  append_metric(out, "shutdown_shim_kubelet_cuts_drain", "gauge",
                "Whether kubelet's graceful node shutdown will SIGKILL kube-apiserver before "
                "drain delay plus exit timeout or before the pod's own grace (1) or not, or not "
                "known (0); see the check kubelet-shutdown.",
                status.kubelet.cuts_drain() ? 1 : 0);
  append_metric(out, "shutdown_shim_kubelet_second_signal", "gauge",
                "Whether kube-apiserver may get a second SIGTERM, kubelet's after the shim's (1): "
                "kubelet's lock is listed but its plan not known, so the shim signals at once. "
                "Always 0 when the plan is known (the shim then leaves the signal to kubelet) and "
                "in wrapper mode.",
                status.kubelet.second_signal() ? 1 : 0);
  // The signal plan (issue 32); unknown is absent.
  if (const auto etcd = status.kubelet.stops_etcd_with_apiserver()) {
    append_metric(out, "shutdown_shim_kubelet_stops_etcd_with_apiserver", "gauge",
                  "Whether kubelet's graceful node shutdown stops etcd no later than "
                  "kube-apiserver (1), so that requests needing etcd fail during its drain; absent "
                  "without kubelet's plan and etcd's manifest.",
                  *etcd ? 1 : 0);
  }
  if (status.plan.applies() && !status.plan.kubelet_signals()) {
    append_metric(out, "shutdown_shim_signal_delay_seconds", "gauge",
                  "When the shim's SIGTERM goes at the next shutdown, from the unready moment "
                  "(--signal-delay, or the drain minus kube-apiserver's own shutdown delay); "
                  "absent when kubelet sends it.",
                  seconds(status.plan.signal_delay()));
  }
  if (const auto& api = status.plan.apiserver(); api && status.plan.applies()) {
    append_metric(out, "shutdown_shim_apiserver_shutdown_delay_seconds", "gauge",
                  "kube-apiserver's --shutdown-delay-duration, from its command line or its "
                  "manifest; absent while not known.",
                  seconds(api->delay));
    append_metric(
        out, "shutdown_shim_apiserver_stops_accepting_early", "gauge",
        "Whether kube-apiserver stops accepting before the load balancer can have drained it "
        "(1): kubelet's SIGTERM or --signal-delay too early, or a load balancer that checks "
        "kube-apiserver itself and a --shutdown-delay-duration shorter than the drain; absent "
        "while its delay is not known. See the check signal-plan.",
        status.plan.stops_accepting_early(status.lb_checks_shim(std::chrono::steady_clock::now()))
            ? 1
            : 0);
  }
  append_metric(out, "shutdown_shim_signals_forwarded_total", "counter",
                "Signals sent to the target.",
                static_cast<double>(status.target.signals_forwarded));
  append_metric(out, "shutdown_shim_log_lines_dropped_total", "counter",
                "Log lines dropped because stderr could not take them (queue full or reader gone).",
                static_cast<double>(status.log ? status.log->dropped_lines() : 0));
  append_family(out, "shutdown_shim_events_total", "counter",
                "Lifecycle events since the start, by event (each is logged, and written to "
                "--event-log when there is one).");
  for (std::size_t i = 0; i < kEvents.size(); ++i) {
    fmt::format_to(std::back_inserter(out), "shutdown_shim_events_total{{event=\"{}\"}} {}\n",
                   kEvents[i].name,
                   status.events ? status.events->recorded(static_cast<event_kind>(i)) : 0);
  }
  append_metric(out, "shutdown_shim_event_records_failed_total", "counter",
                "Event log records that could not be written (ENOSPC, EIO, ...).",
                static_cast<double>(status.events ? status.events->failed_records() : 0));
  append_family(out, "shutdown_shim_http_requests_total", "counter",
                "HTTP responses sent, by status code and handler (the endpoint; other: an unknown "
                "path or a request refused before routing).");
  for (const auto& [key, count] : counts.all()) {
    fmt::format_to(std::back_inserter(out),
                   "shutdown_shim_http_requests_total{{code=\"{}\",handler=\"{}\"}} {}\n",
                   key.second, to_string(key.first), count);
  }
  if (status.upstream) append_upstream_metrics(out, *status.upstream);
  append_process_metrics(out);
  // Prometheus' own convention (prometheus_build_info): version and revision as labels.
  append_family(out, "shutdown_shim_build_info", "gauge",
                "The shim's version and the revision it was built from.");
  fmt::format_to(std::back_inserter(out),
                 "shutdown_shim_build_info{{version=\"{}\",revision=\"{}\"}} 1\n", kVersion,
                 kRevision);
  return out;
}

}  // namespace shim
