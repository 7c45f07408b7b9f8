#include "kubelet/json_text.hpp"

#include <fmt/core.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace shim {

namespace {

struct json_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class json_checker {
 public:
  json_checker(std::string_view text, std::size_t max_depth) : s_(text), max_depth_(max_depth) {}

  void run() {
    // Iterative: each open array or object is one entry of open_ (its closing bracket).
    value_or_container();
    for (;;) {
      blanks();
      if (open_.empty()) break;
      const char close = open_.back();
      if (peek(close)) {
        ++i_;
        open_.pop_back();
        continue;
      }
      expect(',');
      if (close == '}') member_name();
      value_or_container();
    }
    if (i_ != s_.size()) fail("nothing after the value");
  }

 private:
  [[noreturn]] void fail(std::string_view expected) const {
    std::size_t line = 1;
    for (std::size_t k = 0; k < i_ && k < s_.size(); ++k) line += s_[k] == '\n';
    throw json_error(fmt::format("line {}: expected {}", line, expected));
  }

  bool peek(char c) const { return i_ < s_.size() && s_[i_] == c; }

  void expect(char c) {
    blanks();
    if (!peek(c)) fail(fmt::format("'{}'", c));
    ++i_;
  }

  void blanks() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r'))
      ++i_;
  }

  // A value; an array or object is opened and left to run() to close, after its first element.
  void value_or_container() {
    for (;;) {
      blanks();
      if (i_ >= s_.size()) fail("a value");
      const char c = s_[i_];
      if (c != '[' && c != '{') {
        scalar();
        return;
      }
      if (open_.size() >= max_depth_) fail(fmt::format("at most {} levels of nesting", max_depth_));
      ++i_;
      open_.push_back(c == '[' ? ']' : '}');
      blanks();
      if (peek(open_.back())) return;  // empty: run() closes it
      if (c == '{') member_name();
    }
  }

  void member_name() {
    blanks();
    if (!peek('"')) fail("a member name in double quotes");
    string();
    expect(':');
  }

  void scalar() {
    const char c = s_[i_];
    if (c == '"') return string();
    if (c == '-' || (c >= '0' && c <= '9')) return number();
    for (const std::string_view word : {"true", "false", "null"}) {
      if (s_.substr(i_, word.size()) == word) {
        i_ += word.size();
        return;
      }
    }
    fail("a value");
  }

  void digits() {
    const std::size_t from = i_;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
    if (i_ == from) fail("a digit");
  }

  void number() {
    if (peek('-')) ++i_;
    if (peek('0')) {
      ++i_;
    } else {
      digits();
    }
    if (peek('.')) {
      ++i_;
      digits();
    }
    if (peek('e') || peek('E')) {
      ++i_;
      if (peek('+') || peek('-')) ++i_;
      digits();
    }
  }

  static bool is_hex(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  }

  void string() {
    ++i_;  // the opening quote
    for (;;) {
      if (i_ >= s_.size()) fail("the closing '\"'");
      const auto c = static_cast<unsigned char>(s_[i_]);
      if (c == '"') {
        ++i_;
        return;
      }
      if (c < 0x20) fail("no raw control character in a string (an escape)");
      if (s_.substr(i_, 2) == "\xc2\x85" || s_.substr(i_, 3) == "\xe2\x80\xa8" ||
          s_.substr(i_, 3) == "\xe2\x80\xa9") {
        fail("an escape (\\u0085, \\u2028, \\u2029) for a NEL, LS or PS in a string");
      }
      if (c != '\\') {
        ++i_;
        continue;
      }
      ++i_;
      if (i_ >= s_.size()) fail("an escape");
      const char e = s_[i_++];
      if (e == 'u') {
        for (int k = 0; k < 4; ++k, ++i_) {
          if (i_ >= s_.size() || !is_hex(s_[i_])) fail("four hex digits after \\u");
        }
      } else if (std::string_view("\"\\/bfnrt").find(e) == std::string_view::npos) {
        fail("one of JSON's escapes");
      }
    }
  }

  std::string_view s_;
  std::size_t max_depth_;
  std::size_t i_ = 0;
  std::vector<char> open_;
};

}  // namespace

result<> check_json_text(std::string_view text, std::size_t max_depth) {
  try {
    json_checker(text, max_depth).run();
    return result<>::success();
  } catch (const json_error& e) {
    return result<>::failure(e.what());
  }
}

}  // namespace shim
