#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "log/event_kind.hpp"
#include "log/log_line.hpp"

namespace shim {

// One lifecycle event as a journal entry: the event log's record (event_recorder.hpp), member for
// member, under SHUTDOWN_SHIM_, so that `shutdown-shim report --journal` rebuilds the same record
// (journal_reader.hpp); journald adds _BOOT_ID and _PID, the record's boot_id and pid.
//   MESSAGE=<the line stderr would have had>   MESSAGE_ID=<kEvents' id>   PRIORITY=<the level>
//   SYSLOG_IDENTIFIER=<the program's name>     SHUTDOWN_SHIM_EVENT=<name>
//   SHUTDOWN_SHIM_CAUSE=<cause, if any>        SHUTDOWN_SHIM_MESSAGE=<the event's own words>
//   SHUTDOWN_SHIM_WALL= _MONOTONIC_US= _BOOTTIME_US=<the record's clocks>
//   SHUTDOWN_SHIM_<KEY>=<value> for each extra field (event_record_key's name, upper-case)
struct journal_event {
  event_kind kind;
  std::string_view cause;
  std::string_view message;
  std::string_view line;
  const log_fields& fields;
  std::string_view wall;
  std::int64_t monotonic_us;
  std::int64_t boottime_us;
};

inline constexpr std::string_view kJournalFieldPrefix = "SHUTDOWN_SHIM_";

// SHUTDOWN_SHIM_ and key upper-cased, every byte but [A-Z0-9_] as '_', cut at journald's 64 bytes.
std::string journal_field_name(std::string_view key);

// "NAME=value" for each field, in the order above.
std::vector<std::string> journal_fields(const journal_event& e);

// journald's native protocol (systemd.io/JOURNAL_NATIVE_PROTOCOL): "NAME=value\n" for each field,
// or, for a value with a line break in it, "NAME\n", its length as 64-bit little-endian, the
// value and "\n".
std::string native_datagram(const std::vector<std::string>& fields);

}  // namespace shim
