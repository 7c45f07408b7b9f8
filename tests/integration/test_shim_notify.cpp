// sd_notify end to end: the shim gets a NOTIFY_SOCKET the test binds (as systemd would for a
// Type=notify unit) and, with WATCHDOG_USEC and WATCHDOG_PID, a watchdog to feed.

#include <fmt/core.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <thread>

#include "notify_socket.hpp"
#include "shim_harness.hpp"

namespace shim_it {
namespace {

class ShimNotify : public ShimTest {};

TEST_F(ShimNotify, ReadyOnceTheLockIsHeldStatusLinesAndStoppingOnlyWhenItExits) {
  notify_socket notify(sb().path("notify.sock"));
  auto api = start_apiserver("kube-apiserver", api_delay("500ms"));
  shim_options o = attach_to(api, "2s", "5s");
  o.extra_env = {notify.env()};
  auto s = start_shim(o, /*wait_ready=*/false);

  ASSERT_TRUE(notify.wait_for("READY=1", kStartTimeout)) << "no READY=1";
  // The lock is taken before READY=1 is sent, so logind lists it by now.
  EXPECT_TRUE(sb().find_inhibitor("shutdown-shim")) << "READY=1 before the lock was held";
  EXPECT_TRUE(notify.first("STATUS=ready; holding a logind delay lock"));
  EXPECT_TRUE(wait_shim_ready(s));

  sandbox::http_prober prober(s.port);
  auto r = reboot_and_observe(api, prober);
  report(r);
  ASSERT_TRUE(r.start);
  ASSERT_TRUE(notify.wait_for("STATUS=hold over", kEventTimeout)) << "no STATUS= line at the end";
  EXPECT_TRUE(notify.first("STATUS=draining, reboot on hold: PrepareForShutdown(true)"))
      << "no STATUS= line for the drain";
  // After PrepareForShutdown the shim stays up: systemd would take STOPPING=1 as the start of
  // its stop and SIGKILL the shim TimeoutStopSec later, holding the reboot that long.
  EXPECT_EQ(notify.count("STOPPING=1"), 0u) << "STOPPING=1 although the shim keeps running";
  EXPECT_EQ(notify.count("READY=1"), 1u);
  EXPECT_EQ(notify.count("WATCHDOG=1"), 0u) << "pings without WATCHDOG_USEC";

  // The reboot's stop of the unit: now the shim exits, and says so first.
  const auto sigterm_us = sandbox::monotonic_us();
  s.process->signal(SIGTERM);
  ASSERT_TRUE(s.process->wait_for_exit(kEventTimeout)) << "the shim did not exit after SIGTERM";
  ASSERT_TRUE(notify.wait_for("STOPPING=1", kEventTimeout)) << "no STOPPING=1 when exiting";
  EXPECT_GE(notify.first("STOPPING=1")->usec, sigterm_us);
}

TEST_F(ShimNotify, WatchdogPingsAtHalfTheIntervalAlsoDuringTheHold) {
  notify_socket notify(sb().path("notify.sock"));
  auto api = start_apiserver("kube-apiserver", api_delay("500ms"));
  shim_options o = attach_to(api, "2s", "5s");
  o.extra_env = {notify.env(), "WATCHDOG_USEC=400000"};
  // systemd sets WATCHDOG_PID to the main process: the shell's PID is the shim's after exec.
  o.launcher = {"/bin/sh", "-c", "WATCHDOG_PID=$$ exec \"$0\" \"$@\""};
  auto s = start_shim(o);
  ASSERT_FALSE(HasFailure());

  const auto pings = [](std::size_t n) {
    return [n](const std::vector<notify_socket::line>& lines) {
      std::size_t c = 0;
      for (const auto& l : lines) c += l.text == "WATCHDOG=1" ? 1 : 0;
      return c >= n;
    };
  };
  ASSERT_TRUE(notify.wait_until(pings(5), kStartTimeout)) << "fewer than 5 WATCHDOG=1";
  std::vector<std::uint64_t> at;
  for (const auto& l : notify.lines()) {
    if (l.text == "WATCHDOG=1") at.push_back(l.usec);
  }
  std::string gaps;
  for (std::size_t i = 1; i < at.size(); ++i)
    gaps += fmt::format(" {:.0f}", ms_between(at[i - 1], at[i]));
  std::cout << "FIGURES watchdog gaps_ms (200 ms period):" << gaps << std::endl;

  // The loop stays healthy through the hold: pings go on after the drain has started.
  sb().reboot();
  ASSERT_TRUE(notify.wait_for("STATUS=draining", kEventTimeout));
  const auto draining = notify.first("STATUS=draining")->usec;
  EXPECT_TRUE(notify.wait_until(
      [&](const auto&) { return notify.first("WATCHDOG=1", draining).has_value(); }, 10s))
      << "no WATCHDOG=1 during the hold";
}

TEST_F(ShimNotify, AWatchdogForAnotherPidIsNotFed) {
  notify_socket notify(sb().path("notify.sock"));
  auto api = start_apiserver("kube-apiserver", api_delay("500ms"));
  shim_options o = attach_to(api, "2s", "5s");
  o.extra_env = {notify.env(), "WATCHDOG_USEC=400000", "WATCHDOG_PID=1"};
  auto s = start_shim(o);
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(notify.wait_for("READY=1", kStartTimeout));
  // Absence can only be watched for: 1 s is five of the would-be periods.
  std::this_thread::sleep_for(1s);
  EXPECT_EQ(notify.count("WATCHDOG=1"), 0u) << "WATCHDOG_PID names another process";
}

}  // namespace
}  // namespace shim_it
