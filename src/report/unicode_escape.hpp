#pragma once

#include <string>
#include <string_view>

namespace shim {

// The four hex digits of a JSON "\uXXXX" escape (YAML's double-quoted scalars have the same one),
// appended to out as UTF-8. False for anything but four hex digits, and for a UTF-16 surrogate,
// which only a pair of escapes could make into a character: neither reader takes pairs.
inline bool append_unicode_escape(std::string_view hex4, std::string& out) {
  if (hex4.size() != 4) return false;
  unsigned cp = 0;
  for (const char h : hex4) {
    cp <<= 4;
    if (h >= '0' && h <= '9') {
      cp |= static_cast<unsigned>(h - '0');
    } else if (h >= 'a' && h <= 'f') {
      cp |= static_cast<unsigned>(h - 'a' + 10);
    } else if (h >= 'A' && h <= 'F') {
      cp |= static_cast<unsigned>(h - 'A' + 10);
    } else {
      return false;
    }
  }
  if (cp >= 0xD800 && cp <= 0xDFFF) return false;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return true;
}

}  // namespace shim
