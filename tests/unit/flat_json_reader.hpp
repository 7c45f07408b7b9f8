#pragma once
// A strict reader for the flat JSON objects the shim writes (strings and integers), for the unit
// tests and the fault tests: a line it accepts is valid JSON.

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shim::test {

struct json_value {
  bool is_string = false;
  std::string text;  // the decoded string, or the integer's digits
};
using json_object = std::vector<std::pair<std::string, json_value>>;

class json_reader {
 public:
  explicit json_reader(std::string_view s) : s_(s) {}

  std::optional<json_object> object() {
    json_object out;
    if (!eat('{')) return std::nullopt;
    if (eat('}')) return done(out);
    do {
      auto key = string();
      if (!key || !eat(':')) return std::nullopt;
      json_value value;
      if (peek() == '"') {
        auto str = string();
        if (!str) return std::nullopt;
        value = {true, *str};
      } else {
        auto num = integer();
        if (!num) return std::nullopt;
        value = {false, *num};
      }
      out.emplace_back(*key, value);
    } while (eat(','));
    if (!eat('}')) return std::nullopt;
    return done(out);
  }

  // One JSON string at the reader's position, decoded; nullopt if it is not one.
  std::optional<std::string> string() {
    if (!eat('"')) return std::nullopt;
    std::string out;
    while (i_ < s_.size()) {
      const auto c = static_cast<unsigned char>(s_[i_++]);
      if (c == '"') return out;
      if (c < 0x20) return std::nullopt;  // raw control characters are not JSON
      if (c != '\\') {
        out += static_cast<char>(c);
        continue;
      }
      if (i_ >= s_.size()) return std::nullopt;
      switch (s_[i_++]) {
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
          if (i_ + 4 > s_.size()) return std::nullopt;
          unsigned cp = 0;
          for (int k = 0; k < 4; ++k) {
            const char h = s_[i_++];
            cp <<= 4;
            if (h >= '0' && h <= '9')
              cp |= static_cast<unsigned>(h - '0');
            else if (h >= 'a' && h <= 'f')
              cp |= static_cast<unsigned>(h - 'a' + 10);
            else if (h >= 'A' && h <= 'F')
              cp |= static_cast<unsigned>(h - 'A' + 10);
            else
              return std::nullopt;
          }
          if (cp >= 0xD800 && cp <= 0xDFFF) return std::nullopt;  // not produced by us
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
          break;
        }
        default:
          return std::nullopt;
      }
    }
    return std::nullopt;
  }

  bool at_end() const { return i_ == s_.size(); }

 private:
  std::optional<json_object> done(json_object& out) {
    if (i_ != s_.size()) return std::nullopt;
    return out;
  }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  bool eat(char c) {
    if (peek() != c) return false;
    ++i_;
    return true;
  }
  std::optional<std::string> integer() {
    std::string digits;
    if (peek() == '-') digits += s_[i_++];
    while (peek() >= '0' && peek() <= '9') digits += s_[i_++];
    if (digits.empty() || digits == "-") return std::nullopt;
    return digits;
  }
  std::string_view s_;
  std::size_t i_ = 0;
};

}  // namespace shim::test
