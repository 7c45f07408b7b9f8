#pragma once

#include <array>
#include <cstddef>
#include <string_view>

#include "log/log_level.hpp"

namespace shim {

// The lifecycle events of the event log: what an operator reads after a reboot. Their names are
// part of the log's format; add new ones at the end.
enum class event_kind {
  Started,
  InhibitorTaken,
  ShutdownInitiated,
  SignalForwarded,
  TargetExited,
  DrainElapsed,
  InhibitorReleased,
  ShutdownCancelled,
  BusLost,
  BusRestored,
  InhibitDelayEnsured,  // --ensure-inhibit-delay wrote its drop-in and logind took the value
  ShutdownResumed,      // a restarted shim holds on for a shutdown an earlier run signalled for
  EventLogReopened,     // SIGHUP (logrotate): the event log was opened again at its path
  TargetLost,           // the target exited outside a shutdown (or before its signal)
  TargetRunning,        // a target was found (at start, or again after TargetLost or a cancel)
  UpstreamFailed,       // the upstream check turned failed (--upstream-fall failures in a row)
  UpstreamPassed,       // the upstream check turned passed (--upstream-rise passes in a row)
  PreviousShutdown,     // at start: what became of the last shutdown of an earlier boot
  KubeletShutdown,      // at a shutdown: what kubelet's graceful node shutdown is expected to do
  SignalLeftToKubelet,  // kubelet sends the target's signal; the shim counts it, sends none
  Restart,  // the shim's own stop (SIGTERM, SIGINT) while no shutdown is under way: not a shutdown
};

// Each event's name and the level it is logged at, in event_kind's order.
struct event_info {
  std::string_view name;
  log_level level;
};

inline constexpr std::array<event_info, 21> kEvents{{
    {"Started", log_level::info},
    {"InhibitorTaken", log_level::info},
    {"ShutdownInitiated", log_level::notice},
    {"SignalForwarded", log_level::notice},
    {"TargetExited", log_level::info},
    {"DrainElapsed", log_level::info},
    {"InhibitorReleased", log_level::notice},
    {"ShutdownCancelled", log_level::info},
    {"BusLost", log_level::warning},
    {"BusRestored", log_level::info},
    {"InhibitDelayEnsured", log_level::notice},  // a change to the machine's configuration
    {"ShutdownResumed", log_level::notice},      // a shutdown another run of the shim signalled for
    {"EventLogReopened", log_level::info},
    {"TargetLost", log_level::warning},  // the node leaves the load balancer
    {"TargetRunning", log_level::info},
    {"UpstreamFailed", log_level::warning},  // the node leaves the load balancer
    {"UpstreamPassed", log_level::info},
    {"PreviousShutdown", log_level::notice},  // whether the last reboot was drained in full
    {"KubeletShutdown", log_level::notice},
    {"SignalLeftToKubelet", log_level::notice},
    {"Restart", log_level::notice},  // the lock goes until the next run takes it
}};

static_assert(kEvents.size() == static_cast<std::size_t>(event_kind::Restart) + 1,
              "one entry per event_kind, in the same order");

constexpr std::string_view to_string(event_kind kind) {
  return kEvents[static_cast<std::size_t>(kind)].name;
}

constexpr log_level level_of(event_kind kind) {
  return kEvents[static_cast<std::size_t>(kind)].level;
}

}  // namespace shim
