// The load balancer's health checkers as /readyz sees them, on a fake clock: who is a checker,
// its interval, when it saw 503 and `fall` in a row, the bounds, and the renderings.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "lb/health_checker_watch.hpp"

namespace shim {
namespace {

using namespace std::chrono_literals;
using clock = health_checker_watch::clock;
using boost::asio::ip::make_address;

const clock::time_point t0 = clock::time_point{} + 100'000s;

// Probes from `from` every `interval`, starting at `first` (from t0), up to `last` exclusive;
// ready before t0, not ready from t0 on.
void probe_every(health_checker_watch& w, const std::string& from, clock::duration first,
                 clock::duration interval, clock::duration last) {
  for (auto at = first; at < last; at += interval) w.record(make_address(from), t0 + at, at < 0s);
}

TEST(HealthCheckerWatch, CheckersAtDifferentIntervalsFallInTurn) {
  health_checker_watch w;
  probe_every(w, "10.0.0.1", -59'600ms, 2s, 4'500ms);  // ... -1.6, +0.4, +2.4, +4.4
  probe_every(w, "10.0.0.2", -59s, 5s, 12s);           // ... -4, +1, +6, +11
  w.begin(t0, 3);
  // The rest of the answers after begin(): -1.6 s was the last before t0 (exclusive range above).
  probe_every(w, "10.0.0.1", 6'400ms, 2s, 12s);
  const auto o = w.observe(t0 + 12s);
  ASSERT_TRUE(o);
  ASSERT_EQ(o->checkers().size(), 2u);
  EXPECT_EQ(o->fallen(), 2u);
  ASSERT_TRUE(o->all_fell());
  EXPECT_EQ(*o->all_fell(), 11s);
  const auto& slow = o->checkers()[0];  // the last to fall comes first
  EXPECT_EQ(slow.address, "10.0.0.2");
  EXPECT_EQ(slow.interval, 5s);
  EXPECT_EQ(slow.probes_before, 12u);
  EXPECT_EQ(slow.probes_since, 3u);
  EXPECT_EQ(slow.first_unready, 1s);
  EXPECT_EQ(slow.fell, 11s);
  const auto& fast = o->checkers()[1];
  EXPECT_EQ(fast.address, "10.0.0.1");
  EXPECT_EQ(fast.interval, 2s);
  // Only the last kRecentProbes probes are kept: enough for the interval, not a minute at 2 s.
  EXPECT_EQ(fast.probes_before, health_checker_watch::kRecentProbes - 3);
  EXPECT_EQ(fast.first_unready, 400ms);
  EXPECT_EQ(fast.fell, 4'400ms);
  EXPECT_EQ(fast.probes_since, 6u);
  EXPECT_EQ(o->summary(70s),
            "2 checkers saw 3 x 503 by +11.0 s; drain-delay 70 s leaves 59.0 s "
            "for propagation");
  EXPECT_EQ(o->summary(10s),
            "2 checkers saw 3 x 503 by +11.0 s; drain-delay 10 s is 1.0 s short "
            "of that");
  EXPECT_EQ(checker_observation::describe(fast, 3),
            "10.0.0.1 every 2.0 s: 6 probes since, first 503 at +0.4 s, 3 x 503 at +4.4 s");
}

TEST(HealthCheckerWatch, TheIssuesExample) {
  health_checker_watch w;
  probe_every(w, "192.0.2.7", -9'900ms, 1s, 3s);  // +0.1, +1.1, +2.1 after t0
  w.begin(t0, 3);
  const auto o = w.observe(t0 + 3s);
  ASSERT_TRUE(o);
  EXPECT_EQ(o->summary(70s),
            "1 checker saw 3 x 503 by +2.1 s; drain-delay 70 s leaves 67.9 s for propagation");
}

TEST(HealthCheckerWatch, OneThatNeverSees503IsNamed) {
  health_checker_watch w;
  probe_every(w, "10.0.0.1", -10s, 1s, 0s);
  probe_every(w, "10.0.0.3", -30s, 10s, 0s);  // then goes quiet
  w.begin(t0, 3);
  probe_every(w, "10.0.0.1", 0s, 1s, 20s);
  const auto o = w.observe(t0 + 20s);
  ASSERT_TRUE(o);
  EXPECT_EQ(o->fallen(), 1u);
  EXPECT_FALSE(o->all_fell());
  EXPECT_EQ(o->checkers()[0].address, "10.0.0.3");
  EXPECT_FALSE(o->checkers()[0].first_unready);
  EXPECT_EQ(o->summary(70s),
            "1 of 2 checkers saw 3 x 503 by +2.0 s; not yet by +20.0 s: 10.0.0.3 (0 x 503 in a "
            "row, 0 probes since)");
  const auto f = o->fields(70s);
  EXPECT_EQ(f, (log_fields{{"lb_fall", "3"},
                           {"lb_elapsed_ms", "20000"},
                           {"lb_checkers", "2"},
                           {"lb_checkers_fallen", "1"},
                           {"lb_checker1_address", "10.0.0.3"},
                           {"lb_checker1_interval_ms", "10000"},
                           {"lb_checker1_probes_before", "3"},
                           {"lb_checker1_probes_since", "0"},
                           {"lb_checker2_address", "10.0.0.1"},
                           {"lb_checker2_interval_ms", "1000"},
                           {"lb_checker2_probes_before", "10"},
                           {"lb_checker2_probes_since", "20"},
                           {"lb_checker2_first_unready_ms", "0"},
                           {"lb_checker2_fell_ms", "2000"}}));
}

TEST(HealthCheckerWatch, NoneFallenYet) {
  health_checker_watch w;
  probe_every(w, "10.0.0.1", -10s, 2s, 0s);
  w.begin(t0, 3);
  probe_every(w, "10.0.0.1", 0s, 2s, 3s);
  const auto o = w.observe(t0 + 3s);
  EXPECT_EQ(o->summary(70s),
            "none of 1 checker saw 3 x 503; not yet by +3.0 s: 10.0.0.1 (2 x 503 in a row, 2 "
            "probes since)");
}

TEST(HealthCheckerWatch, AReadyAnswerStartsTheRunAgain) {
  health_checker_watch w;
  probe_every(w, "10.0.0.1", -10s, 1s, 0s);
  w.begin(t0, 3);
  const auto a = make_address("10.0.0.1");
  w.record(a, t0 + 1s, false);
  w.record(a, t0 + 2s, false);
  w.record(a, t0 + 3s, true);  // the drill was stopped and started again, say
  w.record(a, t0 + 4s, false);
  w.record(a, t0 + 5s, false);
  EXPECT_FALSE(w.observe(t0 + 5s)->all_fell());
  w.record(a, t0 + 6s, false);
  const auto o = w.observe(t0 + 6s);
  EXPECT_EQ(o->checkers()[0].first_unready, 1s);
  EXPECT_EQ(o->all_fell(), 6s);
}

TEST(HealthCheckerWatch, AnAddressThatStartedAfterT0IsNoChecker) {
  health_checker_watch w;
  probe_every(w, "10.0.0.1", -10s, 1s, 0s);
  w.begin(t0, 3);
  probe_every(w, "10.0.0.9", 1s, 1s, 10s);
  probe_every(w, "10.0.0.1", 0s, 1s, 10s);
  const auto o = w.observe(t0 + 10s);
  ASSERT_EQ(o->checkers().size(), 1u);
  EXPECT_EQ(o->checkers()[0].address, "10.0.0.1");
  EXPECT_EQ(w.addresses(), 2u);
}

TEST(HealthCheckerWatch, OneThatProbedOverAMinuteBeforeIsNoChecker) {
  health_checker_watch w;
  probe_every(w, "10.0.0.1", -90s, 5s, -60s);  // last at -65 s
  // The first a minute before to the dot (a checker probes at least twice: one request is none).
  probe_every(w, "10.0.0.2", -60s, 10s, -49s);
  w.begin(t0, 3);
  const auto o = w.observe(t0);
  ASSERT_EQ(o->checkers().size(), 1u);
  EXPECT_EQ(o->checkers()[0].address, "10.0.0.2");
  EXPECT_EQ(o->checkers()[0].interval, 10s);
  EXPECT_EQ(checker_observation::describe(o->checkers()[0], 3),
            "10.0.0.2 every 10.0 s: 0 probes since");
}

// Issue 35, item 2: one request (a curl's) made a checker, "1 checker saw ..." in the drill's
// answer. Listed apart now, with why; a checker that probes regularly still counts beside it.
// A checker's answer after end() was counted into the ended session's freed vector (a
// use-after-free, found by MALLOC_PERTURB_ in test_load_balancer_watch; ASan names it here).
TEST(HealthCheckerWatch, AnAnswerAfterTheEndTouchesNoSession) {
  health_checker_watch w;
  probe_every(w, "10.0.0.1", -10s, 1s, 0s);
  w.begin(t0, 1);
  w.end();
  w.record(make_address("10.0.0.1"), t0 + 1s, false);
  w.record(make_address("10.0.0.1"), t0 + 2s, false);
  EXPECT_FALSE(w.observe(t0 + 3s));
  // The next session counts from its own t0 only.
  w.begin(t0 + 3s, 1);
  w.record(make_address("10.0.0.1"), t0 + 4s, false);
  const auto o = w.observe(t0 + 5s);
  ASSERT_EQ(o->checkers().size(), 1u);
  EXPECT_EQ(o->checkers()[0].probes_since, 1u);
}

TEST(HealthCheckerWatch, OneRequestIsListedApartAndNeverCounts) {
  health_checker_watch w;
  w.record(make_address("10.0.0.7"), t0 - 5s, true);
  w.begin(t0, 1);
  w.record(make_address("10.0.0.7"), t0 + 1s, false);
  auto o = w.observe(t0 + 2s);
  ASSERT_TRUE(o);
  EXPECT_TRUE(o->checkers().empty()) << o->summary(70s);
  EXPECT_FALSE(o->all_fell()) << "one request's 503 made the drill pass";
  ASSERT_EQ(o->not_counted().size(), 1u);
  EXPECT_EQ(o->not_counted()[0],
            "10.0.0.7 (one request in the minute before, not a regular probe)");

  probe_every(w, "10.0.0.1", -10s, 1s, 0s);
  w.begin(t0, 1);
  w.record(make_address("10.0.0.1"), t0 + 1s, false);
  o = w.observe(t0 + 2s);
  ASSERT_EQ(o->checkers().size(), 1u);
  EXPECT_EQ(o->checkers()[0].address, "10.0.0.1");
  EXPECT_EQ(o->not_counted().size(), 1u);
  EXPECT_NE(o->summary(70s).find("; not counted: 10.0.0.7 (one request"), std::string::npos)
      << o->summary(70s);
}

TEST(HealthCheckerWatch, NoCheckerIsSaidAtOnce) {
  health_checker_watch w;
  EXPECT_FALSE(w.observe(t0)) << "nothing before begin()";
  w.begin(t0, 3);
  const auto o = w.observe(t0);
  ASSERT_TRUE(o);
  EXPECT_TRUE(o->checkers().empty());
  EXPECT_FALSE(o->all_fell());
  EXPECT_EQ(o->summary(70s),
            "no remote checker probed /readyz in the minute before: unready cannot take this node "
            "out of a load balancer that checks kube-apiserver itself, the drain rests on "
            "kube-apiserver's own readiness after its signal");
  EXPECT_EQ(o->fields(70s), (log_fields{{"lb_fall", "3"},
                                        {"lb_elapsed_ms", "0"},
                                        {"lb_checkers", "0"},
                                        {"lb_checkers_fallen", "0"}}));
}

TEST(HealthCheckerWatch, AllFellFieldsCarryTheDrainLeft) {
  health_checker_watch w;
  probe_every(w, "2001:db8::1", -10s, 1s, 3s);
  w.begin(t0, 2);
  const auto f = w.observe(t0 + 3s)->fields(1500ms);
  ASSERT_GE(f.size(), 7u);
  EXPECT_EQ(f[4], (std::pair<std::string, std::string>("lb_fell_ms", "1000")));
  EXPECT_EQ(f[5], (std::pair<std::string, std::string>("lb_drain_left_ms", "500")));
  EXPECT_EQ(f[6].second, "2001:db8::1");
  EXPECT_EQ(w.observe(t0 + 3s)->summary(1500ms),
            "1 checker saw 2 x 503 by +1.0 s; drain-delay 1.5 s leaves 0.5 s for propagation");
}

TEST(HealthCheckerWatch, AnIpv4MappedAddressIsTheIpv4One) {
  health_checker_watch w;
  w.record(make_address("::ffff:10.0.0.1"), t0 - 2s, true);
  w.record(make_address("10.0.0.1"), t0 - 1s, true);
  EXPECT_EQ(w.addresses(), 1u);
  w.begin(t0, 3);
  const auto o = w.observe(t0);
  EXPECT_EQ(o->checkers()[0].address, "10.0.0.1");
  EXPECT_EQ(o->checkers()[0].interval, 1s);
}

TEST(HealthCheckerWatch, AnswersBeforeALateBeginCount) {
  health_checker_watch w;
  probe_every(w, "10.0.0.1", -5s, 500ms, 1'500ms);  // +0, +0.5, +1.0 are 503s
  w.begin(t0, 3);
  const auto o = w.observe(t0 + 1'500ms);
  EXPECT_EQ(o->checkers()[0].probes_since, 3u);
  EXPECT_EQ(o->checkers()[0].interval, 500ms);
  EXPECT_EQ(o->all_fell(), 1s);
}

TEST(HealthCheckerWatch, TheLeastRecentlySeenGivesWayAtTheCap) {
  health_checker_watch w;
  const auto address_of = [](std::size_t i) {
    return "10.1." + std::to_string(i / 250) + "." + std::to_string(i % 250);
  };
  for (std::size_t i = 0; i < health_checker_watch::kMaxAddresses; ++i) {
    w.record(make_address(address_of(i)), t0 - 50s + static_cast<int>(i) * 10ms, true);
  }
  w.record(make_address(address_of(0)), t0 - 30s, true);  // 0 is seen again: 1 is the oldest
  EXPECT_EQ(w.addresses(), health_checker_watch::kMaxAddresses);
  w.record(make_address("10.9.9.9"), t0 - 20s, true);
  EXPECT_EQ(w.addresses(), health_checker_watch::kMaxAddresses);
  // A second probe from each makes it a checker (one request is none, issue 35 item 2).
  for (std::size_t i = 2; i < health_checker_watch::kMaxAddresses; ++i) {
    w.record(make_address(address_of(i)), t0 - 10s, true);
  }
  w.record(make_address("10.9.9.9"), t0 - 5s, true);
  w.begin(t0, 3);
  const auto o = w.observe(t0);
  ASSERT_EQ(o->checkers().size(), health_checker_watch::kMaxAddresses);
  for (const auto& c : o->checkers()) EXPECT_NE(c.address, address_of(1));
  // A flood of new addresses during the drill leaves a checker's figures as they were.
  w.record(make_address(address_of(0)), t0 + 1s, false);
  for (std::size_t i = 0; i < health_checker_watch::kMaxAddresses; ++i) {
    w.record(make_address("10.2.0." + std::to_string(i)), t0 + 2s, true);
  }
  w.record(make_address(address_of(0)), t0 + 3s, false);
  w.record(make_address(address_of(0)), t0 + 4s, false);
  const auto after = w.observe(t0 + 5s);
  EXPECT_EQ(after->fallen(), 1u);
  EXPECT_EQ(after->checkers().back().address, address_of(0));
  EXPECT_EQ(after->checkers().back().fell, 4s);
  EXPECT_EQ(after->checkers().back().probes_since, 3u);
}

TEST(HealthCheckerWatch, ManyLaggardsAreCounted) {
  health_checker_watch w;
  for (int i = 0; i < 5; ++i) probe_every(w, "10.0.0." + std::to_string(i), -2s, 1s, 0s);
  w.begin(t0, 3);
  EXPECT_EQ(w.observe(t0 + 1s)->summary(70s),
            "none of 5 checkers saw 3 x 503; not yet by +1.0 s: 10.0.0.0 (0 x 503 in a row, 0 "
            "probes since), 10.0.0.1 (0 x 503 in a row, 0 probes since), 10.0.0.2 (0 x 503 in a "
            "row, 0 probes since) and 2 more");
}

TEST(HealthCheckerWatch, FieldsListAtMostEightCheckers) {
  health_checker_watch w;
  for (int i = 0; i < 20; ++i) probe_every(w, "10.0.0." + std::to_string(i), -2s, 1s, 0s);
  w.begin(t0, 3);
  const auto f = w.observe(t0)->fields(70s);
  EXPECT_EQ(f[2].second, "20");
  EXPECT_EQ(f.back().first, "lb_checker8_probes_since");
}

// Issue 35, item 2: the shipped DaemonSet's readinessProbe (kubelet, every second) counted as a
// checker, and a drill passed with no load balancer at all.
TEST(HealthCheckerWatch, KubeletsProbesAreListedApartAndNeverCount) {
  health_checker_watch w;
  for (auto at = -10s; at < 3s; at += 1s) {
    w.record(make_address("10.0.0.1"), t0 + at, at < 0s, /*kubelet_probe=*/true);
  }
  w.begin(t0, 3);
  const auto o = w.observe(t0 + 3s);
  ASSERT_TRUE(o);
  EXPECT_TRUE(o->checkers().empty()) << o->summary(70s);
  ASSERT_EQ(o->not_counted().size(), 1u);
  EXPECT_EQ(o->not_counted()[0], "10.0.0.1 (kubelet's readinessProbe, User-Agent kube-probe)");
  EXPECT_EQ(o->summary(70s).rfind("no remote checker probed /readyz in the minute before", 0), 0u)
      << o->summary(70s);
  EXPECT_NE(o->summary(70s).find("; not counted: 10.0.0.1 (kubelet's readinessProbe"),
            std::string::npos)
      << o->summary(70s);
  const auto f = o->fields(70s);
  EXPECT_NE(std::find(f.begin(), f.end(), std::pair<std::string, std::string>("lb_checkers", "0")),
            f.end());
  EXPECT_NE(
      std::find(f.begin(), f.end(), std::pair<std::string, std::string>("lb_not_counted", "1")),
      f.end());
}

// Issue 35, item 3: from 200 loopback addresses a prober pushed a real checker (every 3 s) out of
// the table, and the drill counted 64 "checkers" that were the prober's.
TEST(HealthCheckerWatch, AFloodOfNewAddressesCannotPushARegularCheckerOut) {
  health_checker_watch w;
  probe_every(w, "10.0.0.1", -30s, 3s, 0s);
  // Between the checker's last two probes before t0, faster than it probes.
  for (int i = 0; i < 200; ++i) {
    const auto at = t0 - 2900ms + i * 10ms;
    w.record(make_address("127.0.1." + std::to_string(i)), at, true);
  }
  w.begin(t0, 1);
  w.record(make_address("10.0.0.1"), t0 + 1s, false);
  const auto o = w.observe(t0 + 2s);
  ASSERT_TRUE(o);
  const auto& checkers = o->checkers();
  const auto real = std::find_if(checkers.begin(), checkers.end(),
                                 [](const auto& c) { return c.address == "10.0.0.1"; });
  ASSERT_NE(real, checkers.end()) << "the regular checker was pushed out: " << o->summary(70s);
  EXPECT_EQ(real->fell, 1s);
  EXPECT_LE(checkers.size(), health_checker_watch::kMaxAddresses);
  EXPECT_FALSE(o->table_full()) << "one-probe addresses give way to each other";
}

// When the table is full of regular probers, a new address is not followed, and the answer says
// the table was full.
TEST(HealthCheckerWatch, ATableFullOfRegularProbersSaysSo) {
  health_checker_watch w;
  for (std::size_t i = 0; i < health_checker_watch::kMaxAddresses; ++i) {
    probe_every(w, "10.3.0." + std::to_string(i), -10s, 2s, 0s);
  }
  w.record(make_address("10.9.9.9"), t0 - 1s, true);
  w.record(make_address("10.9.9.9"), t0 - 500ms, true);
  EXPECT_EQ(w.addresses(), health_checker_watch::kMaxAddresses);
  w.begin(t0, 3);
  const auto o = w.observe(t0);
  ASSERT_TRUE(o->table_full());
  for (const auto& c : o->checkers()) EXPECT_NE(c.address, "10.9.9.9");
  EXPECT_NE(o->summary(70s).find("; the table of probing addresses was full"), std::string::npos)
      << o->summary(70s);
}

}  // namespace
}  // namespace shim
