// Self-tests of the harness against the real systemd-logind, independent of the shim: if these
// fail, the shim tests' failures say nothing about the shim.

#include <fmt/core.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>

#include "shim_harness.hpp"

namespace shim_it {
namespace {

class SandboxSelfTest : public ShimTest {};

TEST_F(SandboxSelfTest, EverythingPointsAtThePrivateBus) {
  auto& s = sb();
  const char* env = std::getenv("DBUS_SYSTEM_BUS_ADDRESS");
  ASSERT_NE(env, nullptr);
  EXPECT_EQ(std::string(env), s.bus_address());
  EXPECT_TRUE(sandbox::is_private_bus_address(s.bus_address()));
  EXPECT_FALSE(sandbox::is_private_bus_address("unix:path=/run/dbus/system_bus_socket"));
  EXPECT_FALSE(sandbox::is_private_bus_address("unix:path=/var/run/dbus/system_bus_socket"));
  EXPECT_FALSE(
      sandbox::is_private_bus_address("unix:path=/tmp/x;unix:path=/run/dbus/system_bus_socket"));
  EXPECT_THROW(sandbox::private_bus("unix:path=/run/dbus/system_bus_socket"), std::logic_error);
  std::size_t count = 0;
  for (const auto& e : s.child_environment()) {
    if (e.starts_with("DBUS_SYSTEM_BUS_ADDRESS=")) {
      ++count;
      EXPECT_EQ(e, "DBUS_SYSTEM_BUS_ADDRESS=" + s.bus_address());
    }
    EXPECT_FALSE(e.starts_with("NOTIFY_SOCKET="));
  }
  EXPECT_EQ(count, 1u);
  EXPECT_EQ(s.bus().name_owner("org.freedesktop.login1").empty(), false);
  EXPECT_EQ(s.bus().name_owner("org.freedesktop.systemd1").empty(), false);
  sandbox_.reset();
  EXPECT_STREQ(std::getenv("DBUS_SYSTEM_BUS_ADDRESS"), sandbox::kNoBusAddress);
}

TEST_F(SandboxSelfTest, LogindHoldsRebootWhileADelayLockIsHeld) {
  auto& s = sb();
  EXPECT_EQ(s.inhibit_delay_max_usec(), 30'000'000u);
  auto lock = s.take_inhibitor("sandbox-selftest", "holding the reboot");
  auto mine = s.find_inhibitor("sandbox-selftest");
  ASSERT_TRUE(mine);
  EXPECT_EQ(mine->what, "shutdown");
  EXPECT_EQ(static_cast<pid_t>(mine->pid), getpid());

  const auto t0 = s.reboot();
  ASSERT_TRUE(s.wait_for_prepare_for_shutdown(true, kEventTimeout));
  EXPECT_TRUE(s.preparing_for_shutdown());
  // While the lock is held logind must not go ahead: a bounded look for the absence of StartUnit.
  EXPECT_FALSE(s.wait_for_start_unit("reboot.target", 1500ms, t0));

  const auto released = sandbox::monotonic_us();
  lock.release();
  auto start = s.wait_for_start_unit("reboot.target", kEventTimeout, t0);
  ASSERT_TRUE(start);
  EXPECT_EQ(start->mode, "replace-irreversibly");
  EXPECT_GE(start->usec, released);
  std::cout << fmt::format("logind: Reboot -> StartUnit {:.0f} ms (lock released at {:.0f} ms)\n",
                           ms_between(t0, start->usec), ms_between(t0, released));
}

TEST_F(SandboxSelfTest, CancelledRebootJobMakesLogindSendPrepareForShutdownFalse) {
  auto& s = sb();
  const auto t0 = s.reboot();
  ASSERT_TRUE(s.wait_for_start_unit("reboot.target", kEventTimeout, t0));
  const auto before = s.prepare_for_shutdown_signals().size();
  s.cancel_last_job();
  ASSERT_TRUE(s.wait_for_prepare_for_shutdown(false, kEventTimeout, before));
  EXPECT_FALSE(s.preparing_for_shutdown());

  // The cue to take the lock again: it works now, and the next reboot is held by it again.
  auto lock = s.take_inhibitor("sandbox-selftest", "after cancel");
  const auto t1 = s.reboot();
  EXPECT_FALSE(s.wait_for_start_unit("reboot.target", 1000ms, t1));
  lock.release();
  EXPECT_TRUE(s.wait_for_start_unit("reboot.target", kEventTimeout, t1));
}

TEST_F(SandboxSelfTest, InhibitDelayMaxEndsTheHoldWhateverTheLocks) {
  auto& s = make_sandbox(logind_delay_max("1"));
  EXPECT_EQ(s.inhibit_delay_max_usec(), 1'000'000u);
  auto lock = s.take_inhibitor("sandbox-selftest", "never released in time");
  const auto t0 = s.reboot();
  auto start = s.wait_for_start_unit("reboot.target", kEventTimeout, t0);
  ASSERT_TRUE(start);
  EXPECT_GE(start->usec - t0, 1'000'000u);
  EXPECT_TRUE(lock.held());
  EXPECT_NE(
      sandbox::read_text_file(s.log_path("systemd-logind")).find("inhibitor timeout is reached"),
      std::string::npos);
}

TEST_F(SandboxSelfTest, DelayLockSurvivesALogindRestart) {
  auto& s = sb();
  auto lock = s.take_inhibitor("sandbox-selftest", "across a restart");
  const auto old_pid = s.logind_pid();
  s.restart_logind();
  EXPECT_NE(s.logind_pid(), old_pid);
  ASSERT_TRUE(s.wait_for_inhibitor("sandbox-selftest", true, 10s));

  const auto t0 = s.reboot();
  EXPECT_FALSE(s.wait_for_start_unit("reboot.target", 1000ms, t0));
  lock.release();
  EXPECT_TRUE(s.wait_for_start_unit("reboot.target", kEventTimeout, t0));
}

TEST_F(SandboxSelfTest, LogindReloadsItsConfigurationOnKillUnitSighup) {
  auto& s = sb();
  s.set_inhibit_delay_max("45");
  // The file alone changes nothing: logind reads it at start and on SIGHUP.
  ASSERT_EQ(s.inhibit_delay_max_usec(), 30'000'000u);
  ASSERT_TRUE(s.kill_unit_calls().empty());

  // What kubelet and --ensure-inhibit-delay do: KillUnit through PID 1, which the stand-in turns
  // into a real SIGHUP to logind's main PID. Nothing else signals logind here.
  s.bus().call("org.freedesktop.systemd1", "/org/freedesktop/systemd1",
               "org.freedesktop.systemd1.Manager", "KillUnit", "ssi", "systemd-logind.service",
               "all", SIGHUP);
  const auto calls = s.kill_unit_calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].unit, "systemd-logind.service");
  EXPECT_EQ(calls[0].who, "all");
  EXPECT_EQ(calls[0].signal, SIGHUP);
  EXPECT_TRUE(s.wait_for_inhibit_delay_max(45'000'000u, 10s))
      << "logind still reads InhibitDelayMaxUSec=" << s.inhibit_delay_max_usec()
      << " after KillUnit(SIGHUP)";
  EXPECT_TRUE(s.logind_running());
}

