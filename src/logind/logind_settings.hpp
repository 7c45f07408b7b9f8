#pragma once

#include <chrono>
#include <string>

namespace shim {

// --ensure-inhibit-delay: off only reports a too-short InhibitDelayMaxSec; best_effort raises it
// and goes on with a warning if it cannot; required exits 1 if it cannot.
enum class ensure_mode { off, best_effort, required };

// What the system bus edge needs of the shim's flags.
struct logind_settings {
  std::chrono::nanoseconds drain_delay{0};
  std::chrono::nanoseconds exit_timeout{0};
  ensure_mode ensure_inhibit_delay = ensure_mode::off;
  // Where --ensure-inhibit-delay writes its drop-in; its parent holds logind.conf.
  std::string logind_conf_dir = "/etc/systemd/logind.conf.d";
};

}  // namespace shim
