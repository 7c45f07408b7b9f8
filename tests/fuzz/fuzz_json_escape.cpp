// json_escape: whatever bytes come in (process names, paths, D-Bus error text), the result is the
// inside of one valid JSON string, valid UTF-8 on one line, and decodes back to the input whenever
// the input was valid UTF-8.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "event_log.hpp"

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

int hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Decodes the inside of a JSON string as RFC 8259 reads it; nullopt if it is not one. Only the
// escapes json_escape may write are accepted (\u for controls and U+FFFD, no surrogates).
std::optional<std::string> decode(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == '"') return std::nullopt;
    if (c != '\\') {
      out += static_cast<char>(c);
      continue;
    }
    if (++i == s.size()) return std::nullopt;
    switch (s[i]) {
      case '"':
        out += '"';
        break;
      case '\\':
        out += '\\';
        break;
      case '/':
        out += '/';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'u': {
        unsigned code = 0;
        for (int k = 1; k <= 4; ++k) {
          if (i + k >= s.size()) return std::nullopt;
          const int h = hex(s[i + k]);
          if (h < 0) return std::nullopt;
          code = code * 16 + static_cast<unsigned>(h);
        }
        i += 4;
        if (code < 0x80) {
          out += static_cast<char>(code);
        } else if (code == 0xFFFD) {
          out += "\xEF\xBF\xBD";
        } else {
          return std::nullopt;
        }
        break;
      }
      default:
        return std::nullopt;
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::string escaped = shim::json_escape(input);
  if (!valid_utf8(escaped)) std::abort();
  const auto decoded = decode(escaped);
  if (!decoded) std::abort();
  if (!valid_utf8(*decoded)) std::abort();
  if (valid_utf8(input) && *decoded != input) std::abort();
  return 0;
}
