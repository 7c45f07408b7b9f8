// The upstream check's hysteresis, on a fake clock: one transient error never moves the node.
#include <gtest/gtest.h>

#include <string>

#include "upstream/upstream_health.hpp"

namespace shim {
namespace {

using namespace std::chrono_literals;
using outcome = upstream_health::outcome;

const upstream_health::time_point t0 = upstream_health::time_point{} + 1'700'000'000s;

outcome pass(int i = 0) { return {.pass = true, .at = t0 + i * 1s}; }
outcome fail(int i = 0, std::string error = "status 500") {
  return {.pass = false, .error = std::move(error), .at = t0 + i * 1s};
}

upstream_health passed_check(unsigned fall = 3, unsigned rise = 2) {
  upstream_health h(fall, rise);
  for (unsigned i = 0; i < rise; ++i) h.record(pass());
  return h;
}

TEST(UpstreamHealth, StartsFailedUntilRisePasses) {
  upstream_health h(3, 2);
  EXPECT_FALSE(h.passed());
  EXPECT_EQ(h.detail(), "not probed yet");
  EXPECT_FALSE(h.record(pass(0)));
  EXPECT_FALSE(h.passed()) << "one pass is not enough with rise=2";
  EXPECT_EQ(h.detail(), "1 of 2 passes needed");
  EXPECT_TRUE(h.record(pass(1)));
  EXPECT_TRUE(h.passed());
  EXPECT_EQ(h.detail(), "");
}

TEST(UpstreamHealth, AlternatingFailuresNeverFlipIt) {
  auto h = passed_check(3, 2);
  for (int i = 0; i < 20; ++i) {
    EXPECT_FALSE(h.record(i % 2 ? pass(i) : fail(i)));
    EXPECT_TRUE(h.passed()) << "probe " << i;
  }
}

TEST(UpstreamHealth, FallConsecutiveFailuresFlipIt) {
  auto h = passed_check(3, 2);
  EXPECT_FALSE(h.record(fail(1)));
  EXPECT_FALSE(h.record(fail(2, "timeout after 1s")));
  EXPECT_TRUE(h.passed());
  EXPECT_EQ(h.consecutive_failures(), 2u);
  EXPECT_NE(h.detail().find("2 consecutive failures (fails at 3), last: timeout after 1s at"),
            std::string::npos)
      << h.detail();
  EXPECT_TRUE(h.record(fail(3, "connection refused")));
  EXPECT_FALSE(h.passed());
  EXPECT_NE(h.detail().find("3 consecutive failures, last: connection refused at "),
            std::string::npos)
      << h.detail();
}

TEST(UpstreamHealth, RisesAgainAfterAFlip) {
  auto h = passed_check(2, 2);
  h.record(fail(1));
  h.record(fail(2));
  ASSERT_FALSE(h.passed());
  EXPECT_FALSE(h.record(pass(3)));
  EXPECT_FALSE(h.record(fail(4))) << "a failure resets the passes";
  EXPECT_FALSE(h.record(pass(5)));
  EXPECT_TRUE(h.record(pass(6)));
  EXPECT_TRUE(h.passed());
}

TEST(UpstreamHealth, FallAndRiseOfOneFollowEveryProbe) {
  upstream_health h(1, 1);
  EXPECT_TRUE(h.record(pass()));
  EXPECT_TRUE(h.record(fail()));
  EXPECT_TRUE(h.record(pass()));
}

TEST(UpstreamHealth, DetailNamesTheLastFailureWhileRising) {
  upstream_health h(3, 3);
  h.record(fail(0, "certificate verify failed: unable to get local issuer certificate"));
  h.record(pass(1));
  EXPECT_NE(h.detail().find("1 of 3 passes needed; last: certificate verify failed"),
            std::string::npos)
      << h.detail();
}

}  // namespace
}  // namespace shim
