// The upstream check's hysteresis, on a fake clock: one transient error never moves the node.
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "upstream/upstream_status.hpp"

namespace shim {
namespace {

using namespace std::chrono_literals;

const upstream_status::time_point t0 = upstream_status::time_point{} + 1'700'000'000s;

// An outcome and when it was delivered.
struct outcome {
  probe_outcome probe;
  upstream_status::time_point at;
};
outcome pass(int i = 0) { return {{.duration = 2ms}, t0 + i * 1s}; }
outcome fail(int i = 0, std::string error = "status 500") {
  return {{.failure = probe_failure::status, .error = std::move(error), .duration = 2ms},
          t0 + i * 1s};
}

// A row as upstream_check makes it.
upstream_status check(unsigned fall, unsigned rise) {
  return upstream_status("https://127.0.0.1:6443/readyz", fall, rise, 1s);
}
bool record(upstream_status& s, const outcome& o) { return s.record(o.probe, o.at); }

upstream_status passed_check(unsigned fall = 3, unsigned rise = 2) {
  auto h = check(fall, rise);
  for (unsigned i = 0; i < rise; ++i) record(h, pass());
  return h;
}

TEST(UpstreamStatus, StartsFailedUntilRisePasses) {
  auto h = check(3, 2);
  EXPECT_FALSE(h.passed());
  EXPECT_EQ(h.detail(), "not probed yet");
  EXPECT_FALSE(record(h, pass(0)));
  EXPECT_FALSE(h.passed()) << "one pass is not enough with rise=2";
  EXPECT_EQ(h.detail(), "1 of 2 passes needed");
  EXPECT_TRUE(record(h, pass(1)));
  EXPECT_TRUE(h.passed());
  EXPECT_EQ(h.detail(), "");
}

TEST(UpstreamStatus, AlternatingFailuresNeverFlipIt) {
  auto h = passed_check(3, 2);
  for (int i = 0; i < 20; ++i) {
    EXPECT_FALSE(record(h, i % 2 ? pass(i) : fail(i)));
    EXPECT_TRUE(h.passed()) << "probe " << i;
  }
}

TEST(UpstreamStatus, FallConsecutiveFailuresFlipIt) {
  auto h = passed_check(3, 2);
  EXPECT_FALSE(record(h, fail(1)));
  EXPECT_FALSE(record(h, fail(2, "timeout after 1s")));
  EXPECT_TRUE(h.passed());
  EXPECT_EQ(h.consecutive_failures(), 2u);
  EXPECT_NE(h.detail().find("2 consecutive failures (fails at 3), last: timeout after 1s at"),
            std::string::npos)
      << h.detail();
  EXPECT_TRUE(record(h, fail(3, "connection refused")));
  EXPECT_FALSE(h.passed());
  EXPECT_NE(h.detail().find("3 consecutive failures, last: connection refused at "),
            std::string::npos)
      << h.detail();
}

TEST(UpstreamStatus, RisesAgainAfterAFlip) {
  auto h = passed_check(2, 2);
  record(h, fail(1));
  record(h, fail(2));
  ASSERT_FALSE(h.passed());
  EXPECT_FALSE(record(h, pass(3)));
  EXPECT_FALSE(record(h, fail(4))) << "a failure resets the passes";
  EXPECT_FALSE(record(h, pass(5)));
  EXPECT_TRUE(record(h, pass(6)));
  EXPECT_TRUE(h.passed());
}

TEST(UpstreamStatus, FallAndRiseOfOneFollowEveryProbe) {
  auto h = check(1, 1);
  EXPECT_TRUE(record(h, pass()));
  EXPECT_TRUE(record(h, fail()));
  EXPECT_TRUE(record(h, pass()));
}

TEST(UpstreamStatus, DetailNamesTheLastFailureWhileRising) {
  auto h = check(3, 3);
  record(h, fail(0, "certificate verify failed: unable to get local issuer certificate"));
  record(h, pass(1));
  EXPECT_NE(h.detail().find("1 of 3 passes needed; last: certificate verify failed"),
            std::string::npos)
      << h.detail();
}

}  // namespace
}  // namespace shim
