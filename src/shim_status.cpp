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
  if (!logind_delay_max_usec) return false;
  // Unsigned: "infinity" is UINT64_MAX, which chrono's signed microseconds would make negative.
  const auto needed = std::chrono::ceil<std::chrono::microseconds>(hold_needed).count();
  return *logind_delay_max_usec < static_cast<std::uint64_t>(needed);
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

}  // namespace shim
