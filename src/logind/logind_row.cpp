#include "logind/logind_row.hpp"

#include <fmt/format.h>

#include "logind/logind_config.hpp"
#include "util/duration_text.hpp"

namespace shim {

namespace {

// Each lock state's word for `status` and its check's detail, in inhibitor_state's order.
struct lock_words {
  std::string_view word;
  std::string_view detail;
};
constexpr lock_words kLockWords[] = {
    {"off", "disabled (--inhibit=off)"},
    {"pending", "taking the logind delay lock"},
    {"held", ""},
    {"retrying", "not held, retrying: "},
    {"released", "released at the end of the shutdown hold"},
};

}  // namespace

std::string_view logind_row::lock_word() const {
  return kLockWords[static_cast<std::size_t>(inhibitor)].word;
}

std::string logind_row::lock_detail() const {
  std::string detail(kLockWords[static_cast<std::size_t>(inhibitor)].detail);
  return inhibitor == inhibitor_state::retrying ? detail + inhibitor_detail : detail;
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
