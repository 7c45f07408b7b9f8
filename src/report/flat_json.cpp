#include "report/flat_json.hpp"

#include <algorithm>
#include <charconv>

namespace shim {
namespace {

class reader {
 public:
  explicit reader(std::string_view s) : s_(s) {}

  std::optional<flat_json_object> object() {
    flat_json_object out;
    out.reserve(16);  // an event record's members, without growing
    if (!eat('{')) return std::nullopt;
    if (eat('}')) return done(out);
    do {
      auto key = string();
      if (!key || !eat(':')) return std::nullopt;
      flat_json_value value;
      if (peek() == '"') {
        auto str = string();
        if (!str) return std::nullopt;
        value = {true, std::move(*str)};
      } else {
        auto num = integer();
        if (!num) return std::nullopt;
        value = {false, std::move(*num)};
      }
      out.emplace_back(std::move(*key), std::move(value));
    } while (eat(','));
    if (!eat('}')) return std::nullopt;
    return done(out);
  }

 private:
  std::optional<flat_json_object> done(flat_json_object& out) {
    if (i_ != s_.size()) return std::nullopt;
    return std::move(out);
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
  static bool plain(char ch) {
    const auto c = static_cast<unsigned char>(ch);
    return c >= 0x20 && c != '"' && c != '\\';
  }
  // The four hex digits of a "\uXXXX" escape, appended to out as UTF-8. A UTF-16 surrogate is
  // refused: only a pair of escapes could make it a character, and pairs are not taken.
  bool unicode_escape(std::string& out) {
    const char* from = s_.data() + i_;
    const char* to = from + std::min<std::size_t>(4, s_.size() - i_);
    unsigned cp = 0;
    const auto [end, ec] = std::from_chars(from, to, cp, 16);
    i_ += 4;
    if (ec != std::errc() || end != from + 4 || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
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
  std::optional<std::string> string() {
    if (!eat('"')) return std::nullopt;
    std::string out;
    while (i_ < s_.size()) {
      // A run of plain characters at once: the report reads 100 MB logs through here.
      const std::size_t run = i_;
      while (i_ < s_.size() && plain(s_[i_])) ++i_;
      out.append(s_, run, i_ - run);
      if (i_ == s_.size()) break;
      const auto c = static_cast<unsigned char>(s_[i_++]);
      if (c == '"') return out;
      if (c < 0x20) return std::nullopt;  // raw control characters are not JSON
      if (i_ >= s_.size()) return std::nullopt;
      const char e = s_[i_++];
      // JSON's escapes, and what each stands for; \u apart.
      constexpr std::string_view kEscapes = "\"\\/bfnrt";
      constexpr std::string_view kMeanings = "\"\\/\b\f\n\r\t";
      if (const auto k = kEscapes.find(e); k != std::string_view::npos) {
        out += kMeanings[k];
      } else if (e != 'u' || !unicode_escape(out)) {
        return std::nullopt;
      }
    }
    return std::nullopt;
  }

  std::string_view s_;
  std::size_t i_ = 0;
};

}  // namespace

std::optional<flat_json_object> parse_flat_json(std::string_view text) {
  return reader(text).object();
}

}  // namespace shim
