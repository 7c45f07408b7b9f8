#include "report/event_line_reader.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <memory>
#include <utility>

#include "report/flat_json.hpp"
#include "util/small_file.hpp"

namespace shim {
namespace {

// 256 KiB per read(): few system calls, and a small fixed part of the report's memory.
constexpr std::size_t kReadChunk = 256 * 1024;

template <typename T>
std::optional<T> number(const std::string& text) {
  // The shim writes its clocks as JSON numbers and its extra fields as strings: take either.
  T out{};
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, out);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return out;
}

}  // namespace

void set_event_member(event_record& r, std::string_view key, std::string value) {
  static constexpr std::pair<std::string_view, std::string event_record::*> kText[]{
      {"event", &event_record::event},     {"wall", &event_record::wall},
      {"boot_id", &event_record::boot_id}, {"cause", &event_record::cause},
      {"message", &event_record::message}, {"lb", &event_record::lb}};
  for (const auto& [name, member] : kText) {
    if (key == name) r.*member = std::move(value);
  }
  if (key == "monotonic_us") r.monotonic_us = number<std::int64_t>(value);
  if (key == "boottime_us") r.boottime_us = number<std::int64_t>(value);
  if (key == "pid") r.pid = number<std::int64_t>(value).value_or(0);
  if (key == "inhibit_delay_max_usec") r.inhibit_delay_max_usec = number<std::uint64_t>(value);
}

std::optional<event_record> parse_event_record(std::string_view line) {
  auto object = parse_flat_json(line);
  if (!object) return std::nullopt;
  event_record r;
  for (auto& [key, value] : *object) set_event_member(r, key, std::move(value.text));
  if (r.event.empty()) return std::nullopt;
  return r;
}

void event_line_reader::feed(std::string_view bytes) {
  while (!bytes.empty()) {
    const auto newline = bytes.find('\n');
    const std::string_view piece = bytes.substr(0, newline);
    if (!overlong_) {
      if (partial_.size() + piece.size() > kMaxLine) {
        overlong_ = true;
        partial_.clear();
      } else if (newline != std::string_view::npos && partial_.empty()) {
        line(piece);  // the common case: a whole line within one chunk, no copy
      } else {
        partial_ += piece;
      }
    }
    if (newline == std::string_view::npos) return;
    if (overlong_) {
      ++skipped_;
      overlong_ = false;
    } else if (!partial_.empty()) {
      line(partial_);
      partial_.clear();
    }
    bytes.remove_prefix(newline + 1);
  }
}

void event_line_reader::finish() {
  if (overlong_) {
    ++skipped_;
  } else if (!partial_.empty()) {
    line(partial_);  // whole JSON without its '\n' counts; a torn one is skipped there
  }
  partial_.clear();
  overlong_ = false;
}

void event_line_reader::line(std::string_view text) {
  if (text.empty()) return;  // the recorder's fresh start after a torn record
  auto record = parse_event_record(text);
  if (!record) {
    ++skipped_;
    return;
  }
  handlers_.record(*record);
}

result<bool> event_line_reader::read_file(const std::string& path) {
  // A FIFO or /dev/zero at the path once kept `report` waiting for ever (issue 18, item 4).
  auto opened = open_regular_file_if_exists(path);
  if (!opened) return result<bool>::failure_from(opened);
  if (!opened.value()) return result<bool>::success(false);
  const int fd = opened.value()->get();
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  const auto buffer = std::make_unique<char[]>(kReadChunk);
  for (;;) {
    const ssize_t n = ::read(fd, buffer.get(), kReadChunk);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      return result<bool>::errno_failure(errno, path);
    }
    feed(std::string_view(buffer.get(), static_cast<std::size_t>(n)));
  }
  finish();
  return result<bool>::success(true);
}

}  // namespace shim
