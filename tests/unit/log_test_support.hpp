#pragma once
// What the log tests share: a strict reader for the flat JSON objects the shim writes, a memfd
// that captures a logger's output, a scratch directory, and small file helpers.

#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "unique_fd.hpp"

namespace shim::test {

// "2026-11-29T16:36:07.123456Z". (No std::regex: GCC 12's trips -Wmaybe-uninitialized under ASan.)
inline bool is_timestamp(std::string_view s) {
  constexpr std::string_view kShape = "dddd-dd-ddTdd:dd:dd.ddddddZ";
  if (s.size() != kShape.size()) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (kShape[i] == 'd' ? !(s[i] >= '0' && s[i] <= '9') : s[i] != kShape[i]) return false;
  }
  return true;
}

// A text line as the logger writes it without the journal: timestamp, space, then rest.
inline bool is_stamped(std::string_view line, std::string_view rest) {
  constexpr std::size_t kStampLength = 27;
  return line.size() > kStampLength && is_timestamp(line.substr(0, kStampLength)) &&
         line[kStampLength] == ' ' && line.substr(kStampLength + 1) == rest;
}

struct json_value {
  bool is_string = false;
  std::string text;  // the decoded string, or the integer's digits
};
using json_object = std::vector<std::pair<std::string, json_value>>;

// A strict little JSON reader for flat objects of strings and integers.
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

  std::string_view s_;
  std::size_t i_ = 0;
};

inline json_object parse_object(std::string_view line) {
  auto parsed = json_reader(line).object();
  EXPECT_TRUE(parsed.has_value()) << "not a flat JSON object: " << line;
  return parsed.value_or(json_object{});
}

inline std::vector<std::string> keys(const json_object& o) {
  std::vector<std::string> out;
  for (const auto& [k, v] : o) out.push_back(k);
  return out;
}

inline const json_value& get(const json_object& o, std::string_view key) {
  for (const auto& [k, v] : o) {
    if (k == key) return v;
  }
  static const json_value missing;
  ADD_FAILURE() << "no key " << key;
  return missing;
}

inline std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Everything written to a memfd (a regular file, so a logger writes it at once).
class captured_output {
 public:
  captured_output() : fd_(::memfd_create("log", MFD_CLOEXEC | MFD_ALLOW_SEALING)) {
    if (!fd_) throw std::system_error(errno, std::generic_category(), "memfd_create");
  }
  int fd() const { return fd_.get(); }
  std::string text() const {
    struct stat st {};
    if (::fstat(fd_.get(), &st) != 0) return {};
    std::string out(static_cast<std::size_t>(st.st_size), '\0');
    const ssize_t n = ::pread(fd_.get(), out.data(), out.size(), 0);
    out.resize(n < 0 ? 0 : static_cast<std::size_t>(n));
    return out;
  }

 private:
  unique_fd fd_;
};

class temp_dir {
 public:
  temp_dir() {
    std::string pattern = ::testing::TempDir() + "event_log_XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw std::system_error(errno, std::generic_category());
    }
    path_ = pattern;
  }
  ~temp_dir() {
    if (DIR* d = ::opendir(path_.c_str())) {
      while (dirent* e = ::readdir(d)) {
        const std::string name = e->d_name;
        if (name != "." && name != "..") ::unlink((path_ + "/" + name).c_str());
      }
      ::closedir(d);
    }
    ::rmdir(path_.c_str());
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace shim::test
