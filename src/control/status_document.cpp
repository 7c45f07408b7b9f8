#include "control/status_document.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "util/duration_text.hpp"

namespace shim {

namespace {

using std::chrono::nanoseconds;

double seconds(nanoseconds d) { return std::chrono::duration<double>(d).count(); }

std::string round_seconds(nanoseconds d) {
  return format_duration(std::chrono::round<std::chrono::milliseconds>(d));
}

// What the next shutdown does to the target, in one line.
std::string next_shutdown(const status_snapshot& s) {
  const auto& st = s.status;
  if (!st.target.configured) return "no target: the shim only turns unready and holds the drain";
  std::string sender =
      st.kubelet.leaves_signal_to_kubelet()
          ? "kubelet's graceful node shutdown sends the target its signal; the shim sends none"
          : fmt::format("the shim sends {} {}", s.signal,
                        s.signal_delay.count() == 0 ? std::string("at once")
                                                    : "at +" + format_duration(s.signal_delay));
  return fmt::format(
      "{}; the reboot is held for the drain-delay {} and then up to --exit-timeout {} for the "
      "target's exit ({} in all)",
      sender, format_duration(st.drain_delay), format_duration(s.exit_timeout),
      format_duration(st.hold_needed));
}

// During a hold: what is elapsed and left of each condition.
std::string hold_progress(const status_snapshot& s) {
  const auto& st = s.status;
  const nanoseconds elapsed = s.elapsed.value_or(nanoseconds(0));
  const nanoseconds drain_left = std::max(st.drain_delay - elapsed, nanoseconds(0));
  const nanoseconds hold_left = std::max(st.hold_needed - elapsed, nanoseconds(0));
  return fmt::format(
      "{} since {} ({}); signal {}; drain {} left; the target's exit awaited at most {} more",
      round_seconds(elapsed), format_wall_time(st.phase_since_wall), st.phase.cause,
      s.signal_sent ? "sent" : "not sent yet", round_seconds(drain_left), round_seconds(hold_left));
}

}  // namespace

std::string status_text(const status_snapshot& s) {
  const auto& st = s.status;
  std::string out = fmt::format("shutdown-shim {}: {}\n", s.version, status_line(st));
  const auto row = [&out](std::string_view key, std::string_view value) {
    fmt::format_to(std::back_inserter(out), "  {:<14} {}\n", key, value);
  };
  row("phase", s.status.phase.name());
  row("lock", st.logind.lock_word());
  if (s.elapsed) row("shutdown", hold_progress(s));
  if (s.drill_elapsed) {
    row("drill", fmt::format("{} elapsed, {} left", round_seconds(*s.drill_elapsed),
                             round_seconds(s.drill_left.value_or(nanoseconds(0)))));
  }
  if (!s.lb_line.empty()) row("load balancer", s.lb_line);
  if (!s.last_drill.empty()) row("last drill", s.last_drill);
  row("next shutdown", next_shutdown(s));
  row("shim SIGTERM", s.sigterm_policy);
  out += "  checks\n";
  for (const auto& c : st.checks()) {
    fmt::format_to(std::back_inserter(out), "    [{}]{} {}{}{}\n", c.ok ? '+' : '-', c.name,
                   c.ok ? "ok" : "failed", c.detail.empty() ? "" : ": ", c.detail);
  }
  return out;
}

std::string status_json(const status_snapshot& s) {
  const auto& st = s.status;
  std::string out = "{";
  const auto raw = [&out](std::string_view key, std::string_view value) {
    if (out.back() != '{' && out.back() != '[') out += ',';
    fmt::format_to(std::back_inserter(out), "\"{}\":{}", key, value);
  };
  const auto str = [&raw](std::string_view key, std::string_view value) {
    raw(key, '"' + json_escape(value) + '"');
  };
  const auto num = [&raw](std::string_view key, nanoseconds d) {
    raw(key, fmt::format("{:.3f}", seconds(d)));
  };
  raw("ready", st.ready() ? "true" : "false");
  str("version", s.version);
  str("phase", s.status.phase.name());
  str("lock", st.logind.lock_word());
  str("status", status_line(st));
  raw("checks", "[");
  for (const auto& c : st.checks()) {
    out += out.back() == '[' ? "{" : ",{";
    str("name", c.name);
    raw("ok", c.ok ? "true" : "false");
    str("detail", c.detail);
    out += '}';
  }
  out += ']';
  raw("target", "{");
  raw("configured", st.target.configured ? "true" : "false");
  raw("running", st.target.running ? "true" : "false");
  str("detail", st.target.detail);
  out += '}';
  raw("next_shutdown", "{");
  str("signal", s.signal);
  raw("kubelet_signals", st.kubelet.leaves_signal_to_kubelet() ? "true" : "false");
  str("summary", next_shutdown(s));
  str("shim_sigterm", s.sigterm_policy);
  if (st.kubelet.applies()) str("kubelet", st.kubelet.summary());
  if (st.plan.applies()) {
    const auto lb = st.lb_checks_shim(std::chrono::steady_clock::now());
    str("signal_plan", st.plan.line(lb));
    if (const auto& api = st.plan.apiserver()) {
      num("apiserver_shutdown_delay_seconds", api->delay);
      raw("apiserver_send_retry_after", api->send_retry_after ? "true" : "false");
    }
    raw("apiserver_stops_accepting_early", st.plan.stops_accepting_early(lb) ? "true" : "false");
    if (lb) raw("lb_checks_shim", *lb ? "true" : "false");
  }
  out += '}';
  raw("hold", "{");
  num("drain_delay_seconds", st.drain_delay);
  num("signal_delay_seconds", s.signal_delay);
  num("exit_timeout_seconds", s.exit_timeout);
  num("hold_needed_seconds", st.hold_needed);
  if (st.logind.delay_max_usec) {
    raw("logind_inhibit_delay_max_seconds",
        fmt::format("{:.3f}", static_cast<double>(*st.logind.delay_max_usec) / 1e6));
  }
  out += '}';
  if (s.elapsed) {
    raw("shutdown", "{");
    str("since", format_wall_time(st.phase_since_wall));
    str("cause", st.phase.cause);
    num("elapsed_seconds", *s.elapsed);
    raw("signal_sent", s.signal_sent ? "true" : "false");
    num("drain_left_seconds", std::max(st.drain_delay - *s.elapsed, nanoseconds(0)));
    num("hold_left_seconds", std::max(st.hold_needed - *s.elapsed, nanoseconds(0)));
    out += '}';
  }
  if (s.drill_elapsed && st.phase.drilling()) {
    raw("drill", "{");
    str("since", format_wall_time(st.phase_since_wall));
    str("cause", st.phase.cause);
    num("elapsed_seconds", *s.drill_elapsed);
    num("left_seconds", s.drill_left.value_or(nanoseconds(0)));
    out += '}';
  }
  if (!s.lb_line.empty() || !s.lb_fields.empty()) {
    raw("load_balancer", "{");
    str("summary", s.lb_line);
    for (const auto& [key, value] : s.lb_fields) str(key, value);
    out += '}';
  }
  if (!s.last_drill.empty()) str("last_drill", s.last_drill);
  out += "}\n";
  return out;
}

}  // namespace shim
