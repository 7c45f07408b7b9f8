#include "log/event_recorder.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <stdexcept>
#include <system_error>
#include <utility>

#include "log/journal_entry.hpp"
#include "util/boot_id.hpp"
#include "util/errno_error.hpp"
#include "util/small_file.hpp"

namespace shim {
namespace {

constexpr std::array<std::string_view, 8> kReservedEventKeys{
    "event", "wall", "monotonic_us", "boottime_us", "boot_id", "pid", "cause", "message"};

[[noreturn]] void refuse_not_regular(const std::string& path, mode_t mode) {
  throw std::runtime_error(
      fmt::format("--event-log {}: {}, not a regular file", path, file_type_name(mode)));
}

// Only a regular file: a FIFO's reader could stall every write, and the loop with it. O_NONBLOCK
// keeps open() itself from waiting: for a FIFO with no reader it fails at once with ENXIO, as it
// does for a socket; for a regular file it changes nothing we rely on.
unique_fd open_event_log(const std::string& path) {
  const int fd =
      ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, 0644);
  if (fd < 0) {
    const int error = errno;
    struct stat st {};
    if (error == ENXIO && ::stat(path.c_str(), &st) == 0) refuse_not_regular(path, st.st_mode);
    throw_errno(error, "open event log " + path);
  }
  unique_fd file(fd);
  struct stat st {};
  check_libc(::fstat(fd, &st), "fstat event log " + path);
  if (!S_ISREG(st.st_mode)) refuse_not_regular(path, st.st_mode);
  return file;
}

bool same_file(int a, int b) {
  struct stat sa {};
  struct stat sb {};
  return ::fstat(a, &sa) == 0 && ::fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

std::int64_t clock_microseconds(clockid_t id) {
  timespec ts{};
  if (::clock_gettime(id, &ts) != 0) return -1;
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000 + ts.tv_nsec / 1'000;
}

// When the event happened, on the three clocks of the record.
struct event_clocks {
  std::string wall;
  std::int64_t monotonic_us;
  std::int64_t boottime_us;
};

// The record as one JSON line.
std::string event_line(std::string_view name, std::string_view boot_id, std::string_view cause,
                       std::string_view message, const log_fields& fields, const event_clocks& at) {
  std::string line;
  line.reserve(256);
  line += '{';
  append_json_string(line, "event", name);
  line += ',';
  append_json_string(line, "wall", at.wall);
  line += fmt::format(",\"monotonic_us\":{},\"boottime_us\":{},", at.monotonic_us, at.boottime_us);
  // Both clocks start again at every boot: the boot id says which boot they count from.
  append_json_string(line, "boot_id", boot_id);
  line += fmt::format(",\"pid\":{},", ::getpid());
  append_json_string(line, "cause", cause);
  line += ',';
  append_json_string(line, "message", message);
  for (const auto& [key, value] : fields) {
    line += ',';
    append_json_string(line, event_record_key(key), value);
  }
  line += "}\n";
  return line;
}

}  // namespace

std::string event_record_key(const std::string& key) {
  // Duplicate keys make a JSON object ambiguous (jq keeps the last), so an extra field named like
  // a fixed key, e.g. the target's "pid", is written as "field_pid".
  const bool reserved = std::find(kReservedEventKeys.begin(), kReservedEventKeys.end(), key) !=
                        kReservedEventKeys.end();
  return reserved ? "field_" + key : key;
}

event_recorder::event_recorder(logger& log, std::string path, std::string journal)
    : log_(log), path_(std::move(path)), boot_id_(current_boot_id().value_or("")) {
  if (!path_.empty()) file_ = open_event_log(path_);
  if (!journal.empty()) journal_.emplace(std::move(journal));
}

void event_recorder::record(event_kind kind, std::string_view cause, std::string_view message,
                            const log_fields& fields,
                            std::optional<std::chrono::steady_clock::time_point> at) noexcept {
  const std::string_view name = to_string(kind);
  ++recorded_[static_cast<std::size_t>(kind)];
  const std::int64_t monotonic_now = clock_microseconds(CLOCK_MONOTONIC);
  const std::int64_t age =
      at ? std::max<std::int64_t>(
               0, monotonic_now -
                      std::chrono::duration_cast<std::chrono::microseconds>(at->time_since_epoch())
                          .count())
         : 0;

  event_clocks at_clocks{.wall = {},
                         .monotonic_us = monotonic_now - age,
                         .boottime_us = clock_microseconds(CLOCK_BOOTTIME) - age};
  try {
    at_clocks.wall =
        format_wall_time(std::chrono::system_clock::now() - std::chrono::microseconds(age));
  } catch (...) {
    // No memory: the line below cannot be built either, and says so.
  }

  // The file first: it is the evidence that survives the reboot.
  if (file_) {
    int error = ENOMEM;  // until the line is built
    try {
      std::string line = event_line(name, boot_id_, cause, message, fields, at_clocks);
      // After a torn record that could not be cut off, start on a fresh line: the torn one stays
      // invalid, this one is whole.
      if (torn_) line.insert(line.begin(), '\n');
      error = append(line);
    } catch (const std::exception&) {
    }
    if (error != 0) {
      ++failed_;
      try {
        log_.error(
            "cannot write to the event log",
            {{"event", std::string(name)}, {"error", std::generic_category().message(error)}});
      } catch (...) {
      }
    }
  }

  try {
    log_fields all;
    all.reserve(fields.size() + 2);
    all.emplace_back("event", name);
    if (!cause.empty()) all.emplace_back("cause", cause);
    all.insert(all.end(), fields.begin(), fields.end());
    const std::string_view text = message.empty() ? name : message;
    if (journal_ &&
        journal_->send(journal_fields({.kind = kind,
                                       .cause = cause,
                                       .message = message,
                                       .line = log_.journal_message(level_of(kind), text, all),
                                       .fields = fields,
                                       .wall = at_clocks.wall,
                                       .monotonic_us = at_clocks.monotonic_us,
                                       .boottime_us = at_clocks.boottime_us})) == 0) {
      return;
    }
    log_.log(level_of(kind), text, all);
  } catch (...) {
    // Logging is best effort here; the caller is in the middle of a shutdown.
  }
}

// Whole or not at all. O_APPEND and one write() keep a record a whole line; a short write (the
// disk filled up: ENOSPC, or EFBIG) is continued, and if the rest cannot be written the part that
// went out is cut off again, so that the next record is not appended to a torn line. Another
// process appending to the same file at that moment would lose its record too: one writer per file.
int event_recorder::append(std::string_view line) noexcept {
  const int fd = file_.get();
  struct stat st {};
  if (::fstat(fd, &st) != 0) return errno;
  std::size_t written = 0;
  while (written < line.size()) {
    const ssize_t n = ::write(fd, line.data() + written, line.size() - written);
    if (n > 0) {
      written += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    const int error = n < 0 ? errno : EIO;
    if (written > 0 && ::ftruncate(fd, st.st_size) != 0) torn_ = true;
    return error;
  }
  torn_ = false;
  return 0;
}

result<> event_recorder::reopen() noexcept {
  if (path_.empty()) return result<>::success();
  try {
    unique_fd fresh = open_event_log(path_);
    // The same file again (no rotation happened): a torn end is still there.
    if (!file_ || !same_file(file_.get(), fresh.get())) torn_ = false;
    file_ = std::move(fresh);
    // The new file starts with the reason it exists, so that its first line joins it to the
    // rotated one.
    record(event_kind::EventLogReopened, "SIGHUP", "opened the event log again", {{"path", path_}});
    return result<>::success();
  } catch (const std::exception& e) {
    try {
      log_.warning("cannot reopen the event log; still writing to the old file",
                   {{"path", path_}, {"error", e.what()}});
      return result<>::failure(e.what());
    } catch (...) {
      // No memory even for the text: still a failure, with none.
      return result<>::failure({});
    }
  }
}

}  // namespace shim