TEST_F(SandboxSelfTest, DbusRestartBringsTheNodeBack) {
  auto& s = sb();
  s.set_system_state("stopping");
  s.restart_dbus();
  EXPECT_FALSE(s.bus().name_owner("org.freedesktop.login1").empty());
  EXPECT_EQ(s.system_state(), "stopping");  // the manager kept its state across the reconnect
  const auto t0 = s.reboot();
  EXPECT_TRUE(s.wait_for_start_unit("reboot.target", kEventTimeout, t0));
}

TEST_F(SandboxSelfTest, StandInManagerKillsRegisteredProcessesOnReboot) {
  auto& s = sb();
  EXPECT_EQ(s.system_state(), "running");
  s.set_system_state("stopping");
  EXPECT_EQ(s.system_state(), "stopping");
  auto api = start_apiserver("victim", api_delay("60s"));
  ASSERT_TRUE(api.process);
  s.set_kill_on_reboot({api.process->pid()});
  const auto t0 = s.reboot();
  auto start = s.wait_for_start_unit("reboot.target", kEventTimeout, t0);
  ASSERT_TRUE(start);
  auto status = api.process->wait_for_exit(10s);
  ASSERT_TRUE(status);
  EXPECT_EQ(sandbox::shell_exit_code(*status), 128 + SIGKILL);
  auto killed = s.killed_on_reboot();
  ASSERT_EQ(killed.size(), 1u);
  EXPECT_EQ(static_cast<pid_t>(killed[0].pid), api.process->pid());
  EXPECT_TRUE(killed[0].was_alive);
  EXPECT_GE(killed[0].usec, start->usec);
}

