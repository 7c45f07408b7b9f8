#pragma once

#include <boost/asio/io_context.hpp>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "log/log_level.hpp"
#include "log/log_line.hpp"
#include "log/log_sink.hpp"

namespace shim {

// Log lines to stderr, as text ("LEVEL message key=value") or as JSON lines. When stderr is the
// journal (JOURNAL_STREAM names stderr's device and inode) each line starts with sd-daemon's "<N>".
// Logging never blocks and never throws: a line that cannot be written (stderr stalled, the queue
// full) is dropped and counted, so it can never hold up a state change.
class logger {
 public:
  // Writes to fd (not owned: the logger writes through a copy of its own, see log_sink).
  logger(log_format format, int fd, bool journal_prefix,
         std::size_t queue_capacity = log_sink::kDefaultCapacity);
  // Detects the journal from JOURNAL_STREAM and fstat(stderr).
  static logger for_stderr(log_format format);
  // Whether lines are written for the journal (stderr is the journal, for for_stderr()).
  bool to_journal() const { return journal_prefix_; }
  logger(const logger&) = delete;
  logger& operator=(const logger&) = delete;

  // Once the loop exists: lines that stderr cannot take at once then wait for it to be writable.
  // io must outlive the logger.
  void attach(boost::asio::io_context& io) { sink_.attach(io); }

  void log(log_level level, std::string_view message, const log_fields& fields = {}) noexcept;
  void error(std::string_view m, const log_fields& f = {}) noexcept { log(log_level::error, m, f); }
  void warning(std::string_view m, const log_fields& f = {}) noexcept {
    log(log_level::warning, m, f);
  }
  void notice(std::string_view m, const log_fields& f = {}) noexcept {
    log(log_level::notice, m, f);
  }
  void info(std::string_view m, const log_fields& f = {}) noexcept { log(log_level::info, m, f); }

  // The line log() would write, as the journal's MESSAGE: without the "<N>" prefix and the '\n'.
  std::string journal_message(log_level level, std::string_view message,
                              const log_fields& fields) const;

  // Lines dropped since the start (for a metric).
  std::uint64_t dropped_lines() const { return sink_.dropped_lines() + out_of_memory_; }

 private:
  log_format format_;
  bool journal_prefix_;
  std::uint64_t out_of_memory_ = 0;  // lines lost for want of memory to build them
  log_sink sink_;
};

}  // namespace shim
