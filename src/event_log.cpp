#include "event_log.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <system_error>

#include "errno_error.hpp"

namespace shim {
namespace {

std::string_view level_upper(log_level level) {
  switch (level) {
    case log_level::error:
      return "ERROR";
    case log_level::warning:
      return "WARNING";
    case log_level::notice:
      return "NOTICE";
    case log_level::info:
      return "INFO";
    case log_level::debug:
      return "DEBUG";
  }
  return "UNKNOWN";
}

std::string_view level_lower(log_level level) {
  switch (level) {
    case log_level::error:
      return "error";
    case log_level::warning:
      return "warning";
    case log_level::notice:
      return "notice";
    case log_level::info:
      return "info";
    case log_level::debug:
      return "debug";
  }
  return "unknown";
}

// Length of the well-formed UTF-8 sequence starting at s[i], or 0 when there is none (stray
// continuation byte, overlong form, surrogate, beyond U+10FFFF, truncated).
std::size_t utf8_sequence_length(std::string_view s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return 1;
  std::size_t length = 0;
  unsigned char low = 0x80;
  unsigned char high = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    length = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    length = 3;
    if (c == 0xE0) low = 0xA0;   // overlong
    if (c == 0xED) high = 0x9F;  // UTF-16 surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    length = 4;
    if (c == 0xF0) low = 0x90;   // overlong
    if (c == 0xF4) high = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  if (i + length > s.size()) return 0;
  if (byte(i + 1) < low || byte(i + 1) > high) return 0;
  for (std::size_t k = 2; k < length; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return length;
}

void append_control_escape(std::string& out, unsigned char c) {
  switch (c) {
    case '\b':
      out += "\\b";
      break;
    case '\f':
      out += "\\f";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\r':
      out += "\\r";
      break;
    case '\t':
      out += "\\t";
      break;
    default:
      out += fmt::format("\\u{:04x}", c);
  }
}

// A text message stays on one line: control characters are escaped, the rest is left as is.
std::string escape_controls(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7F) {
      append_control_escape(out, c);
    } else {
      out += ch;
    }
  }
  return out;
}

// logfmt-style: bare when unambiguous, otherwise quoted with JSON escapes.
void append_text_value(std::string& out, std::string_view v) {
  bool bare = !v.empty();
  for (char ch : v) {
    const auto c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c == 0x7F || c == '"' || c == '=') {
      bare = false;
      break;
    }
  }
  if (bare) {
    out += v;
  } else {
    out += '"';
    out += json_escape(v);
    out += '"';
  }
}

void append_json_string(std::string& out, std::string_view key, std::string_view value) {
  out += '"';
  out += json_escape(key);
  out += "\":\"";
  out += json_escape(value);
  out += '"';
}

// sd-daemon's check: JOURNAL_STREAM is "DEV:INO" of the stream systemd connected to us, so a
// redirected stderr (e.g. `shutdown-shim 2>file` from a unit's shell) is not taken for the journal.
bool stderr_is_journal() {
  const char* env = std::getenv("JOURNAL_STREAM");
  if (env == nullptr) return false;
  const std::string_view s(env);
  const auto colon = s.find(':');
  if (colon == std::string_view::npos) return false;
  std::uint64_t dev = 0;
  std::uint64_t ino = 0;
  const auto dev_end = s.data() + colon;
  const auto ino_end = s.data() + s.size();
  auto r1 = std::from_chars(s.data(), dev_end, dev);
  auto r2 = std::from_chars(dev_end + 1, ino_end, ino);
  if (r1.ec != std::errc() || r1.ptr != dev_end || r2.ec != std::errc() || r2.ptr != ino_end) {
    return false;
  }
  struct stat st {};
  if (::fstat(STDERR_FILENO, &st) != 0) return false;
  return static_cast<std::uint64_t>(st.st_dev) == dev &&
         static_cast<std::uint64_t>(st.st_ino) == ino;
}

std::int64_t clock_microseconds(clockid_t id) {
  timespec ts{};
  if (::clock_gettime(id, &ts) != 0) return -1;
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000 + ts.tv_nsec / 1'000;
}

bool is_reserved_event_key(std::string_view key) {
  for (std::string_view reserved :
       {"event", "wall", "monotonic_us", "boottime_us", "pid", "cause", "message"}) {
    if (key == reserved) return true;
  }
  return false;
}

log_level event_level(event_kind kind) {
  switch (kind) {
    case event_kind::ShutdownInitiated:
    case event_kind::SignalForwarded:
    case event_kind::InhibitorReleased:
    case event_kind::InhibitDelayEnsured:  // a change to the machine's configuration
      return log_level::notice;
    case event_kind::BusLost:
      return log_level::warning;
    default:
      return log_level::info;
  }
}

}  // namespace

std::string json_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
      ++i;
    } else if (c < 0x20) {
      append_control_escape(out, c);
      ++i;
    } else if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
    } else if (const std::size_t n = utf8_sequence_length(s, i); n > 0) {
      out.append(s, i, n);
      i += n;
    } else {
      // Bytes that are not UTF-8 (a process name, a path) would make the whole line invalid JSON.
      out += "\\ufffd";
      ++i;
    }
  }
  return out;
}

