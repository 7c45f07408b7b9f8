#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "log/log_line.hpp"
#include "readiness/shim_status.hpp"

namespace shim {

// What `shutdown-shim status` shows (issue 23): what the shim is doing and would do at the next
// shutdown, rendered from the readiness table (shim_status) and what the sequence knows now. The
// control socket answers GET /status with the text and GET /status?json with the JSON; both come
// from one snapshot, so they never disagree.
struct status_snapshot {
  const shim_status& status;
  std::string_view version;
  std::string signal;          // what the target gets: "SIGTERM"
  std::string sigterm_policy;  // what a SIGTERM to the shim does, in --forward-on-sigterm's words
  std::chrono::nanoseconds signal_delay{0};
  std::chrono::nanoseconds exit_timeout{0};
  // During a shutdown hold: the time since the node turned unready, and whether the signal went.
  std::optional<std::chrono::nanoseconds> elapsed{};
  bool signal_sent = false;
  // During a drill: its length so far and what is left of it.
  std::optional<std::chrono::nanoseconds> drill_elapsed{};
  std::optional<std::chrono::nanoseconds> drill_left{};
  // The load balancer as the drill (or the shutdown) sees it: one line, and its figures.
  std::string lb_line{};
  log_fields lb_fields{};
  // The last drill's outcome, when one has ended since the shim started.
  std::string last_drill{};
};

std::string status_text(const status_snapshot& s);
std::string status_json(const status_snapshot& s);

}  // namespace shim
