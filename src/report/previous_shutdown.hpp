#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "log/log_line.hpp"
#include "report/shutdown_verdict.hpp"

namespace shim {

// The last shutdown of an earlier boot, as the daemon finds it in its event log at start: the
// PreviousShutdown event, the shutdown_shim_previous_shutdown_* metrics and an informational line
// in /readyz?verbose. Judged by the rules of `shutdown-shim report` (shutdown_account.hpp), without
// the journal's word on a hold cut short (the report gives that).
struct previous_shutdown {
  std::string boot_id;  // empty: an older shim's records, without boot_id
  std::string wall;     // when the shutdown began
  std::string trigger;
  shutdown_verdict verdict = shutdown_verdict::clean;
  std::string detail;
  // Seconds, when the records hold both ends (a hold cut short has no end).
  std::optional<double> hold;
  std::optional<double> records_span;  // unready to the holding run's last record
  std::optional<double> unready_to_signal;
  std::optional<double> signal_to_target_exit;
  std::uint64_t restarts = 0;  // of the shim in that boot: never part of the verdict (issue 22)

  bool clean() const { return verdict == shutdown_verdict::clean; }

  // One line: "clean, boot 0123abcd, hold 3.0 s, ...", for ?verbose and the event's message.
  std::string summary() const;
  // The event's fields: verdict, boot, the figures that are known.
  log_fields fields() const;
};

}  // namespace shim
