#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "log/event_kind.hpp"
#include "log/journal_socket.hpp"
#include "log/log_line.hpp"
#include "log/logger.hpp"
#include "util/result.hpp"
#include "util/unique_fd.hpp"

namespace shim {

// Lifecycle events: each is logged and, with --event-log, appended to that file as one JSON object
// per line, so that an operator can prove after a reboot what happened:
// {"event":"SignalForwarded","wall":"2026-11-29T16:36:07.123456Z","monotonic_us":123456789,
//  "boottime_us":123456789,"boot_id":"7476cf30dbe24e679ebb3140ce086a55","pid":1234,
//  "cause":"PrepareForShutdown(true)","message":"...", ...fields}
// boot_id (32 hex digits, as the journal's _BOOT_ID; "" if unreadable) tells the records of one
// boot from the next, whose clocks start again from zero; `shutdown-shim report` groups by it.
//
// The file must be a regular file. Its writes need no queue, unlike stderr's: write() to a regular
// file never waits for a reader, only for the page cache and the filesystem, and epoll cannot
// watch a regular file anyway (EPERM), so a queue would have no event to wait for. (A hung NFS or
// FUSE mount could still stall a write: that is why a FIFO, whose reader can stall it for good,
// is refused.)
//
// When stderr is the journal, each event goes to journald as a structured entry instead of a line
// on stderr (journal_entry.hpp has its fields); if journald cannot take it at once, the line goes
// to stderr as before.
class event_recorder {
 public:
  // Opens path (O_APPEND|O_CLOEXEC, created 0644) unless it is empty. Throws std::system_error
  // when it cannot be opened, std::runtime_error naming the path when it is not a regular file
  // (a FIFO with no reader is refused at once, never waited for). journal: journald's native
  // socket (journal_socket::kPath) when stderr is the journal; empty: events are logged to stderr.
  event_recorder(logger& log, std::string path, std::string journal = {});

  // at: when the event happened, if earlier than now (the three clocks are moved back by as
  // much); steady_clock is CLOCK_MONOTONIC. A record is written whole or not at all; a failure is
  // logged and counted, never thrown.
  void record(event_kind kind, std::string_view cause, std::string_view message,
              const log_fields& fields = {},
              std::optional<std::chrono::steady_clock::time_point> at = std::nullopt) noexcept;

  // Opens the path again, for logrotate's "rename, then SIGHUP". If that fails, keeps writing to
  // the file it had, logs why, and returns why as the failure.
  result<> reopen() noexcept;

  // Records that could not be written since the start (for a metric).
  std::uint64_t failed_records() const { return failed_; }
  // Events of this kind since the start, whether or not the file took them (for a metric).
  std::uint64_t recorded(event_kind kind) const {
    return recorded_[static_cast<std::size_t>(kind)];
  }

 private:
  int append(std::string_view line) noexcept;

  logger& log_;
  std::string path_;
  std::string boot_id_;  // read once: it cannot change while the process runs
  unique_fd file_;
  std::optional<journal_socket> journal_;
  // A failed record could not be cut off again: the file ends in a torn line.
  bool torn_ = false;
  std::uint64_t failed_ = 0;
  std::array<std::uint64_t, kEvents.size()> recorded_{};
};

// The key an extra field has in the record: "field_" + key for one named like a fixed member.
std::string event_record_key(const std::string& key);

}  // namespace shim
