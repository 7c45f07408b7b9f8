#include "upstream/upstream_health.hpp"

#include <fmt/format.h>

#include "log/log_line.hpp"

namespace shim {

bool upstream_health::record(const outcome& o) {
  probed_ = true;
  if (o.pass) {
    failures_ = 0;
    ++passes_;
    if (!passed_ && passes_ >= rise_) return passed_ = true;
    return false;
  }
  passes_ = 0;
  ++failures_;
  last_failure_ = o;
  if (passed_ && failures_ >= fall_) {
    passed_ = false;
    return true;
  }
  return false;
}

std::string upstream_health::detail() const {
  if (!probed_) return "not probed yet";
  const std::string last =
      failures_ == 0 && last_failure_.error.empty()
          ? std::string()
          : fmt::format("last: {} at {}", last_failure_.error, format_wall_time(last_failure_.at));
  if (passed_) {
    if (failures_ == 0) return {};
    return fmt::format("{} consecutive failure{} (fails at {}), {}", failures_,
                       failures_ == 1 ? "" : "s", fall_, last);
  }
  if (failures_ > 0) {
    return fmt::format("{} consecutive failure{}, {}", failures_, failures_ == 1 ? "" : "s", last);
  }
  return fmt::format("{} of {} passes needed{}", passes_, rise_, last.empty() ? "" : "; " + last);
}

}  // namespace shim
