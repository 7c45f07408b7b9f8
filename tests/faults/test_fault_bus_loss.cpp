// Issue 8, item 5: the dbus-daemon (and with it logind) goes away during a hold and comes back only
// after the hold would have ended. While it is away the shim must say that it holds no lock; once
// it is back the shim must hold a lock again and protect the next reboot, whatever phase the first
// shutdown was in.

#include <fmt/core.h>
#include <gtest/gtest.h>

#include <thread>

#include "shim_harness.hpp"

namespace shim_it {
namespace {

constexpr const char* kDrain = "3s";
constexpr const char* kExitTimeout = "3s";
constexpr std::uint64_t kDrainUs = 3'000'000;        // kDrain
constexpr std::uint64_t kExitTimeoutUs = 3'000'000;  // kExitTimeout

class FaultBusLoss : public ShimTest {};

TEST_F(FaultBusLoss, BusBackAfterTheHoldRetakesTheLockAndHoldsTheNextReboot) {
  auto api = start_apiserver("kube-apiserver", api_delay("1s"));
  auto s = start_shim(attach_to(api, kDrain, kExitTimeout));
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(wait_shim_lock_of(s));

  const auto t0 = sb().reboot();
  ASSERT_TRUE(wait_signal_count(api, 1)) << "the apiserver never got its SIGTERM";
  sb().stop_dbus();
  const auto down_us = sandbox::monotonic_us();

  // While the bus is down and the hold still runs, /metrics and /readyz?verbose must say the lock
  // is not held. The hold's end (its events) bounds the look: after it "released" is the truth
  // whatever happened to the bus.
  sandbox::http_client client(s.port);
  bool said_not_held = false;
  std::optional<double> held;
  std::string inhibitor_line = "(none)";
  std::uint64_t said_us = 0;
  while (!s.first_event("DrainElapsed") && !s.first_event("InhibitorReleased")) {
    held = metric_value(client.get("/metrics").body, "shutdown_shim_inhibitor_held");
    inhibitor_line =
        readyz_check_line(client.get("/readyz?verbose").body, "inhibitor").value_or("(none)");
    if (held == 0.0 && inhibitor_line != "[+]inhibitor ok" &&
        inhibitor_line.find("not held") != std::string::npos) {
      said_not_held = true;
      said_us = sandbox::monotonic_us();
      break;
    }
    if (!s.process->running()) break;
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(said_not_held)
      << "while the bus was down, /metrics said shutdown_shim_inhibitor_held " << held.value_or(-1)
      << " and /readyz?verbose said '" << inhibitor_line << "'";

  // Away until after the hold would have ended (drain + exit timeout), with a second to spare.
  const auto back_at_us = t0 + kDrainUs + kExitTimeoutUs + 1'000'000;
  if (const auto now = sandbox::monotonic_us(); now < back_at_us) {
    std::this_thread::sleep_for(std::chrono::microseconds(back_at_us - now));
  }
  sb().start_dbus_again();
  const auto back_us = sandbox::monotonic_us();
  const bool relocked = wait_shim_lock_of(s, kEventTimeout);
  const auto relocked_us = sandbox::monotonic_us();
  EXPECT_TRUE(relocked) << "no lock of the shim after the bus came back";

  // The apiserver exited after its SIGTERM; kubelet would start it again.
  ASSERT_TRUE(api.process->wait_for_exit(kEventTimeout)) << "the first apiserver did not exit";
  auto api2 = start_apiserver("kube-apiserver", api_delay("1s"));
  const bool ready = wait_shim_ready(s, kEventTimeout);
  const auto ready_us = sandbox::monotonic_us();
  EXPECT_TRUE(ready) << "/readyz did not return to 200 after the bus came back";

  sandbox::http_prober prober(s.port);
  auto r = reboot_and_observe(api2, prober);
  report(r);
  std::cout << fmt::format(
                   "FIGURES bus_loss down_s={:.3f} said_not_held_ms={} reconnect_lock_ms={} "
                   "ready_again_ms={} second_hold_s={} second_sigterm={}",
                   ms_between(down_us, back_us) / 1000,
                   said_not_held ? fmt::format("{:.1f}", ms_between(down_us, said_us)) : "none",
                   relocked ? fmt::format("{:.1f}", ms_between(back_us, relocked_us)) : "none",
                   ready ? fmt::format("{:.1f}", ms_between(back_us, ready_us)) : "none",
                   r.start ? fmt::format("{:.3f}", ms_between(r.reboot_us, r.start->usec) / 1000)
                           : "none",
                   api2.signals().size())
            << std::endl;
  ASSERT_TRUE(r.start) << "logind never started reboot.target the second time";
  EXPECT_GE(r.start->usec - r.reboot_us, kDrainUs) << "the second reboot was not held";
  EXPECT_EQ(api2.signals().size(), 1u) << "the new apiserver must get exactly one SIGTERM";
}

}  // namespace
}  // namespace shim_it
