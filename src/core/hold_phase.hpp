#pragma once

#include <chrono>
#include <string>
#include <string_view>

namespace shim {

// Where the hold stands, as the sequence has it. /readyz, STATUS=, /metrics and `status` all read
// this one value, so the phase is worded once (name()).
struct hold_phase {
  using time_point = std::chrono::steady_clock::time_point;
  enum class kind {
    idle,
    holding,          // a shutdown: unready, the reboot held for the signal, drain and exit
    released,         // the lock let go: the shutdown goes on
    awaiting_target,  // a cancelled shutdown whose signal went: unready until a target runs
    drilling,         // `shutdown-shim drill`: unready as at a shutdown, nothing else
  };

  kind what = kind::idle;
  std::string cause;   // who asked: "PrepareForShutdown(true) from :1.3", "SIGTERM", a drill's
  time_point since{};  // unready since (a shutdown's drain, or a drill's start)
  time_point ends{};   // drilling: when the drill ends

  // Unready because of a shutdown (not during a wait for the target after a cancel).
  bool draining() const { return what == kind::holding || what == kind::released; }
  bool drilling() const { return what == kind::drilling; }
  bool waiting_for_target() const { return what == kind::awaiting_target; }

  std::string_view name() const {
    switch (what) {
      case kind::holding:
        return "shutdown";
      case kind::released:
        return "released";
      case kind::awaiting_target:
        return "waiting-for-target";
      case kind::drilling:
        return "drill";
      case kind::idle:
        break;
    }
    return "idle";
  }
};

}  // namespace shim
