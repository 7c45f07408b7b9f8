#include "log/log_line.hpp"

#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <ctime>

namespace shim {
namespace {

// JSON's two-character escapes for control characters, and their letters; the others are written
// \u00XX.
constexpr std::string_view kShortEscaped = "\b\f\n\r\t";
constexpr std::string_view kShortEscapes = "bfnrt";

constexpr std::string_view kHexDigits = "0123456789abcdef";

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
  if (const auto k = kShortEscaped.find(static_cast<char>(c)); k != std::string_view::npos) {
    out += '\\';
    out += kShortEscapes[k];
    return;
  }
  // Only C0 controls and DEL come here: \u00XX.
  out += "\\u00";
  out += kHexDigits[c >> 4];
  out += kHexDigits[c & 0xF];
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

std::string one_line(std::string_view text, std::size_t max) {
  constexpr std::string_view kEllipsis = "...";
  std::string out;
  out.reserve(std::min(text.size(), max + 1));
  bool gap = false;
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c == 0x7F) {
      gap = !out.empty();
      continue;
    }
    if (gap) out += ' ';
    gap = false;
    out += ch;
    if (out.size() > max) break;  // enough to know it must be cut
  }
  if (out.size() <= max) return out;
  std::size_t keep = max >= kEllipsis.size() ? max - kEllipsis.size() : max;
  // Never half a character: back off over UTF-8 continuation bytes.
  while (keep > 0 && (static_cast<unsigned char>(out[keep]) & 0xC0) == 0x80) --keep;
  out.resize(keep);
  while (!out.empty() && out.back() == ' ') out.pop_back();
  if (max >= kEllipsis.size()) out += kEllipsis;
  return out;
}

void append_text_value(std::string& out, std::string_view value) {
  bool bare = !value.empty();
  for (char ch : value) {
    const auto c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c == 0x7F || c == '"' || c == '=') {
      bare = false;
      break;
    }
  }
  if (bare) {
    out += value;
  } else {
    out += '"';
    out += json_escape(value);
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

std::chrono::system_clock::time_point wall_time_of(std::chrono::steady_clock::time_point t) {
  return std::chrono::system_clock::now() -
         std::chrono::duration_cast<std::chrono::system_clock::duration>(
             std::chrono::steady_clock::now() - t);
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

std::string format_log_line(log_format format, bool journal_prefix, log_level level,
                            std::string_view message, const log_fields& fields,
                            std::chrono::system_clock::time_point now) {
  std::string line;
  line.reserve(128);
  // The journal reads the priority from this prefix and adds its own timestamp.
  if (journal_prefix) line += fmt::format("<{}>", static_cast<int>(level));
  if (format == log_format::json) {
    line += "{";
    append_json_string(line, "time", format_wall_time(now));
    line += ',';
    append_json_string(line, "level", name_of(level).lower);
    line += ',';
    append_json_string(line, "msg", message);
    for (const auto& [key, value] : fields) {
      line += ',';
      append_json_string(line, key, value);
    }
    line += "}\n";
    return line;
  }
  if (!journal_prefix) {
    line += format_wall_time(now);
    line += ' ';
    line += name_of(level).upper;
    line += ' ';
  }
  line += escape_controls(message);
  for (const auto& [key, value] : fields) {
    line += ' ';
    line += escape_controls(key);  // keys come from the code, but a line stays one line
    line += '=';
    append_text_value(line, value);
  }
  line += '\n';
  return line;
}

}  // namespace shim
