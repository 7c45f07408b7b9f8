// New connections to the target's port sample by sample from t0, and when they fell to 0.
#include <gtest/gtest.h>

#include "lb/connection_series.hpp"

namespace shim {
namespace {

using namespace std::chrono_literals;
using clock = connection_series::clock;

const clock::time_point t0 = clock::time_point{} + 100'000s;

TEST(ConnectionSeries, FellToZeroAtTheFirstEmptySampleOfTheLastRun) {
  connection_series s(6443, t0);
  EXPECT_FALSE(s.fell_to_zero());
  EXPECT_EQ(s.summary(), "new connections to port 6443 per sample: no sample yet");
  const std::uint64_t fresh[] = {12, 9, 0, 4, 0, 0, 0};
  for (int i = 0; i < 7; ++i) s.add(t0 + (i + 1) * 1s, fresh[i]);
  ASSERT_TRUE(s.fell_to_zero());
  EXPECT_EQ(*s.fell_to_zero(), 5s) << "the 0 at +3 s was followed by 4 new ones";
  EXPECT_EQ(s.total(), 25u);
  EXPECT_EQ(s.summary(),
            "new connections to port 6443 per sample: 12 9 0 4 0 0 0; fell to 0 at +5.0 s");
  EXPECT_EQ(s.fields(), (log_fields{{"lb_port", "6443"},
                                    {"lb_connection_samples", "7"},
                                    {"lb_new_connections", "25"},
                                    {"lb_new_connections_series", "12,9,0,4,0,0,0"},
                                    {"lb_connections_zero_ms", "5000"}}));
}

TEST(ConnectionSeries, NotZeroWhileTheLastSampleHadSome) {
  connection_series s(6443, t0);
  s.add(t0 + 1s, 0);
  EXPECT_EQ(s.fell_to_zero(), 1s) << "no traffic from the first sample on";
  s.add(t0 + 2'100ms, 3);
  EXPECT_FALSE(s.fell_to_zero());
  EXPECT_EQ(s.summary(), "new connections to port 6443 per sample: 0 3; not 0 yet");
  EXPECT_EQ(s.fields().size(), 4u) << "no lb_connections_zero_ms";
}

TEST(ConnectionSeries, KeepsAtMostMaxPointsButFollowsEverySample) {
  connection_series s(443, t0);
  for (std::size_t i = 0; i < connection_series::kMaxPoints + 5; ++i) {
    s.add(t0 + static_cast<int>(i + 1) * 1s, 1);
  }
  s.add(t0 + 1000s, 0);
  EXPECT_EQ(s.points().size(), connection_series::kMaxPoints);
  EXPECT_EQ(s.samples(), connection_series::kMaxPoints + 6);
  EXPECT_EQ(s.fell_to_zero(), 1000s);
  EXPECT_NE(s.summary().find(" 1 1 and 6 more; fell to 0 at +1000.0 s"), std::string::npos)
      << s.summary();
}

}  // namespace
}  // namespace shim