std::string format_wall_time(std::chrono::system_clock::time_point t) {
  using namespace std::chrono;
  const auto since_epoch = floor<microseconds>(t.time_since_epoch());
  const auto whole = floor<seconds>(since_epoch);
  const std::time_t tt = static_cast<std::time_t>(whole.count());
  std::tm tm{};
  if (::gmtime_r(&tt, &tm) == nullptr) return fmt::format("@{}us", since_epoch.count());
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (since_epoch - whole).count());
}

logger::logger(log_format format, std::FILE* out, bool journal_prefix)
    : format_(format), out_(out), journal_prefix_(journal_prefix) {}

logger logger::for_stderr(log_format format) { return logger(format, stderr, stderr_is_journal()); }

void logger::log(log_level level, std::string_view message, const log_fields& fields) {
  std::string line;
  line.reserve(128);
  // The journal reads the priority from this prefix and adds its own timestamp.
  if (journal_prefix_) line += fmt::format("<{}>", static_cast<int>(level));
  if (format_ == log_format::json) {
    line += "{";
    append_json_string(line, "time", format_wall_time(std::chrono::system_clock::now()));
    line += ',';
    append_json_string(line, "level", level_lower(level));
    line += ',';
    append_json_string(line, "msg", message);
    for (const auto& [key, value] : fields) {
      line += ',';
      append_json_string(line, key, value);
    }
    line += "}\n";
  } else {
    if (!journal_prefix_) {
      line += format_wall_time(std::chrono::system_clock::now());
      line += ' ';
      line += level_upper(level);
      line += ' ';
    }
    line += escape_controls(message);
    for (const auto& [key, value] : fields) {
      line += ' ';
      line += key;
      line += '=';
      append_text_value(line, value);
    }
    line += '\n';
  }
  // One write per line under the stream's lock, so concurrent lines never interleave.
  ::flockfile(out_);
  std::fwrite(line.data(), 1, line.size(), out_);
  std::fflush(out_);
  ::funlockfile(out_);
}

event_recorder::event_recorder(logger& log, const std::string& path) : log_(log), path_(path) {
  if (path.empty()) return;
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw_errno(errno, "open event log " + path);
  file_.reset(fd);
}

result<> event_recorder::reopen() {
  if (path_.empty()) return result<>::success();
  const int fd = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return result<>::failure("open " + path_ + ": " + std::strerror(errno));
  file_.reset(fd);
  record(event_kind::EventLogReopened, "SIGHUP", "opened the event log again", {{"path", path_}});
  return result<>::success();
}

void event_recorder::record(event_kind kind, std::string_view cause, std::string_view message,
                            const log_fields& fields,
                            std::optional<std::chrono::steady_clock::time_point> at) {
  const std::string_view name = to_string(kind);
  const std::int64_t monotonic_now = clock_microseconds(CLOCK_MONOTONIC);
  const std::int64_t age =
      at ? std::max<std::int64_t>(
               0, monotonic_now -
                      std::chrono::duration_cast<std::chrono::microseconds>(at->time_since_epoch())
                          .count())
         : 0;

  // The file first: it is the evidence that survives the reboot.
  if (file_) {
    int error = 0;
    try {
      std::string line;
      line.reserve(256);
      line += '{';
      append_json_string(line, "event", name);
      line += ',';
      append_json_string(
          line, "wall",
          format_wall_time(std::chrono::system_clock::now() - std::chrono::microseconds(age)));
      line +=
          fmt::format(",\"monotonic_us\":{},\"boottime_us\":{},\"pid\":{},", monotonic_now - age,
                      clock_microseconds(CLOCK_BOOTTIME) - age, ::getpid());
      append_json_string(line, "cause", cause);
      line += ',';
      append_json_string(line, "message", message);
      for (const auto& [key, value] : fields) {
        line += ',';
        // Duplicate keys make a JSON object ambiguous (jq keeps the last), so an extra field named
        // like a fixed key, e.g. the target's "pid", is written as "field_pid".
        append_json_string(line, is_reserved_event_key(key) ? "field_" + key : key, value);
      }
      line += "}\n";

      // O_APPEND and one write() keep each record a whole line. A short write (disk nearly full)
      // is continued so that the next record does not start mid-line.
      std::string_view rest = line;
      while (!rest.empty()) {
        const ssize_t n = ::write(file_.get(), rest.data(), rest.size());
        if (n < 0) {
          if (errno == EINTR) continue;
          error = errno;
          break;
        }
        if (n == 0) {
          error = EIO;
          break;
        }
        rest.remove_prefix(static_cast<std::size_t>(n));
      }
    } catch (const std::exception&) {
      error = ENOMEM;  // building the line failed; still nothing may escape the shutdown path
    }
    if (error != 0) {
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
    log_.log(event_level(kind), message.empty() ? name : message, all);
  } catch (...) {
    // Logging is best effort here; the caller is in the middle of a shutdown.
  }
}

}  // namespace shim
