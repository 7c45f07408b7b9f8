#include "log/logger.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "util/ascii_digits.hpp"

namespace shim {
namespace {

// sd-daemon's check: JOURNAL_STREAM is "DEV:INO" of the stream systemd connected to us, so a
// redirected stderr (e.g. `shutdown-shim 2>file` from a unit's shell) is not taken for the journal.
bool stderr_is_journal() {
  const char* env = std::getenv("JOURNAL_STREAM");
  if (env == nullptr) return false;
  const std::string_view s(env);
  const auto colon = s.find(':');
  if (colon == std::string_view::npos) return false;
  const auto dev = parse_decimal<std::uint64_t>(s.substr(0, colon));
  const auto ino = parse_decimal<std::uint64_t>(s.substr(colon + 1));
  struct stat st {};
  if (!dev || !ino || ::fstat(STDERR_FILENO, &st) != 0) return false;
  return static_cast<std::uint64_t>(st.st_dev) == *dev &&
         static_cast<std::uint64_t>(st.st_ino) == *ino;
}

}  // namespace

logger::logger(log_format format, int fd, bool journal_prefix, std::size_t queue_capacity)
    : format_(format),
      journal_prefix_(journal_prefix),
      sink_(log_sink::writable_copy(fd), queue_capacity,
            log_sink::handlers{.dropped_notice = [this](std::uint64_t dropped) {
              return format_log_line(format_, journal_prefix_, log_level::warning,
                                     "log lines dropped: stderr was not writable",
                                     {{"dropped", std::to_string(dropped)}},
                                     std::chrono::system_clock::now());
            }}) {}

logger logger::for_stderr(log_format format) {
  return logger(format, STDERR_FILENO, stderr_is_journal());
}

std::string logger::journal_message(log_level level, std::string_view message,
                                    const log_fields& fields) const {
  std::string line =
      format_log_line(format_, true, level, message, fields, std::chrono::system_clock::now());
  line.pop_back();                    // the '\n'
  line.erase(0, line.find('>') + 1);  // the "<N>" the journal reads the priority from
  return line;
}

void logger::log(log_level level, std::string_view message, const log_fields& fields) noexcept {
  try {
    sink_.write(format_log_line(format_, journal_prefix_, level, message, fields,
                                std::chrono::system_clock::now()));
  } catch (...) {
    ++out_of_memory_;
  }
}

}  // namespace shim
