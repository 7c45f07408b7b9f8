#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <limits>

#include "util/saturating.hpp"

namespace shim {
namespace {

using namespace std::chrono_literals;

constexpr auto kU64Max = std::numeric_limits<std::uint64_t>::max();
constexpr auto kI64Max = std::numeric_limits<std::int64_t>::max();
constexpr auto kI64Min = std::numeric_limits<std::int64_t>::min();

TEST(Saturating, UnsignedStopsAtMax) {
  EXPECT_EQ(saturating_add(std::uint64_t{2}, std::uint64_t{3}), 5u);
  EXPECT_EQ(saturating_add(kU64Max - 1, std::uint64_t{1}), kU64Max);
  EXPECT_EQ(saturating_add(kU64Max, std::uint64_t{1}), kU64Max);
  EXPECT_EQ(saturating_add(kU64Max, kU64Max), kU64Max);
  EXPECT_EQ(saturating_mul(std::uint64_t{1'000'000}, std::uint64_t{18'446'744'073'709}),
            18'446'744'073'709'000'000u);
  EXPECT_EQ(saturating_mul(std::uint64_t{1'000'000}, std::uint64_t{18'446'744'073'710}), kU64Max);
  EXPECT_EQ(saturating_mul(std::uint64_t{0}, kU64Max), 0u);
}

TEST(Saturating, SignedStopsAtEitherEnd) {
  EXPECT_EQ(saturating_add(kI64Max, std::int64_t{1}), kI64Max);
  EXPECT_EQ(saturating_add(kI64Min, std::int64_t{-1}), kI64Min);
  EXPECT_EQ(saturating_add(kI64Max, kI64Min), -1);
  EXPECT_EQ(saturating_mul(kI64Max, std::int64_t{2}), kI64Max);
  EXPECT_EQ(saturating_mul(kI64Max, std::int64_t{-2}), kI64Min);
  EXPECT_EQ(saturating_mul(kI64Min, std::int64_t{-1}), kI64Max);
  EXPECT_EQ(saturating_mul(std::int64_t{-3}, std::int64_t{4}), -12);
}

// Issue 8, item 9: 2562047h47m16s + 65s of exit-timeout wrapped in chrono (UBSan: signed
// overflow), and the hold ended after 3.7 ms.
TEST(Saturating, DurationsAndDeadlines) {
  const auto huge = std::chrono::nanoseconds(kI64Max - 5);
  EXPECT_EQ(saturating_add(huge, std::chrono::nanoseconds(65s)), std::chrono::nanoseconds::max());
  EXPECT_EQ(saturating_add(70s, 65s), 135s);
  using clock = std::chrono::steady_clock;
  const clock::time_point now = clock::now();
  EXPECT_EQ(saturating_add(now, clock::duration::max()), clock::time_point::max());
  EXPECT_EQ(saturating_add(now, clock::duration(70s)), now + 70s);
  static_assert(saturating_add(std::uint64_t{1}, std::uint64_t{2}) == 3);
}

}  // namespace
}  // namespace shim
