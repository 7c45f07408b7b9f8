#pragma once

#include <array>
#include <cstddef>
#include <string_view>

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
};

inline constexpr std::array<std::string_view, 13> kEventNames{
    "Started",          "InhibitorTaken", "ShutdownInitiated",   "SignalForwarded",
    "TargetExited",     "DrainElapsed",   "InhibitorReleased",   "ShutdownCancelled",
    "BusLost",          "BusRestored",    "InhibitDelayEnsured", "ShutdownResumed",
    "EventLogReopened",
};

static_assert(kEventNames.size() == static_cast<std::size_t>(event_kind::EventLogReopened) + 1,
              "one name per event_kind, in the same order");

constexpr std::string_view to_string(event_kind kind) {
  return kEventNames[static_cast<std::size_t>(kind)];
}

}  // namespace shim
