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
  DrillStarted,  // `shutdown-shim drill`: unready for the load balancer, no signal, the lock kept
  DrillEnded,    // the drill is over: completed, stopped, or become a shutdown; what the LB did
  TargetRestarted,  // during a hold, a target that did not have the signal ran again, and got it
  KubeletGone,      // the kubelet that was to signal went: before its SIGTERM time, or after it
};

// Each event's name, the level it is logged at and its journal MESSAGE_ID, in event_kind's order.
// The ids are part of the journal's format (`journalctl MESSAGE_ID=...`, the catalog in
// unit-files/systemd/shutdown-shim.catalog): each was made once with `systemd-id128 new` and never
// changes. A new event gets a new one.
struct event_info {
  std::string_view name;
  log_level level;
  std::string_view message_id;  // 32 lower-case hex digits, as journalctl prints them
};

inline constexpr std::array<event_info, 25> kEvents{{
    {"Started", log_level::info, "d39434bb22bc4a5b94099cb7c85cd06b"},
    {"InhibitorTaken", log_level::info, "68ffbf32c42f4968a5a4acc64740696f"},
    {"ShutdownInitiated", log_level::notice, "d7b27f19a1164069902fd88173d016be"},
    {"SignalForwarded", log_level::notice, "023ce18841f144dc8d17270a5ea6e59e"},
    {"TargetExited", log_level::info, "d8d341098d71461ea2614c2739c29aee"},
    {"DrainElapsed", log_level::info, "bfd852632c0a4bb49a67b48ef650060c"},
    {"InhibitorReleased", log_level::notice, "af8ab1130a5244f4bf42f3420c66f14c"},
    {"ShutdownCancelled", log_level::info, "12ac20788ff64d6cbfb01cb0f8f087c0"},
    {"BusLost", log_level::warning, "60cfaa6537ca4e33a184b54178573d19"},
    {"BusRestored", log_level::info, "62407deff1b6404cb739443667dc6fb4"},
    // a change to the machine's configuration
    {"InhibitDelayEnsured", log_level::notice, "f27eb14e9d364dac9dbcefb2de8cde4e"},
    // a shutdown another run of the shim signalled for
    {"ShutdownResumed", log_level::notice, "9404b7059de64b17984db777dc28313d"},
    {"EventLogReopened", log_level::info, "b9f29c1cddc34df38a7f33dd017f53b2"},
    // the node leaves the load balancer
    {"TargetLost", log_level::warning, "2131ed6603734641957cb0ed8b5c6709"},
    {"TargetRunning", log_level::info, "8ee34f228fab4501ae10e7689cb4eb93"},
    // the node leaves the load balancer
    {"UpstreamFailed", log_level::warning, "c6c4c74138424a83a3b6a162abcf07b1"},
    {"UpstreamPassed", log_level::info, "12982ce1e9de45318a7e42762844bb11"},
    // whether the last reboot was drained in full
    {"PreviousShutdown", log_level::notice, "5fa676a1b23b4b1ab8c3db97df57578a"},
    {"KubeletShutdown", log_level::notice, "6d92b95102004a46a2f86ae0a4bd08ad"},
    {"SignalLeftToKubelet", log_level::notice, "2d6e7af2429247c996d93eed1be8240d"},
    // the lock goes until the next run takes it
    {"Restart", log_level::notice, "58c6c24b15114e5da3ca62e2d39f12e5"},
    // the node leaves the load balancer for a rehearsal
    {"DrillStarted", log_level::notice, "1cc3a3466bc7414ead01c4186009b302"},
    {"DrillEnded", log_level::notice, "d97d505b47b0400b833d1974653dec6d"},
    // kubelet restarted kube-apiserver during the hold
    {"TargetRestarted", log_level::notice, "ba0a6b79461e422b98162dca7e3eb6f0"},
    {"KubeletGone", log_level::notice, "d6790090333a44e79b46c0f053579e9f"},
}};

static_assert(kEvents.size() == static_cast<std::size_t>(event_kind::KubeletGone) + 1,
              "one entry per event_kind, in the same order");

// sd_id128_from_string's form: 32 hex digits, here lower-case only, so that one spelling matches.
constexpr bool is_message_id(std::string_view id) {
  if (id.size() != 32) return false;
  for (char c : id) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

constexpr bool message_ids_well_formed_and_unique() {
  for (std::size_t i = 0; i < kEvents.size(); ++i) {
    if (!is_message_id(kEvents[i].message_id)) return false;
    for (std::size_t j = 0; j < i; ++j) {
      if (kEvents[i].message_id == kEvents[j].message_id) return false;
    }
  }
  return true;
}

static_assert(message_ids_well_formed_and_unique(),
              "every MESSAGE_ID is 32 lower-case hex digits, and no two events share one");

constexpr std::string_view to_string(event_kind kind) {
  return kEvents[static_cast<std::size_t>(kind)].name;
}

constexpr log_level level_of(event_kind kind) {
  return kEvents[static_cast<std::size_t>(kind)].level;
}

constexpr std::string_view message_id_of(event_kind kind) {
  return kEvents[static_cast<std::size_t>(kind)].message_id;
}

}  // namespace shim
