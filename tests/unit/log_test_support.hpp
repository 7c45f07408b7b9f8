#pragma once
// What the log tests share: a memfd that captures a logger's output, a scratch directory, and
// small file and JSON helpers.

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "flat_json_reader.hpp"
#include "util/unique_fd.hpp"

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
// The records of one kind in an event log file, in order.
inline std::vector<json_object> event_records(const std::string& path, std::string_view kind) {
  std::vector<json_object> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    auto record = parse_object(line);
    if (get(record, "event").text == kind) out.push_back(std::move(record));
  }
  return out;
}

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
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace shim::test
