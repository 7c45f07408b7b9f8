#pragma once

#include <algorithm>
#include <charconv>
#include <concepts>
#include <optional>
#include <string_view>

namespace shim {

// ASCII digits only: std::isdigit depends on the locale and takes an int.
constexpr bool is_digit(char c) { return c >= '0' && c <= '9'; }

constexpr bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), is_digit);
}

// s as a T when it is decimal digits alone (no sign, no space) and T holds it; else nullopt.
template <std::integral T>
std::optional<T> parse_decimal(std::string_view s) {
  T value{};
  if (!all_digits(s) || std::from_chars(s.data(), s.data() + s.size(), value).ec != std::errc()) {
    return std::nullopt;
  }
  return value;
}

}  // namespace shim
