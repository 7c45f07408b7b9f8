#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "log/log_level.hpp"

namespace shim {

// Extra key/value pairs for a log line or an event, in the order given. Values are strings; JSON
// output quotes them.
using log_fields = std::vector<std::pair<std::string, std::string>>;

// Escapes a string for inclusion in JSON (without the surrounding quotes). Bytes that are not
// UTF-8 become U+FFFD, so that the result is always valid JSON.
std::string json_escape(std::string_view s);

// For the text format, where a message must stay on one line: control characters are escaped
// (as JSON would), every other byte is left as it is.
std::string escape_controls(std::string_view s);

// Text shown where one line is all there is (/readyz?verbose, sd_notify STATUS=, a report's
// table): every run of whitespace and control characters, line breaks included, becomes one
// space, the ends are trimmed, and if more than max bytes are left it is cut at a UTF-8 character
// boundary and ends in "..." (max bytes in all). A D-Bus error text can span several lines.
std::string one_line(std::string_view text, std::size_t max);

// A logfmt-style value for the text format: bare when unambiguous (no space, control character,
// quote or '='), otherwise quoted with JSON escapes.
void append_text_value(std::string& out, std::string_view value);

// "key":"value" with both escaped.
void append_json_string(std::string& out, std::string_view key, std::string_view value);

// RFC 3339 UTC with microseconds: "2026-11-29T16:36:07.123456Z".
std::string format_wall_time(std::chrono::system_clock::time_point t);
// The wall clock's time at the steady clock's moment t, as the wall clock reads now.
std::chrono::system_clock::time_point wall_time_of(std::chrono::steady_clock::time_point t);

// One log line, ending in '\n' and containing no other line break:
//   text:  "2026-11-29T16:36:07.123456Z INFO message key=value"
//   json:  {"time":"...","level":"info","msg":"message","key":"value"}
// With journal_prefix the line starts with sd-daemon's "<N>" and the text format leaves the time
// and level out (the journal records both).
std::string format_log_line(log_format format, bool journal_prefix, log_level level,
                            std::string_view message, const log_fields& fields,
                            std::chrono::system_clock::time_point now);

}  // namespace shim
