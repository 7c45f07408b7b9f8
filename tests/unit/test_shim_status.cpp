#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "shim_status.hpp"

namespace shim {
namespace {

using namespace std::chrono_literals;
using state = shim_status::inhibitor_state;

shim_status bound(state inhibitor) {
  shim_status s;
  s.listener_bound = true;
  s.inhibitor = inhibitor;
  s.hold_needed = 135s;
  return s;
}

const shim_status::check* find(const std::vector<shim_status::check>& checks,
                               const std::string& name) {
  for (const auto& c : checks) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

TEST(ShimStatus, NotReadyUntilListenerBoundAndFirstLockAttemptDone) {
  shim_status s;
  EXPECT_FALSE(s.ready());
  s.listener_bound = true;
  EXPECT_FALSE(s.ready()) << "the first lock attempt is still pending";
  s.inhibitor = state::held;
  EXPECT_TRUE(s.ready());
}

TEST(ShimStatus, TransientLockFaultsDoNotChangeReadiness) {
  EXPECT_TRUE(bound(state::retrying).ready());
  EXPECT_TRUE(bound(state::disabled).ready());
  auto s = bound(state::retrying);
  s.inhibitor_detail = "system bus lost";
  auto checks = s.checks();
  ASSERT_NE(find(checks, "inhibitor"), nullptr);
  EXPECT_TRUE(find(checks, "inhibitor")->ok);
  EXPECT_THAT(find(checks, "inhibitor")->detail, testing::HasSubstr("system bus lost"));
}

TEST(ShimStatus, DrainingIsUnreadyWithTheCause) {
  auto s = bound(state::held);
  s.draining = true;
  s.drain_cause = "SIGTERM";
  EXPECT_FALSE(s.ready());
  auto checks = s.checks();
  auto shutdown = find(checks, "shutdown");
  ASSERT_NE(shutdown, nullptr);
  EXPECT_FALSE(shutdown->ok);
  EXPECT_THAT(shutdown->detail, testing::StartsWith("draining since"));
  EXPECT_THAT(shutdown->detail, testing::HasSubstr("SIGTERM"));
}

TEST(ShimStatus, WaitingForTargetIsUnready) {
  auto s = bound(state::held);
  s.waiting_for_target = true;
  EXPECT_FALSE(s.ready());
  auto checks = s.checks();
  ASSERT_NE(find(checks, "target"), nullptr);
  EXPECT_FALSE(find(checks, "target")->ok);
}

TEST(ShimStatus, LogindDelayShorterThanTheHoldIsWarnedWithTheFix) {
  auto s = bound(state::held);
  EXPECT_FALSE(s.logind_delay_warning()) << "unknown is not too short";
  s.logind_delay_max_usec = 5'000'000;
  EXPECT_TRUE(s.logind_delay_too_short());
  auto warning = s.logind_delay_warning();
  ASSERT_TRUE(warning);
  EXPECT_THAT(*warning, testing::HasSubstr("InhibitDelayMaxSec="));
  EXPECT_THAT(*warning, testing::HasSubstr("logind.conf.d"));
  EXPECT_THAT(*warning, testing::HasSubstr("5s"));
  EXPECT_THAT(*warning, testing::HasSubstr("2m15s"));
  EXPECT_TRUE(s.ready()) << "a configuration warning, not a readiness failure";
  EXPECT_NE(find(s.checks(), "logind-inhibit-delay"), nullptr);  // compared, not dereferenced

  s.logind_delay_max_usec = 135'000'000;
  EXPECT_FALSE(s.logind_delay_too_short()) << "exactly enough is enough";
  EXPECT_EQ(find(s.checks(), "logind-inhibit-delay"), nullptr);

  s.logind_delay_max_usec = std::numeric_limits<std::uint64_t>::max();
  EXPECT_FALSE(s.logind_delay_too_short()) << "InhibitDelayMaxSec=infinity";
}

TEST(ShimStatus, EnsureOutcomeShowsInTheLogindCheck) {
  auto s = bound(state::held);
  s.logind_delay_max_usec = 5'000'000;
  s.logind_delay_ensure = "raising it to 2m29s: wrote /etc/x.conf, reloading logind";
  auto checks = s.checks();
  auto check = find(checks, "logind-inhibit-delay");
  ASSERT_NE(check, nullptr);
  EXPECT_TRUE(check->ok);
  EXPECT_THAT(check->detail, testing::StartsWith("warning: "));
  EXPECT_THAT(check->detail, testing::HasSubstr("; raising it to 2m29s"));

  s.logind_delay_max_usec = 149'000'000;
  s.logind_delay_ensure = "raised from 5s to 2m29s by /etc/x.conf";
  checks = s.checks();
  check = find(checks, "logind-inhibit-delay");
  ASSERT_NE(check, nullptr);
  EXPECT_EQ(check->detail, "raised from 5s to 2m29s by /etc/x.conf");
}

// The STATUS= line that `systemctl status` shows, in each state the daemon can be in.
TEST(ShimStatus, StatusLineSaysWhatTheShimIsDoing) {
  struct row {
    std::string name;
    shim_status status;
    std::string want;
  };
  auto draining = bound(state::held);
  draining.draining = true;
  draining.drain_cause = "PrepareForShutdown(true) from :1.3";
  auto released = draining;
  released.inhibitor = state::released;
  auto waiting = bound(state::held);
  waiting.waiting_for_target = true;
  auto retrying = bound(state::retrying);
  retrying.inhibitor_detail = "the system bus is down: Connection reset by peer";
  auto short_delay = bound(state::held);
  short_delay.hold_needed = std::chrono::seconds(135);
  short_delay.logind_delay_max_usec = 5'000'000;
  shim_status starting;
  const std::vector<row> rows = {
      {"held", bound(state::held), "ready; holding a logind delay lock"},
      {"off", bound(state::disabled), "ready; no logind lock (--inhibit=off)"},
      {"retrying", retrying,
       "ready; no logind lock (the system bus is down: Connection reset by peer)"},
      {"draining", draining, "draining, reboot on hold: PrepareForShutdown(true) from :1.3"},
      {"released", released, "hold over, unready: PrepareForShutdown(true) from :1.3"},
      {"waiting", waiting, "shutdown cancelled; waiting for the target to run again"},
      {"starting", starting, "starting"},
      {"too short", short_delay,
       "ready; holding a logind delay lock; WARNING: logind InhibitDelayMaxSec too short"},
  };
  for (const auto& r : rows) EXPECT_EQ(status_line(r.status), r.want) << r.name;
}

}  // namespace
}  // namespace shim
