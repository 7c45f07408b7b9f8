#pragma once

#include <algorithm>
#include <string_view>

namespace shim {

// ASCII digits only: std::isdigit depends on the locale and takes an int.
constexpr bool is_digit(char c) { return c >= '0' && c <= '9'; }

constexpr bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), is_digit);
}

}  // namespace shim
