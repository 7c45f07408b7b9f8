#pragma once

#include <chrono>
#include <concepts>
#include <limits>

namespace shim {

// Sums and products that stop at the type's limits instead of overflowing: time values reach the
// shim from outside (logind's "infinity" is UINT64_MAX), and a sum that wraps turns one into a few
// seconds (issue 8 item 9). max() reads as "never": a saturated hold is too long, never too short.

template <std::integral T>
constexpr T saturating_add(T a, T b) {
  T sum{};
  if (!__builtin_add_overflow(a, b, &sum)) return sum;
  return b > 0 ? std::numeric_limits<T>::max() : std::numeric_limits<T>::min();
}

template <std::integral T>
constexpr T saturating_mul(T a, T b) {
  T product{};
  if (!__builtin_mul_overflow(a, b, &product)) return product;
  return (a < 0) != (b < 0) ? std::numeric_limits<T>::min() : std::numeric_limits<T>::max();
}

template <class Rep, class Period>
constexpr std::chrono::duration<Rep, Period> saturating_add(std::chrono::duration<Rep, Period> a,
                                                            std::chrono::duration<Rep, Period> b) {
  return std::chrono::duration<Rep, Period>(saturating_add(a.count(), b.count()));
}

// A deadline: time_point::max() when it is too far to represent.
template <class Clock, class Duration>
constexpr std::chrono::time_point<Clock, Duration> saturating_add(
    std::chrono::time_point<Clock, Duration> t, Duration d) {
  return std::chrono::time_point<Clock, Duration>(saturating_add(t.time_since_epoch(), d));
}

}  // namespace shim
