#pragma once
// Hand-made event logs for the report's tests: records as the shim writes them (event_recorder),
// with the clocks, boot and pid chosen by the test.

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "report/event_line_reader.hpp"
#include "report/shutdown_history.hpp"

namespace shim::test {

inline constexpr std::string_view kBootA = "aaaaaaaa111111112222222233333333";
inline constexpr std::string_view kBootB = "bbbbbbbb111111112222222233333333";
inline constexpr std::string_view kBootC = "cccccccc111111112222222233333333";

class event_log_builder {
 public:
  // Records from now on: this boot (empty: an older shim, no boot_id key) and this shim process.
  event_log_builder& boot(std::string_view id, std::int64_t boottime_offset_us = 2'000'000) {
    boot_ = id;
    boottime_offset_us_ = boottime_offset_us;
    return *this;
  }
  event_log_builder& pid(std::int64_t p) {
    pid_ = p;
    return *this;
  }
  // One record at monotonic second `at` of the boot; extra: more members, e.g.
  // R"("inhibit_delay_max_usec":"90000000")".
  event_log_builder& add(std::string_view event, double at, std::string_view cause = "",
                         std::string_view extra = "") {
    const auto mono = static_cast<std::int64_t>(at * 1e6);
    const auto seconds = static_cast<int>(at);
    text_ += fmt::format(
        R"({{"event":"{}","wall":"2026-11-29T16:{:02}:{:02}.{:06}Z","monotonic_us":{},)"
        R"("boottime_us":{},)",
        event, seconds / 60 % 60, seconds % 60, mono % 1'000'000, mono, mono + boottime_offset_us_);
    if (!boot_.empty()) text_ += fmt::format(R"("boot_id":"{}",)", boot_);
    text_ += fmt::format(R"("pid":{},"cause":"{}","message":"{}")", pid_, cause, event);
    if (!extra.empty()) {
      text_ += ',';  // not "," + std::string(extra): GCC 12's false -Wrestrict at -O3 (bug 105329)
      text_ += extra;
    }
    text_ += "}\n";
    return *this;
  }
  event_log_builder& raw(std::string_view bytes) {
    text_ += bytes;
    return *this;
  }

  // A shim run that starts and takes the lock at second `at`.
  event_log_builder& start(double at) {
    return add("Started", at, "start").add("InhibitorTaken", at + 0.01, "start");
  }
  // PrepareForShutdown at `at`: signal at once, the target exits `exit_after` later, a 3 s drain.
  event_log_builder& clean_shutdown(double at, double exit_after = 1.2) {
    return add("ShutdownInitiated", at, kPfs, R"("inhibit_delay_max_usec":"90000000")")
        .add("SignalForwarded", at + 0.002, kPfs, R"("target_pid":"42","signal":"SIGTERM")")
        .add("TargetExited", at + exit_after, "pidfd", R"("target_pid":"42")")
        .add("DrainElapsed", at + 3, "the drain delay has passed")
        .add("InhibitorReleased", at + 3.001, kPfs);
  }

  const std::string& text() const { return text_; }

  static constexpr std::string_view kPfs = "PrepareForShutdown(true)";

 private:
  std::string text_;
  std::string boot_{kBootA};
  std::int64_t boottime_offset_us_ = 2'000'000;
  std::int64_t pid_ = 100;
};

// Streams a hand-made log into history as the report and the daemon stream a file; returns the
// lines skipped (torn, not records).
inline std::uint64_t feed(shutdown_history& history, const std::string& log) {
  event_line_reader reader({.record = [&](const event_record& r) { history.add(r); }});
  reader.feed(log);
  reader.finish();
  return reader.skipped_lines();
}

}  // namespace shim::test
