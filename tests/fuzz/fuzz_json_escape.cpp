// json_escape: whatever bytes come in (process names, paths, D-Bus error text), the result is the
// inside of one valid JSON string, valid UTF-8 on one line, and decodes back to the input whenever
// the input was valid UTF-8. The text format's escapes keep a log line one line: escape_controls
// leaves no control character, append_text_value writes the value bare only when that is
// unambiguous and otherwise as a JSON string, and a whole log line, in either format, has one line
// break, at its end.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "log/log_line.hpp"
#include "report/flat_json.hpp"

namespace {

// Length of the valid UTF-8 sequence at s[i] (RFC 3629), 0 if there is none.
std::size_t utf8_length(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size() || b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k) {
    if (b(i + k) < 0x80 || b(i + k) > 0xBF) return 0;
  }
  return n;
}

bool valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_length(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

// Decodes the inside of a JSON string as RFC 8259 reads it, through the shim's strict reader of
// its own records; nullopt if it is not one.
std::optional<std::string> decode(std::string_view s) {
  const auto object = shim::parse_flat_json("{\"k\":\"" + std::string(s) + "\"}");
  if (!object || object->size() != 1) return std::nullopt;
  return object->front().second.text;
}

bool is_control(char c) {
  const auto b = static_cast<unsigned char>(c);
  return b < 0x20 || b == 0x7F;
}

void check_json_escape(std::string_view input) {
  const std::string escaped = shim::json_escape(input);
  if (!valid_utf8(escaped)) std::abort();
  const auto decoded = decode(escaped);
  if (!decoded) std::abort();
  if (!valid_utf8(*decoded)) std::abort();
  if (valid_utf8(input) && *decoded != input) std::abort();
}

void check_text_escapes(std::string_view input) {
  const std::string controls = shim::escape_controls(input);
  for (char c : controls) {
    if (is_control(c)) std::abort();
  }
  bool has_control = false;
  bool ambiguous = input.empty();
  for (char c : input) {
    has_control = has_control || is_control(c);
    ambiguous = ambiguous || is_control(c) || c == ' ' || c == '"' || c == '=';
  }
  if (!has_control && controls != input) std::abort();

  std::string value;
  shim::append_text_value(value, input);
  if (!ambiguous) {
    if (value != input) std::abort();
    return;
  }
  if (value.size() < 2 || value.front() != '"' || value.back() != '"') std::abort();
  if (value.substr(1, value.size() - 2) != shim::json_escape(input)) std::abort();
}

// One line, with its only line break (or other C0 control) at the end, in both formats, with and
// without the journal's prefix; JSON lines are valid UTF-8.
void check_log_lines(std::string_view input) {
  const std::string key(input.substr(0, input.size() / 2));
  const std::string value(input.substr(input.size() / 2));
  for (const auto format : {shim::log_format::text, shim::log_format::json}) {
    for (const bool journal : {false, true}) {
      const std::string line =
          shim::format_log_line(format, journal, shim::log_level::warning, input, {{key, value}},
                                std::chrono::system_clock::time_point{});
      if (line.empty() || line.back() != '\n') std::abort();
      for (std::size_t i = 0; i + 1 < line.size(); ++i) {
        if (static_cast<unsigned char>(line[i]) < 0x20) std::abort();  // DEL breaks no line
      }
      if (format == shim::log_format::json && !valid_utf8(line)) std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  check_json_escape(input);
  check_text_escapes(input);
  check_log_lines(input);
  return 0;
}
