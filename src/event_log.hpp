#pragma once

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config.hpp"
#include "event_kind.hpp"
#include "result.hpp"
#include "unique_fd.hpp"

namespace shim {

enum class log_level { error = 3, warning = 4, notice = 5, info = 6, debug = 7 };  // sd-daemon.h's

// Extra key/value pairs for a log line or an event, in the order given. Values are strings; JSON
// output quotes them.
using log_fields = std::vector<std::pair<std::string, std::string>>;

// Log lines to stderr, as text ("LEVEL message key=value") or as JSON lines. When stderr is the
// journal (JOURNAL_STREAM names stderr's device and inode) each line starts with sd-daemon's "<N>".
class logger {
 public:
  logger(log_format format, std::FILE* out, bool journal_prefix);
  // Detects the journal from JOURNAL_STREAM and fstat(stderr).
  static logger for_stderr(log_format format);

  void log(log_level level, std::string_view message, const log_fields& fields = {});
  void error(std::string_view m, const log_fields& f = {}) { log(log_level::error, m, f); }
  void warning(std::string_view m, const log_fields& f = {}) { log(log_level::warning, m, f); }
  void notice(std::string_view m, const log_fields& f = {}) { log(log_level::notice, m, f); }
  void info(std::string_view m, const log_fields& f = {}) { log(log_level::info, m, f); }

 private:
  log_format format_;
  std::FILE* out_;
  bool journal_prefix_;
};

// Lifecycle events: each is logged and, with --event-log, appended to that file as one JSON object
// per line and flushed at once, so that an operator can prove after a reboot what happened:
// {"event":"SignalForwarded","wall":"2026-11-29T16:36:07.123456Z","monotonic_us":123456789,
//  "cause":"PrepareForShutdown(true)","message":"...", ...fields}
class event_recorder {
 public:
  // Opens path (O_APPEND|O_CLOEXEC, created 0644) unless it is empty. Throws std::system_error.
  event_recorder(logger& log, const std::string& path);

  // at: when the event happened, if earlier than now (the three clocks are moved back by as
  // much); steady_clock is CLOCK_MONOTONIC.
  // Opens the file again at its path (SIGHUP after logrotate renamed it); keeps the old one when
  // the new open fails.
  result<> reopen();

  void record(event_kind kind, std::string_view cause, std::string_view message,
              const log_fields& fields = {},
              std::optional<std::chrono::steady_clock::time_point> at = std::nullopt);

 private:
  logger& log_;
  std::string path_;
  unique_fd file_;
};

// Escapes a string for inclusion in JSON (without the surrounding quotes).
std::string json_escape(std::string_view s);

// RFC 3339 UTC with microseconds: "2026-11-29T16:36:07.123456Z".
std::string format_wall_time(std::chrono::system_clock::time_point t);

}  // namespace shim
