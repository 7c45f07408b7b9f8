// SIGTERM to the shim in attach mode: forwarded only when PID 1 is stopping (auto policy).

#include <fmt/core.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <iterator>

#include "shim_harness.hpp"

namespace shim_it {
namespace {

class ShimSigterm : public ShimTest {};

TEST_F(ShimSigterm, WhileSystemRunsNothingIsForwardedAndTheShimExits) {
  auto api = start_apiserver("kube-apiserver", api_delay("1s"));
  auto s = start_shim(attach_to(api, "3s", "5s"));
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(wait_shim_lock(true));
  ASSERT_EQ(sb().system_state(), "running");

  const auto t0 = sandbox::monotonic_us();
  s.process->signal(SIGTERM);
  auto status = s.process->wait_for_exit(kEventTimeout);
  ASSERT_TRUE(status) << "the shim did not exit after SIGTERM";
  std::cout << fmt::format("SIGTERM -> shim exit: {:.1f} ms\n",
                           ms_between(t0, s.process->exit_seen_us()));
  EXPECT_EQ(sandbox::shell_exit_code(*status), 0) << sandbox::describe_wait_status(*status);
  EXPECT_TRUE(api.signals().empty()) << "a shim restart must not stop the apiserver";
  EXPECT_TRUE(api.process->running());
  EXPECT_TRUE(wait_shim_lock(false, 10s)) << "the lock outlived the shim";
  EXPECT_FALSE(s.first_event("SignalForwarded"));

  // Its words: the shim stops without signalling, nothing is shutting down, no reboot is held.
  // Issue 22: recorded as a Restart, not as a shutdown.
  constexpr std::string_view kStop =
      "stopping without signalling the target: the system is not shutting down";
  EXPECT_FALSE(s.first_event("ShutdownInitiated"));
  const auto restart = s.first_event("Restart");
  ASSERT_TRUE(restart);
  EXPECT_EQ(restart->cause, "SIGTERM");
  EXPECT_NE(restart->message.find(kStop), std::string::npos) << restart->line;
  EXPECT_EQ(restart->message.find("on hold"), std::string::npos) << restart->line;
  const auto released = s.first_event("InhibitorReleased");
  ASSERT_TRUE(released);
  EXPECT_NE(released->message.find(kStop), std::string::npos) << released->line;
  EXPECT_EQ(released->message.find("the shutdown goes on"), std::string::npos) << released->line;
  std::ifstream log_file(s.log);
  const std::string log((std::istreambuf_iterator<char>(log_file)), {});
  EXPECT_NE(log.find(kStop), std::string::npos) << log;
  EXPECT_EQ(log.find("keeping the reboot on hold"), std::string::npos) << log;
}

TEST_F(ShimSigterm, WhileSystemStopsTheSignalIsForwardedOnceAndTheLockHeld) {
  auto api = start_apiserver("kube-apiserver", api_delay("1s"));
  auto s = start_shim(attach_to(api, "2s", "5s"));
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(wait_shim_lock(true));
  sb().set_system_state("stopping");
  sandbox::http_prober prober(s.port);

  const auto t0 = sandbox::monotonic_us();
  s.process->signal(SIGTERM);
  ASSERT_TRUE(wait_signal_count(api, 1)) << "the signal was not forwarded";
  EXPECT_TRUE(sb().find_inhibitor("shutdown-shim")) << "the lock must be held during the drain";
  auto status = s.process->wait_for_exit(kEventTimeout);
  ASSERT_TRUE(status) << "the shim did not finish its drain";
  prober.stop();
  std::cout << fmt::format("SIGTERM -> shim exit: {:.1f} ms ({})\n",
                           ms_between(t0, s.process->exit_seen_us()),
                           sandbox::describe_wait_status(*status));
  EXPECT_EQ(api.signals().size(), 1u);
  EXPECT_TRUE(prober.first_status_at(503, t0)) << "/readyz did not turn 503";
  auto released = s.first_event("InhibitorReleased");
  ASSERT_TRUE(released);
  EXPECT_GE(released->monotonic_us - t0, 2'000'000u) << "released before the drain delay";
}

}  // namespace
}  // namespace shim_it
