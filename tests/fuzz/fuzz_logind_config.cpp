// logind_config: arbitrary logind.conf text and time spans.
// - inhibit_delay_settings reads any text, and each value it reports is parse_logind_timespan's.
// - parse_logind_timespan ignores surrounding whitespace, and sums: a, b accepted alone means
//   "a b" is their sum, or refused exactly when the sum reaches infinity (as systemd's parse_sec).
// - describe_usec renders every accepted value.
// - plan_inhibit_delay with that text as a drop-in and a hold from the input's first 8 bytes never
//   writes less than the hold + margin or than the drop-in says, and writes what parses back.
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>

#include "logind/logind_config.hpp"

namespace {

namespace fs = std::filesystem;
using shim::kInfinityUsec;
using shim::parse_logind_timespan;

void check(bool ok) {
  if (!ok) std::abort();
}

// A scratch tree for the plan, made once per process and removed at exit.
const shim::logind_conf_paths& scratch_paths() {
  static const shim::logind_conf_paths paths = [] {
    std::string dir = (fs::temp_directory_path() / "fuzz-logind-config.XXXXXX").string();
    if (::mkdtemp(dir.data()) == nullptr) std::abort();
    static const fs::path root = dir;
    std::atexit([] {
      std::error_code ignored;
      fs::remove_all(root, ignored);
    });
    auto p = shim::logind_conf_paths::for_conf_dir(root / "etc/systemd/logind.conf.d");
    p.dropin_dirs.resize(1);  // only the scratch tree, never the machine's /usr/lib
    fs::create_directories(p.dropin_dirs.front());
    return p;
  }();
  return paths;
}

void check_sum(std::string_view a, std::string_view b) {
  if (a.find('\0') != std::string_view::npos || b.find('\0') != std::string_view::npos) return;
  const auto x = parse_logind_timespan(a);
  const auto y = parse_logind_timespan(b);
  if (!x || !y || *x == kInfinityUsec || *y == kInfinityUsec) return;
  const auto both = parse_logind_timespan(std::string(a) + " " + std::string(b));
  if (*x < kInfinityUsec - *y) {
    check(both == *x + *y);
  } else {
    check(!both);
  }
}

void check_plan(std::string_view text, std::chrono::nanoseconds hold) {
  const auto& paths = scratch_paths();
  const fs::path dropin = paths.dropin_dirs.front() / "10-fuzz.conf";
  std::ofstream(dropin, std::ios::binary | std::ios::trunc) << text;
  const auto planned = shim::plan_inhibit_delay(paths, hold);
  const auto settings = shim::inhibit_delay_settings(dropin, text);
  if (!planned) {
    bool unknown = false;
    for (const auto& s : settings) unknown = unknown || !s.usec;
    check(unknown);
    return;
  }
  const auto& plan = planned.value();
  check(plan.write_usec >= plan.needed_usec);
  check(plan.write_usec == kInfinityUsec || plan.write_usec % 1'000'000 == 0);
  for (const auto& s : settings) check(plan.write_usec >= *s.usec);
  check(parse_logind_timespan(plan.write_text) == plan.write_usec);
  const auto hold_usec = std::chrono::ceil<std::chrono::microseconds>(hold).count();
  check(plan.effective_usec >= static_cast<std::uint64_t>(hold_usec));
  const auto written = shim::inhibit_delay_settings(paths.shim_dropin, plan.file_text);
  check(written.size() == 1 && written.front().usec == plan.write_usec);
}

}  // namespace

// UBSan reports (signed overflow, bad shifts) end the run instead of scrolling past.
extern "C" const char* __ubsan_default_options() { return "halt_on_error=1:print_stacktrace=1"; }

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);

  for (const auto& s : shim::inhibit_delay_settings("f.conf", input)) {
    check(s.usec == parse_logind_timespan(s.text));
  }

  const auto value = parse_logind_timespan(input);
  check(parse_logind_timespan(" " + std::string(input) + "\t") == value);
  if (value) {
    check(!shim::describe_usec(*value).empty());
    if (*value <= static_cast<std::uint64_t>(INT64_MAX)) {
      check(parse_logind_timespan(std::to_string(*value) + "us") == value);
    }
  }

  if (const auto split = input.find('\x01'); split != std::string_view::npos) {
    check_sum(input.substr(0, split), input.substr(split + 1));
  }

  if (size >= sizeof(std::uint64_t)) {
    std::uint64_t bits = 0;
    std::memcpy(&bits, data, sizeof bits);
    check_plan(input, std::chrono::nanoseconds(static_cast<std::int64_t>(bits >> 1)));
  }
  return 0;
}
