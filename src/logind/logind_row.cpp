#include "logind/logind_row.hpp"

#include <fmt/format.h>

#include "logind/logind_config.hpp"
#include "util/duration_text.hpp"

namespace shim {

std::string_view logind_row::lock_word() const {
  switch (inhibitor) {
    case inhibitor_state::disabled:
      return "off";
    case inhibitor_state::pending:
      return "pending";
    case inhibitor_state::held:
      return "held";
    case inhibitor_state::retrying:
      return "retrying";
    case inhibitor_state::released:
      return "released";
  }
  return "unknown";
}

std::string logind_row::lock_detail() const {
  switch (inhibitor) {
    case inhibitor_state::disabled:
      return "disabled (--inhibit=off)";
    case inhibitor_state::pending:
      return "taking the logind delay lock";
    case inhibitor_state::held:
      return {};
    case inhibitor_state::retrying:
      return "not held, retrying: " + inhibitor_detail;
    case inhibitor_state::released:
      return "released at the end of the shutdown hold";
  }
  return {};
}

bool logind_row::delay_too_short(std::chrono::nanoseconds hold) const {
  return delay_max_usec && inhibit_delay_too_short(*delay_max_usec, hold);
}

std::optional<std::string> logind_row::delay_warning(std::chrono::nanoseconds hold) const {
  if (!delay_too_short(hold)) return std::nullopt;
  return fmt::format(
      "logind's InhibitDelayMaxUSec is {} but drain-delay + exit-timeout is {}: logind will end "
      "the hold early; set InhibitDelayMaxSec= above it in a logind.conf.d drop-in (or run with "
      "--ensure-inhibit-delay)",
      describe_usec(*delay_max_usec), format_duration(hold));
}

}  // namespace shim
