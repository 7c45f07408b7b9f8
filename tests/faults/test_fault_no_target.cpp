// Issue 8, item 8: a shutdown with no target to signal, then cancelled. Nothing was signalled, so
// there is nothing to wait for: the shim must return to what it was as soon as it holds the lock
// again. Since issue 9 a shim whose target does not run is unready for that alone (its target
// check), so "ready again" is every other check passing: /readyz?exclude=target answers 200, and
// the target check says the target was never found, not that a cancel waits for one.
//
// Issue 18, item 7: the same with no target configured at all (the shim only flips readiness and
// holds). There the cancel left /readyz at 503 for good, "[-]target failed: shutdown cancelled
// after the signal; waiting for a target that did not have it", though nothing was signalled.

#include <fmt/core.h>
#include <gtest/gtest.h>

#include <thread>

#include "shim_harness.hpp"

namespace shim_it {
namespace {

// Short enough for /proc/PID/comm (15 characters), and checked to be nobody's.
constexpr const char* kNoSuchName = "no-such-target";

class FaultNoTarget : public ShimTest {
 protected:
  // A reboot the shim acts on (a 503 during it), then its job cancelled: logind says
  // PrepareForShutdown(false) at cancelled_us.
  void reboot_then_cancel(const shim& s, std::uint64_t& cancelled_us) {
    // Without its target the shim is unready before the reboot too: the shutdown's 503 is told by
    // the other checks (the plain /readyz made the test depend on whether the prober's first
    // answer came before the reboot's moment or after it: it failed so once on a loaded machine).
    sandbox::http_prober prober(s.port, "/readyz?exclude=target");
    const auto t0 = sb().reboot();
    const auto start = sb().wait_for_start_unit("reboot.target", kEventTimeout, t0);
    prober.stop();
    ASSERT_TRUE(start) << "logind never started reboot.target";
    EXPECT_TRUE(prober.first_status_at(503, t0)) << "the shim did not act on the shutdown at all";
    const auto before = sb().prepare_for_shutdown_signals().size();
    sb().cancel_last_job();
    ASSERT_TRUE(sb().wait_for_prepare_for_shutdown(false, kEventTimeout, before));
    cancelled_us = sandbox::monotonic_us();
  }

  // Every check but the target's passes: /readyz?exclude=target answers 200 (bounded polling).
  bool wait_ready_but_target(const shim& s) {
    const auto deadline = std::chrono::steady_clock::now() + kEventTimeout;
    while (std::chrono::steady_clock::now() < deadline) {
      auto r = wait_shim_answer(s, "/readyz?exclude=target", 2s);
      if (r && r->status == 200) return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }
};

TEST_F(FaultNoTarget, CancelWithNoTargetReturnsToReady) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    ASSERT_NE(sandbox::read_text_file(entry.path() / "comm"), std::string(kNoSuchName) + "\n")
        << "a process is named " << kNoSuchName << ": " << entry.path();
  }
  shim_options o;
  o.drain_delay = "1s";
  o.exit_timeout = "2s";
  o.target = {fmt::format("--target-name={}", kNoSuchName)};
  auto s = start_shim(o, /*wait_ready=*/false);
  ASSERT_TRUE(wait_shim_lock_of(s));
  const auto before_reboot = wait_shim_answer(s, "/readyz?verbose&exclude=target");
  ASSERT_TRUE(before_reboot && before_reboot->status == 200)
      << (before_reboot ? before_reboot->body : "no answer");

  std::uint64_t cancelled_us = 0;
  ASSERT_NO_FATAL_FAILURE(reboot_then_cancel(s, cancelled_us));
  const bool relocked = wait_shim_lock_of(s, kEventTimeout);
  const auto relocked_us = sandbox::monotonic_us();
  const bool ready = wait_ready_but_target(s);
  const auto ready_us = sandbox::monotonic_us();
  std::cout << fmt::format(
                   "FIGURES no_target_cancel lock_again_ms={} ready_again_ms={}",
                   relocked ? fmt::format("{:.1f}", ms_between(cancelled_us, relocked_us)) : "none",
                   ready ? fmt::format("{:.1f}", ms_between(cancelled_us, ready_us)) : "none")
            << std::endl;
  EXPECT_TRUE(relocked) << "the lock was not taken again after the cancel";
  EXPECT_TRUE(ready) << "/readyz?exclude=target did not return to 200 after the cancel";
  const auto after = wait_shim_answer(s, "/readyz?verbose");
  ASSERT_TRUE(after);
  EXPECT_EQ(after->status, 503u) << after->body;
  EXPECT_EQ(readyz_check_line(after->body, "target"),
            fmt::format("[-]target failed: not found yet: no process named {} owned by uid 0",
                        kNoSuchName))
      << after->body;
}

TEST_F(FaultNoTarget, CancelWithNoTargetConfiguredReturnsToReady) {
  shim_options o;
  o.drain_delay = "1s";
  o.exit_timeout = "2s";
  auto s = start_shim(o);
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(wait_shim_lock_of(s));

  std::uint64_t cancelled_us = 0;
  ASSERT_NO_FATAL_FAILURE(reboot_then_cancel(s, cancelled_us));
  const bool relocked = wait_shim_lock_of(s, kEventTimeout);
  const bool ready = wait_shim_ready(s, kEventTimeout);
  const auto ready_us = sandbox::monotonic_us();
  std::cout << fmt::format(
                   "FIGURES no_target_configured_cancel ready_again_ms={}",
                   ready ? fmt::format("{:.1f}", ms_between(cancelled_us, ready_us)) : "none")
            << std::endl;
  EXPECT_TRUE(relocked) << "the lock was not taken again after the cancel";
  EXPECT_TRUE(ready) << "/readyz did not return to 200 after the cancel";
  const auto after = wait_shim_answer(s, "/readyz?verbose");
  ASSERT_TRUE(after);
  EXPECT_EQ(after->status, 200u) << after->body;
  EXPECT_FALSE(readyz_check_line(after->body, "target")) << "no target, no target check";
  EXPECT_EQ(s.count_events("ShutdownCancelled"), 1u);
  EXPECT_EQ(s.count_events("SignalForwarded"), 0u);
}

}  // namespace
}  // namespace shim_it
