// `shutdown-shim drill` and `status` against the real logind (issue 23): a drill is a drain
// without a shutdown, and a reboot during one is held for what is left of the drain.

#include <fmt/core.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <iostream>
#include <thread>

#include "shim_harness.hpp"

namespace shim_it {
namespace {

using testing::HasSubstr;

class ShimDrill : public ShimTest {
 protected:
  std::string state_dir_flag() { return "--state-dir=" + runtime_dir().string(); }
  cli_run drill(std::vector<std::string> args) {
    args.insert(args.begin(), "drill");
    args.push_back(state_dir_flag());
    return run_cli(args);
  }
  cli_run status(std::vector<std::string> args = {}) {
    args.insert(args.begin(), "status");
    args.push_back(state_dir_flag());
    return run_cli(args);
  }
  std::size_t shim_locks() {
    std::size_t n = 0;
    for (const auto& lock : sb().list_inhibitors()) n += lock.who == "shutdown-shim" ? 1 : 0;
    return n;
  }
};

// The drill turns /readyz unready for its length and back, with the one lock the shim held and
// no signal to the target; status shows it, and the event log has both ends.
TEST_F(ShimDrill, ADrillHoldsNoExtraLockAndSendsNoSignal) {
  auto api = start_apiserver("kube-apiserver", api_delay("1s"));
  auto s = start_shim(attach_to(api, "3s", "5s"));
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(wait_shim_lock(true));
  ASSERT_EQ(shim_locks(), 1u);
  const auto idle = status();
  EXPECT_EQ(idle.exit_code, 0) << "ready";
  EXPECT_THAT(idle.out, HasSubstr("phase          idle"));

  sandbox::http_client client(s.port);
  const auto started = drill({"--duration=3s", "--no-wait"});
  ASSERT_EQ(started.exit_code, 0);
  EXPECT_THAT(started.out, HasSubstr("drill: "));
  EXPECT_EQ(client.get("/readyz").status, 503u) << "unready at once";
  EXPECT_EQ(shim_locks(), 1u) << "a drill takes no lock of its own";
  EXPECT_TRUE(shim_lock_listed(s)) << "the drill keeps the shim's lock";
  const auto during = status();
  EXPECT_EQ(during.exit_code, 1) << "not ready during the drill";
  EXPECT_THAT(during.out, HasSubstr("phase          drill"));
  EXPECT_THAT(during.out, HasSubstr("[-]drill failed: a drill since "));
  const auto json = status({"--json"});
  EXPECT_THAT(json.out, HasSubstr("\"phase\":\"drill\""));
  EXPECT_EQ(drill({"--no-wait"}).exit_code, 1) << "a second drill is refused";

  ASSERT_TRUE(wait_shim_ready(s, 10s)) << "ready again after the drill";
  EXPECT_TRUE(api.signals().empty()) << "a drill sends no signal";
  EXPECT_EQ(shim_locks(), 1u);
  EXPECT_EQ(s.count_events("DrillStarted"), 1u);
  ASSERT_EQ(s.count_events("DrillEnded"), 1u);
  EXPECT_EQ(s.first_event("DrillEnded")->cause, "completed");
  EXPECT_EQ(s.count_events("ShutdownInitiated"), 0u);
  EXPECT_EQ(s.count_events("InhibitorReleased"), 0u);
  const auto after = status();
  EXPECT_EQ(after.exit_code, 0);
  EXPECT_THAT(after.out, HasSubstr("last drill     completed after "));
}

// A reboot 3 s into a drill with a 6 s drain is held for the 3 s left (the target exits 1 s after
// its signal), not for a drain of its own; the target gets one SIGTERM.
TEST_F(ShimDrill, ARebootDuringADrillIsHeldForTheRemainingDrainOnly) {
  auto api = start_apiserver("kube-apiserver", api_delay("1s"));
  auto s = start_shim(attach_to(api, "6s", "10s"));
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(wait_shim_lock(true));
  const auto drill_us = sandbox::monotonic_us();
  ASSERT_EQ(drill({"--duration=60s", "--no-wait"}).exit_code, 0);
  std::this_thread::sleep_for(3s);
  sandbox::http_prober prober(s.port);
  auto r = reboot_and_observe(api, prober);
  report(r);
  ASSERT_TRUE(r.start) << "logind never started reboot.target";
  const double held_s = static_cast<double>(r.start->usec - r.reboot_us) / 1e6;
  const double since_drill_s = static_cast<double>(r.start->usec - drill_us) / 1e6;
  std::cout << fmt::format(
      "FIGURES held {:.2f} s after the reboot, {:.2f} s after the drill began\n", held_s,
      since_drill_s);
  EXPECT_GE(since_drill_s, 6.0) << "the drain, counted from the drill's start, was cut";
  // Not a time bound but which moment the drain is counted from: from the reboot, DrainElapsed
  // could not come before reboot + 6 s; from the drill's start it is due 3 s earlier.
  const auto drained = s.first_event("DrainElapsed");
  ASSERT_TRUE(drained);
  EXPECT_LT(drained->monotonic_us, r.reboot_us + 6'000'000u)
      << "the drain was counted from the reboot, not from the drill's start";
  EXPECT_EQ(api.signals().size(), 1u) << "exactly one signal";
  ASSERT_EQ(s.count_events("DrillEnded"), 1u);
  EXPECT_EQ(s.first_event("DrillEnded")->cause, "shutdown");
  EXPECT_EQ(s.count_events("ShutdownInitiated"), 1u);
}

TEST_F(ShimDrill, NoShimIsExitThree) {
  const auto dir = sb().path("nobody-home");
  std::filesystem::create_directories(dir);
  const auto r = run_cli({"status", "--state-dir=" + dir.string()});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_THAT(r.err, HasSubstr("no shutdown-shim is listening on "));
  EXPECT_EQ(run_cli({"drill", "--state-dir=" + dir.string()}).exit_code, 3);
}

}  // namespace
}  // namespace shim_it
