// flags: parse_flags on an argv cut from the input at NUL bytes either accepts it with every
// duration within 0..24h, or refuses it with one usage_error line; nothing else escapes. Then
// Go durations round-trip: each argument that parse_duration takes comes back the same through
// format_duration, and so does a duration taken from the input's first 8 bytes, as do the
// microseconds of format_usec.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"
#include "util/duration_text.hpp"

namespace {

using std::chrono::nanoseconds;

void check(bool ok) {
  if (!ok) std::abort();
}

// Every duration that parses formats to text that parses to the same value, and that text is
// already canonical.
void round_trip(nanoseconds d) {
  const std::string text = shim::format_duration(d);
  if (d.count() < 0) {
    check(text.front() == '-');
    return;
  }
  check(shim::parse_duration(text) == d);
  check(shim::format_duration(shim::parse_duration(text)) == text);
}

}  // namespace

// UBSan reports (signed overflow, bad shifts) end the run instead of scrolling past.
extern "C" const char* __ubsan_default_options() { return "halt_on_error=1:print_stacktrace=1"; }

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);

  std::vector<std::string_view> args;
  for (std::size_t start = 0; start <= input.size();) {
    const std::size_t end = std::min(input.find('\0', start), input.size());
    args.push_back(input.substr(start, end - start));
    start = end + 1;
  }

  try {
    const shim::config cfg = shim::parse_flags(args);
    for (const auto d :
         {cfg.drain_delay, cfg.signal_delay.value_or(nanoseconds(0)), cfg.exit_timeout}) {
      check(d >= nanoseconds(0) && d <= shim::kMaxFlagDuration);
    }
    check(!cfg.target.pid || *cfg.target.pid > 1);
    const auto& up = cfg.upstream;
    for (const auto d : {up.interval, up.timeout}) {
      check(d > nanoseconds(0) && d <= shim::kMaxFlagDuration);
    }
    check(up.fall >= 1 && up.rise >= 1);
    check(up.client_cert.empty() == up.client_key.empty());
    check(up.enabled() || (up.ca_file.empty() && up.token_file.empty()));
  } catch (const shim::usage_error& e) {
    check(std::strchr(e.what(), '\n') == nullptr);
  }

  for (const auto arg : args) {
    try {
      round_trip(shim::parse_duration(arg));
    } catch (const std::invalid_argument&) {
    }
  }

  if (size >= sizeof(std::int64_t)) {
    std::int64_t count = 0;
    std::memcpy(&count, data, sizeof count);
    round_trip(nanoseconds(count));
    std::uint64_t usec = 0;
    std::memcpy(&usec, data, sizeof usec);
    const std::string text = shim::format_usec(usec);
    // Where nanoseconds can hold it, the same text as format_duration.
    if (usec <= static_cast<std::uint64_t>(nanoseconds::max().count() / 1000)) {
      check(text == shim::format_duration(std::chrono::microseconds(usec)));
    }
  }
  return 0;
}
