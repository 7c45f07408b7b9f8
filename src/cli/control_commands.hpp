#pragma once

#include <span>
#include <string_view>

#include "cli/command_outcome.hpp"

namespace shim {

// `shutdown-shim status` and `shutdown-shim drill` (issue 23): clients of the running shim's
// control socket (<state-dir>/control.sock), root only. Each throws usage_error, else returns:
//   status: ok ready, failed not ready, not_found no shim listens, unreadable the socket refused
//           or failed the request
//   drill:  ok the drill ran (or was stopped) and every checker saw --lb-fall 503s in a row,
//           failed refused (a shutdown or a drill under way), or the load balancer's checkers did
//           not all see the drill, not_found no shim listens, unreadable the socket failed the
//           request
command_outcome status_command(std::span<const std::string_view> args);
command_outcome drill_command(std::span<const std::string_view> args);

inline constexpr std::string_view kStatusSynopsis = "[--json] [--state-dir=PATH]";
inline constexpr std::string_view kDrillSynopsis =
    "[--duration=D] [--lb-fall=N] [--stop] [--no-wait] [--json] [--state-dir=PATH]";

}  // namespace shim