TEST_F(SandboxSelfTest, FakeApiserverShutsDownLikeKubeApiserver) {
  auto api = start_apiserver("api", api_delay("1s"));
  ASSERT_TRUE(api.process);
  sandbox::http_client client(api.port());
  auto ready = client.get("/readyz");
  ASSERT_TRUE(ready.ok) << ready.error;
  EXPECT_EQ(ready.status, 200u);
  EXPECT_EQ(ready.body, "ok");
  EXPECT_EQ(ready.backend, "api");
  auto head = client.head("/livez");
  ASSERT_TRUE(head.ok) << head.error;
  EXPECT_EQ(head.status, 200u);
  EXPECT_TRUE(head.body.empty());

  const auto t0 = sandbox::monotonic_us();
  api.process->signal(SIGTERM);
  ASSERT_TRUE(wait_signal_count(api, 1));
  auto unready = client.get("/readyz");
  ASSERT_TRUE(unready.ok) << unready.error;
  EXPECT_EQ(unready.status, 500u);
  EXPECT_NE(unready.body.find("[-]shutdown failed: reason withheld"), std::string::npos);
  auto live = client.get("/livez");
  ASSERT_TRUE(live.ok) << live.error;
  EXPECT_EQ(live.status, 200u);
  EXPECT_EQ(live.backend, "api");

  auto status = api.process->wait_for_exit(kEventTimeout);
  ASSERT_TRUE(status);
  EXPECT_EQ(sandbox::shell_exit_code(*status), 0);
  auto signals = api.signals();
  ASSERT_EQ(signals.size(), 1u);
  EXPECT_EQ(signals[0].word, "SIGTERM");
  EXPECT_GE(signals[0].usec, t0);
  auto exit_at = api.lifecycle_at("EXIT");
  ASSERT_TRUE(exit_at);
  EXPECT_GE(*exit_at - signals[0].usec, 1'000'000u);

  // A second signal ends it at once, with 1.
  auto api2 = start_apiserver("api2", api_delay("60s"));
  ASSERT_TRUE(api2.process);
  api2.process->signal(SIGTERM);
  ASSERT_TRUE(wait_signal_count(api2, 1));
  api2.process->signal(SIGINT);
  auto status2 = api2.process->wait_for_exit(kEventTimeout);
  ASSERT_TRUE(status2);
  EXPECT_EQ(sandbox::shell_exit_code(*status2), 1);
  EXPECT_EQ(api2.signals().size(), 2u);
}

TEST_F(SandboxSelfTest, ForgedPrepareForShutdownIsNotFromLogind) {
  auto& s = sb();
  s.emit_forged_prepare_for_shutdown(true);
  // The harness only records PrepareForShutdown from the owner of org.freedesktop.login1.
  EXPECT_FALSE(s.wait_for_prepare_for_shutdown(true, 500ms));
  EXPECT_FALSE(s.preparing_for_shutdown());
}

}  // namespace
}  // namespace shim_it
