#include "report/previous_shutdown.hpp"

#include <fmt/format.h>

namespace shim {
namespace {

constexpr std::size_t kShortBootId = 8;
constexpr std::size_t kMaxDetail = 200;

}  // namespace

std::string previous_shutdown::summary() const {
  std::string text =
      fmt::format("{} at {}, boot {}", to_string(verdict), wall,
                  boot_id.empty() ? std::string("unknown") : boot_id.substr(0, kShortBootId));
  if (hold) {
    text += fmt::format(", hold {:.1f} s", *hold);
  } else if (records_span) {
    text += fmt::format(", records stop {:.1f} s into the hold", *records_span);
  }
  // Before the detail, which may be cut.
  if (restarts > 0)
    text += fmt::format(", {} restart{} of the shim", restarts, restarts == 1 ? "" : "s");
  if (!clean()) text += ": " + detail;
  return one_line(text, kMaxDetail);
}

log_fields previous_shutdown::fields() const {
  log_fields f{{"verdict", std::string(to_string(verdict))},
               {"previous_boot_id", boot_id},
               {"shutdown_wall", wall},
               {"trigger", trigger},
               {"detail", detail}};
  const auto add = [&f](const char* name, const std::optional<double>& s) {
    if (s) f.emplace_back(name, fmt::format("{:.3f}", *s));
  };
  add("hold_seconds", hold);
  add("records_span_seconds", records_span);
  add("unready_to_signal_seconds", unready_to_signal);
  add("signal_to_target_exit_seconds", signal_to_target_exit);
  f.emplace_back("restarts", std::to_string(restarts));
  return f;
}

}  // namespace shim
