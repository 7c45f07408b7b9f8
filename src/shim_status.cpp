#include "shim_status.hpp"

#include <fmt/format.h>

#include "config.hpp"
#include "event_log.hpp"
#include "logind_config.hpp"

namespace shim {

bool shim_status::ready() const {
  if (!listener_bound || draining || waiting_for_target) return false;
  return inhibitor != inhibitor_state::pending;
}

bool shim_status::logind_delay_too_short() const {
  return logind_delay_max_usec && inhibit_delay_too_short(*logind_delay_max_usec, hold_needed);
}

std::optional<std::string> shim_status::logind_delay_warning() const {
  if (!logind_delay_too_short()) return std::nullopt;
  return fmt::format(
      "logind's InhibitDelayMaxUSec is {} but drain-delay + exit-timeout is {}: logind will end "
      "the hold early; set InhibitDelayMaxSec= above it in a logind.conf.d drop-in (or run with "
      "--ensure-inhibit-delay)",
      describe_usec(*logind_delay_max_usec), format_duration(hold_needed));
}

std::vector<shim_status::check> shim_status::checks() const {
  std::vector<check> out;
  out.push_back({"listener", listener_bound, listener_bound ? "" : "not bound yet"});

  switch (inhibitor) {
    case inhibitor_state::disabled:
      out.push_back({"inhibitor", true, "disabled (--inhibit=off)"});
      break;
    case inhibitor_state::pending:
      out.push_back({"inhibitor", false, "taking the logind delay lock"});
      break;
    case inhibitor_state::held:
      out.push_back({"inhibitor", true, ""});
      break;
    case inhibitor_state::retrying:
      // Transient: reported here and in the log, but readiness does not depend on it.
      out.push_back({"inhibitor", true, "not held, retrying: " + inhibitor_detail});
      break;
    case inhibitor_state::released:
      out.push_back({"inhibitor", true, "released at the end of the shutdown hold"});
      break;
  }

  if (auto warning = logind_delay_warning()) {
    std::string detail = "warning: " + *warning;
    if (!logind_delay_ensure.empty()) detail += "; " + logind_delay_ensure;
    out.push_back({"logind-inhibit-delay", true, detail});
  } else if (!logind_delay_ensure.empty()) {
    out.push_back({"logind-inhibit-delay", true, logind_delay_ensure});
  }

  if (draining) {
    std::string since = draining_since ? format_wall_time(*draining_since) : "now";
    out.push_back({"shutdown", false, fmt::format("draining since {} ({})", since, drain_cause)});
  } else {
    out.push_back({"shutdown", true, ""});
  }
  if (waiting_for_target) {
    out.push_back({"target", false, "shutdown cancelled after the signal; waiting for the target"});
  }
  return out;
}

std::string status_line(const shim_status& status) {
  using state = shim_status::inhibitor_state;
  std::string text;
  if (status.draining) {
    text = status.inhibitor == state::released ? "hold over, unready: " + status.drain_cause
                                               : "draining, reboot on hold: " + status.drain_cause;
  } else if (status.waiting_for_target) {
    text = "shutdown cancelled; waiting for the target to run again";
  } else if (status.ready()) {
    if (status.inhibitor == state::held) {
      text = "ready; holding a logind delay lock";
    } else {
      text = "ready; no logind lock (" +
             (status.inhibitor_detail.empty() ? std::string("--inhibit=off")
                                              : status.inhibitor_detail) +
             ")";
    }
  } else {
    text = "starting";
  }
  if (status.logind_delay_too_short()) text += "; WARNING: logind InhibitDelayMaxSec too short";
  return text;
}

}  // namespace shim
