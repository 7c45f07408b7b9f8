#pragma once

#include <span>
#include <string>
#include <string_view>

namespace shim {

// `shutdown-shim status` and `shutdown-shim drill` (issue 23): clients of the running shim's
// control socket (<state-dir>/control.sock), root only. Each returns the process's exit code:
//   status: 0 ready, 1 not ready, 3 no shim listens, 4 the socket refused or failed the request
//   drill:  0 the drill ran (or was stopped) and every checker saw --lb-fall 503s in a row,
//           1 refused (a shutdown or a drill under way), or the load balancer's checkers did not
//             all see the drill, 3 no shim listens, 4 the socket failed the request
// Both: 2 for a usage error.
int status_command(std::span<const std::string_view> args);
int drill_command(std::span<const std::string_view> args);

inline constexpr std::string_view kStatusSynopsis = "[--json] [--state-dir=PATH]";
inline constexpr std::string_view kDrillSynopsis =
    "[--duration=D] [--lb-fall=N] [--stop] [--no-wait] [--json] [--state-dir=PATH]";

std::string status_usage_text();
std::string drill_usage_text();

}  // namespace shim
