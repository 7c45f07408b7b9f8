#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "apiserver/signal_plan.hpp"
#include "core/hold_phase.hpp"
#include "kubelet/kubelet_outlook.hpp"
#include "logind/logind_row.hpp"
#include "process/kubelet_handoff.hpp"
#include "process/target_row.hpp"
#include "report/previous_shutdown.hpp"
#include "upstream/upstream_status.hpp"

namespace shim {

class event_recorder;
class logger;

// What the shim knows about itself, read by the HTTP server (/readyz, /metrics) and sd_notify
// STATUS=. Written only from the event loop's thread; there is no other thread.
struct shim_status {
  bool listener_bound = false;
  // The inhibitor and logind-delay rows, written by logind_edge.
  logind_row logind;

  // The sequence's phase, taken after each of its batches (shutdown_shim::settled): unready at once
  // with a shutdown or a drill, ready again only once the sequence says so.
  hold_phase phase;
  // phase.since by the wall clock, read once when it is first seen: every scrape shows one value.
  std::chrono::system_clock::time_point phase_since_wall{};
  void set_phase(hold_phase now);
  std::uint64_t drills = 0;  // started since the shim started

  // The target check, when a target is configured (a wrapped child or a --target-* flag).
  target_row target;

  // The upstream check: only with --upstream-readyz.
  std::optional<upstream_status> upstream;

  // What kubelet's graceful node shutdown will do to kube-apiserver (the check kubelet-shutdown).
  kubelet_outlook kubelet;

  // When the one SIGTERM goes, from kube-apiserver's own shutdown delay (the check signal-plan).
  signal_plan plan;
  // Probes of /readyz from TCP peers (issue 32): a load balancer checks the shim when one probed in
  // the last kLbProbeWindow; known once the listener has answered that long.
  static constexpr std::chrono::seconds kLbProbeWindow{60};
  std::optional<std::chrono::steady_clock::time_point> listening_since;
  std::optional<std::chrono::steady_clock::time_point> last_probe;
  std::optional<bool> lb_checks_shim(std::chrono::steady_clock::time_point now) const;

  std::chrono::nanoseconds drain_delay{0};
  std::chrono::nanoseconds hold_needed{0};  // drain-delay + exit-timeout

  // What the event log says of the last shutdown of an earlier boot, read once at start; none
  // when there is no such shutdown (or no event log).
  std::optional<previous_shutdown> previous;

  // Where /metrics reads what logging lost (lines dropped, event records not written); null when
  // there is none (tests).
  const logger* log = nullptr;
  const event_recorder* events = nullptr;

  // Readiness is one table of named checks (shim_status.cpp), the one source of /readyz,
  // /readyz?verbose, /metrics and STATUS=: ready when every check passes, except those named in
  // `excluded` (kube's ?exclude=NAME; names of no check are ignored).
  bool ready(std::span<const std::string_view> excluded = {}) const;

  // kubelet's SIGTERM window, for the target's record of a signal left to kubelet.
  kubelet_handoff handoff_to_kubelet() const;

  // logind would end the hold before the shim does.
  bool logind_delay_too_short() const;
  std::optional<std::string> logind_delay_warning() const;

  struct check {
    std::string_view name;
    bool ok;
    std::string detail;  // empty when ok and nothing to add
  };
  // The table's checks that apply now, in a stable order, with their details.
  std::vector<check> checks() const;
};

// The one line sent as sd_notify STATUS=, as systemctl status shows it, rendered from checks():
// "ready; ..." exactly when ready(), else the drain or "unready", then each failed check.
std::string status_line(const shim_status& status);

}  // namespace shim
