#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "util/result.hpp"

namespace shim {

// What `shutdown-shim report` needs of one event log record (event_recorder.hpp has the format).
// Keys it does not know are ignored, and a record of an older version may lack any of the
// optional ones.
struct event_record {
  std::string event;
  std::string wall;
  std::optional<std::int64_t> monotonic_us;
  std::optional<std::int64_t> boottime_us;
  std::string boot_id;  // empty: written before boot_id existed, or unreadable then
  std::int64_t pid = 0;
  std::string cause;
  std::string message;
  std::optional<std::uint64_t> inhibit_delay_max_usec;  // ShutdownInitiated and ShutdownResumed
  std::string lb;  // DrainElapsed, DrillEnded: what the load balancer's checkers did (issue 23)
};

// Sets the member named key (the event log's name for it) from its text; unknown keys, and
// numbers that are not, leave the record as it was.
void set_event_member(event_record& r, std::string_view key, std::string value);

// One line of the event log as a record; nullopt when it is not one (torn, not JSON, no "event").
std::optional<event_record> parse_event_record(std::string_view line);

// Splits an event log into lines and hands each record on, holding at most one line at a time:
// the log is streamed, never loaded whole. Lines that are not records are skipped and counted: a
// torn line (the disk filled up, or the node lost power mid-write), an overlong one.
class event_line_reader {
 public:
  // A line longer than this is skipped (the shim's records are a few hundred bytes).
  static constexpr std::size_t kMaxLine = 64 * 1024;

  struct handlers {
    std::function<void(const event_record&)> record;
  };
  explicit event_line_reader(handlers h) : handlers_(std::move(h)) {}

  // The next bytes of a file, cut anywhere.
  void feed(std::string_view bytes);
  // The end of a file: its last line counts even without its '\n' if it is a whole record.
  void finish();

  // Streams the file at path through feed() and finish(). false when it does not exist; an error
  // naming the path when it cannot be read.
  result<bool> read_file(const std::string& path);

  std::uint64_t skipped_lines() const { return skipped_; }

 private:
  void line(std::string_view text);

  handlers handlers_;
  std::string partial_;    // the start of a line whose end has not come yet
  bool overlong_ = false;  // the current line passed kMaxLine: skip up to its end
  std::uint64_t skipped_ = 0;
};

}  // namespace shim
