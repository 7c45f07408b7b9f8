// Issue 8, item 8: a shutdown with no target to signal, then cancelled. Nothing was signalled, so
// there is nothing to wait for: the shim must return to ready as soon as it holds the lock again.

#include <fmt/core.h>
#include <gtest/gtest.h>

#include "shim_harness.hpp"

namespace shim_it {
namespace {

// Short enough for /proc/PID/comm (15 characters), and checked to be nobody's.
constexpr const char* kNoSuchName = "no-such-target";

class FaultNoTarget : public ShimTest {};

TEST_F(FaultNoTarget, CancelWithNoTargetReturnsToReady) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    ASSERT_NE(sandbox::read_text_file(entry.path() / "comm"), std::string(kNoSuchName) + "\n")
        << "a process is named " << kNoSuchName << ": " << entry.path();
  }
  shim_options o;
  o.drain_delay = "1s";
  o.exit_timeout = "2s";
  o.target = {fmt::format("--target-name={}", kNoSuchName)};
  auto s = start_shim(o);
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(wait_shim_lock_of(s));

  sandbox::http_prober prober(s.port);
  const auto t0 = sb().reboot();
  const auto start = sb().wait_for_start_unit("reboot.target", kEventTimeout, t0);
  prober.stop();
  ASSERT_TRUE(start) << "logind never started reboot.target";
  EXPECT_TRUE(prober.first_status_at(503, t0)) << "the shim did not act on the shutdown at all";

  // The reboot job is cancelled: logind says PrepareForShutdown(false).
  const auto before = sb().prepare_for_shutdown_signals().size();
  sb().cancel_last_job();
  ASSERT_TRUE(sb().wait_for_prepare_for_shutdown(false, kEventTimeout, before));
  const auto cancelled_us = sandbox::monotonic_us();
  const bool relocked = wait_shim_lock_of(s, kEventTimeout);
  const auto relocked_us = sandbox::monotonic_us();
  const bool ready = wait_shim_ready(s, kEventTimeout);
  const auto ready_us = sandbox::monotonic_us();
  std::cout << fmt::format(
                   "FIGURES no_target_cancel lock_again_ms={} ready_again_ms={}",
                   relocked ? fmt::format("{:.1f}", ms_between(cancelled_us, relocked_us)) : "none",
                   ready ? fmt::format("{:.1f}", ms_between(cancelled_us, ready_us)) : "none")
            << std::endl;
  EXPECT_TRUE(relocked) << "the lock was not taken again after the cancel";
  EXPECT_TRUE(ready) << "/readyz did not return to 200 after the cancel";
}

}  // namespace
}  // namespace shim_it
