#include "util/duration_text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdint>
#include <limits>

#include "util/ascii_digits.hpp"

namespace shim {
namespace {

// Negative durations are refused, so the largest accepted one is int64's maximum (Go allows one
// more nanosecond, but only as -1<<63).
constexpr std::uint64_t kMaxNanos = std::numeric_limits<std::int64_t>::max();

struct duration_unit {
  std::string_view name;
  std::uint64_t nanos;
};

constexpr std::array<duration_unit, 8> kDurationUnits{{
    {"ns", 1},
    {"us", 1'000},
    {"\xc2\xb5s", 1'000},  // U+00B5 MICRO SIGN, what Go prints
    {"\xce\xbcs", 1'000},  // U+03BC GREEK SMALL LETTER MU, which Go also accepts
    {"ms", 1'000'000},
    {"s", 1'000'000'000},
    {"m", 60'000'000'000},
    {"h", 3'600'000'000'000},
}};

}  // namespace

std::chrono::nanoseconds parse_duration(std::string_view text) {
  auto syntax = [&](std::string_view why) -> duration_error {
    return duration_error(duration_problem::syntax,
                          fmt::format("invalid duration {:?}: {}", text, why));
  };
  auto overflow = [&] {
    return duration_error(duration_problem::overflow,
                          fmt::format("duration {:?} is out of range", text));
  };

  std::string_view s = text;
  bool negative = false;
  if (!s.empty() && (s.front() == '-' || s.front() == '+')) {
    negative = s.front() == '-';
    s.remove_prefix(1);
  }
  // Like Go, a bare zero is the one number that needs no unit.
  if (s == "0") return std::chrono::nanoseconds(0);
  if (s.empty()) throw syntax("empty");

  std::uint64_t total = 0;
  while (!s.empty()) {
    // Integer part.
    std::uint64_t whole = 0;
    const auto [digits_end, ec] = std::from_chars(s.data(), s.data() + s.size(), whole);
    if (ec == std::errc::result_out_of_range || whole > kMaxNanos) throw overflow();
    const bool have_whole = ec == std::errc();
    std::size_t i = static_cast<std::size_t>(digits_end - s.data());

    // Fraction: digits that would overflow are dropped, as Go does; they are below a nanosecond.
    std::uint64_t fraction = 0;
    double scale = 1;
    bool have_fraction = false;
    if (i < s.size() && s[i] == '.') {
      bool dropping = false;
      for (++i; i < s.size() && is_digit(s[i]); ++i) {
        have_fraction = true;
        const unsigned digit = static_cast<unsigned>(s[i] - '0');
        if (dropping || fraction > (kMaxNanos - digit) / 10) {
          dropping = true;
          continue;
        }
        fraction = fraction * 10 + digit;
        scale *= 10;
      }
    }
    if (!have_whole && !have_fraction) throw syntax("expected a number");

    // Unit: everything up to the next number.
    std::size_t end = i;
    while (end < s.size() && s[end] != '.' && !is_digit(s[end])) ++end;
    const std::string_view unit_text = s.substr(i, end - i);
    if (unit_text.empty()) throw syntax("missing unit (ns, us, ms, s, m or h)");
    const auto unit = std::find_if(kDurationUnits.begin(), kDurationUnits.end(),
                                   [&](const duration_unit& u) { return u.name == unit_text; });
    if (unit == kDurationUnits.end()) {
      throw syntax(fmt::format("unknown unit {:?} (want ns, us, ms, s, m or h)", unit_text));
    }

    if (whole > kMaxNanos / unit->nanos) throw overflow();
    std::uint64_t value = whole * unit->nanos;
    if (fraction > 0) {
      value += static_cast<std::uint64_t>(static_cast<double>(fraction) *
                                          (static_cast<double>(unit->nanos) / scale));
      if (value > kMaxNanos) throw overflow();
    }
    total += value;  // both operands are at most 2^63-1, so this cannot wrap
    if (total > kMaxNanos) throw overflow();
    s.remove_prefix(end);
  }

  if (negative && total != 0) {
    throw duration_error(duration_problem::negative,
                         fmt::format("negative duration {:?} is not allowed", text));
  }
  return std::chrono::nanoseconds(static_cast<std::int64_t>(total));
}

namespace {

// A port of Go's Duration.String, so that logs read like the flags users wrote, for a magnitude u
// in units of 10^-decimals seconds (9: nanoseconds, 6: microseconds).
std::string format_go_duration(std::uint64_t u, bool negative, int decimals) {
  std::array<char, 32> buf{};
  std::size_t w = buf.size();
  auto put = [&](char c) { buf[--w] = c; };
  auto put_int = [&](std::uint64_t v) {
    do {
      put(static_cast<char>('0' + v % 10));
      v /= 10;
    } while (v > 0);
  };
  auto pow10 = [](int n) {
    std::uint64_t p = 1;
    while (n-- > 0) p *= 10;
    return p;
  };

  // Writes the prec lowest decimal digits of u as a fraction without trailing zeros (and without
  // the point when they are all zero), and drops them from u.
  auto put_fraction = [&](int prec) {
    bool print = false;
    for (int i = 0; i < prec; ++i) {
      const auto digit = static_cast<char>(u % 10);
      print = print || digit != 0;
      if (print) put(static_cast<char>('0' + digit));
      u /= 10;
    }
    if (print) put('.');
  };

  put('s');
  if (u < pow10(decimals)) {
    if (u == 0) {
      put('0');
    } else {
      // The largest of ns, µs and ms (10^-9, -6, -3 s) that keeps u at 1 or more.
      int unit = decimals;
      while (unit > 3 && u >= pow10(decimals - unit + 3)) unit -= 3;
      const std::string_view prefix = unit == 9 ? "n" : unit == 6 ? "\xc2\xb5" : "m";  // µ: U+00B5
      for (auto c = prefix.rbegin(); c != prefix.rend(); ++c) put(*c);
      put_fraction(decimals - unit);
      put_int(u);
    }
  } else {
    put_fraction(decimals);
    put_int(u % 60);
    u /= 60;
    if (u > 0) {
      put('m');
      put_int(u % 60);
      u /= 60;
      if (u > 0) {
        put('h');
        put_int(u);
      }
    }
  }
  if (negative) put('-');
  return std::string(buf.data() + w, buf.size() - w);
}

}  // namespace

std::string format_duration(std::chrono::nanoseconds d) {
  // Unsigned arithmetic so that the most negative value has a magnitude too.
  std::uint64_t u = static_cast<std::uint64_t>(d.count());
  if (d.count() < 0) u = ~u + 1;
  return format_go_duration(u, d.count() < 0, 9);
}

std::string format_usec(std::uint64_t usec) { return format_go_duration(usec, false, 6); }

}  // namespace shim
