#include "readiness/shim_status.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "log/log_line.hpp"
#include "util/duration_text.hpp"

namespace shim {

bool shim_status::logind_delay_too_short() const { return logind.delay_too_short(hold_needed); }

std::optional<std::string> shim_status::logind_delay_warning() const {
  return logind.delay_warning(hold_needed);
}

kubelet_handoff shim_status::handoff_to_kubelet() const {
  const auto& plan = kubelet.plan();
  return {.window = plan ? plan->sigterm_window() : "?", .fields = kubelet.window_fields()};
}

std::optional<bool> shim_status::lb_checks_shim(std::chrono::steady_clock::time_point now) const {
  if (last_probe && now - *last_probe <= kLbProbeWindow) return true;
  if (!listening_since || now - *listening_since < kLbProbeWindow) return std::nullopt;
  return false;
}

namespace {

// Every detail shown in /readyz?verbose and STATUS= goes through one_line(): a D-Bus error text
// can span lines, and one line per check is the format. The cap is above the longest line the shim
// writes itself (KubeletOutlook.TheLongestLineIsNotCut); a parse error or a D-Bus error may run
// past it, and is cut there.
constexpr std::size_t kMaxCheckDetail = 2048;
// STATUS= as a whole: the drain or readiness, then each failed check.
constexpr std::size_t kMaxStatusLine = 1024;

// One row of the readiness table. `applies`: whether the check exists now (the upstream check only
// with --upstream-readyz, the logind delay check only when there is something to say); `ok` is
// cheap, for every /readyz; `detail` is computed only when a line is shown.
struct check_def {
  std::string_view name;
  bool (*applies)(const shim_status&);
  bool (*ok)(const shim_status&);
  std::string (*detail)(const shim_status&);
};

bool always(const shim_status&) { return true; }

std::string logind_delay_detail(const shim_status& s) {
  if (auto warning = s.logind_delay_warning()) {
    std::string detail = "warning: " + *warning;
    if (!s.logind.delay_ensure.empty()) detail += "; " + s.logind.delay_ensure;
    return detail;
  }
  return s.logind.delay_ensure;
}

std::string drill_detail(const shim_status& s) {
  const auto now = std::chrono::steady_clock::now();
  const auto left = s.phase.ends > now ? s.phase.ends - now : std::chrono::nanoseconds(0);
  return fmt::format("a drill since {} ({}), {} left; `shutdown-shim drill --stop` ends it",
                     format_wall_time(s.phase_since_wall), s.phase.cause,
                     format_duration(std::chrono::ceil<std::chrono::seconds>(left)));
}

// In the order /readyz?verbose lists them.
constexpr std::array<check_def, 10> kChecks{{
    {"listener", always, [](const shim_status& s) { return s.listener_bound; },
     [](const shim_status& s) { return std::string(s.listener_bound ? "" : "not bound yet"); }},
    // Fails only until the first attempt has finished: a lock that cannot be taken (auto mode) or
    // is briefly lost with the bus is a transient fault, reported but not turned into
    // unreadiness. A shutdown is.
    {"inhibitor", always,
     [](const shim_status& s) {
       return s.logind.inhibitor != logind_row::inhibitor_state::pending;
     },
     [](const shim_status& s) { return s.logind.lock_detail(); }},
    // Informational: a configuration warning, never a readiness failure.
    {"logind-inhibit-delay",
     [](const shim_status& s) {
       return s.logind_delay_too_short() || !s.logind.delay_ensure.empty();
     },
     always, logind_delay_detail},
    {"shutdown", always, [](const shim_status& s) { return !s.phase.draining(); },
     [](const shim_status& s) {
       if (!s.phase.draining()) return std::string();
       return fmt::format("draining since {} ({})", format_wall_time(s.phase_since_wall),
                          s.phase.cause);
     }},
    // Only during a drill, which it fails: unready for the load balancer as at a shutdown.
    {"drill", [](const shim_status& s) { return s.phase.drilling(); },
     [](const shim_status&) { return false; }, drill_detail},
    {"target",
     [](const shim_status& s) { return s.target.configured || s.phase.waiting_for_target(); },
     [](const shim_status& s) { return s.target.running && !s.phase.waiting_for_target(); },
     [](const shim_status& s) {
       if (!s.phase.waiting_for_target()) return s.target.detail;
       return std::string(
           "shutdown cancelled after the signal; waiting for a target that did not "
           "have it");
     }},
    {"upstream", [](const shim_status& s) { return s.upstream.has_value(); },
     [](const shim_status& s) { return s.upstream->passed(); },
     [](const shim_status& s) { return s.upstream->detail(); }},
    // Informational, like kubelet-shutdown: who sends the next shutdown's SIGTERM, and when.
    {"signal-plan", [](const shim_status& s) { return s.plan.applies(); }, always,
     [](const shim_status& s) {
       return s.plan.line(s.lb_checks_shim(std::chrono::steady_clock::now()));
     }},
    // Informational: what kubelet will do is a fact about the next shutdown, not a reason to leave
    // the load balancer now.
    {"kubelet-shutdown", [](const shim_status& s) { return s.kubelet.applies(); }, always,
     [](const shim_status& s) { return s.kubelet.summary(); }},
    // Informational, like logind-inhibit-delay: the past never makes the node unready.
    {"previous-shutdown", [](const shim_status& s) { return s.previous.has_value(); }, always,
     [](const shim_status& s) { return s.previous->summary(); }},
}};

}  // namespace

bool shim_status::ready(std::span<const std::string_view> excluded) const {
  for (const auto& def : kChecks) {
    if (!def.applies(*this) || def.ok(*this)) continue;
    if (std::find(excluded.begin(), excluded.end(), def.name) == excluded.end()) return false;
  }
  return true;
}

std::vector<shim_status::check> shim_status::checks() const {
  std::vector<check> out;
  for (const auto& def : kChecks) {
    if (def.applies(*this)) {
      out.push_back({def.name, def.ok(*this), one_line(def.detail(*this), kMaxCheckDetail)});
    }
  }
  return out;
}

void shim_status::set_phase(hold_phase now) {
  if (now.since != phase.since) phase_since_wall = wall_time_of(now.since);
  phase = std::move(now);
}

std::string status_line(const shim_status& status) {
  using state = logind_row::inhibitor_state;
  const auto checks = status.checks();
  const bool ready = std::all_of(checks.begin(), checks.end(), [](const auto& c) { return c.ok; });
  std::string text;
  if (status.phase.draining()) {
    // The shutdown check, in the words of the hold.
    const std::string cause = one_line(status.phase.cause, kMaxCheckDetail);
    text = status.phase.what == hold_phase::kind::released ? "hold over, unready: " + cause
                                                           : "draining, reboot on hold: " + cause;
  } else if (status.phase.drilling()) {
    text = "drill, unready for the load balancer: " + drill_detail(status);
  } else if (ready) {
    text = status.logind.inhibitor == state::held
               ? "ready; holding a logind delay lock"
               : "ready; no logind lock (" +
                     (status.logind.inhibitor_detail.empty()
                          ? std::string("--inhibit=off")
                          : one_line(status.logind.inhibitor_detail, kMaxCheckDetail)) +
                     ")";
    if (status.plan.applies()) text += "; next shutdown: " + status.plan.headline();
  } else {
    text = "unready";
  }
  for (const auto& c : checks) {
    if (c.ok || c.name == "shutdown" || c.name == "drill") continue;  // said first
    text += fmt::format("; {} failed", c.name);
    if (!c.detail.empty()) text += ": " + c.detail;
  }
  if (status.logind_delay_too_short()) text += "; WARNING: logind InhibitDelayMaxSec too short";
  if (status.kubelet.cuts_drain()) text += "; WARNING: kubelet's SIGKILL cuts the drain";
  if (status.kubelet.second_signal()) text += "; WARNING: kubelet may send a second SIGTERM";
  if (status.kubelet.stops_etcd_with_apiserver() == true) {
    text += "; WARNING: kubelet stops etcd with kube-apiserver";
  }
  if (status.plan.stops_accepting_early(status.lb_checks_shim(std::chrono::steady_clock::now()))) {
    text += "; WARNING: kube-apiserver stops accepting before the load balancer has drained";
  }
  return one_line(text, kMaxStatusLine);
}

}  // namespace shim
