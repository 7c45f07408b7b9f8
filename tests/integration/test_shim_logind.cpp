// The shim and logind's life cycle: restarts, a too-short InhibitDelayMaxSec, no logind at all.

#include <fmt/core.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "shim_harness.hpp"

namespace shim_it {
namespace {

class ShimLogind : public ShimTest {};

TEST_F(ShimLogind, LogindRestartedWhileTheShimRunsStillHoldsTheNextReboot) {
  auto api = start_apiserver("kube-apiserver", api_delay("1s"));
  auto s = start_shim(attach_to(api, "2s", "5s"));
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(wait_shim_lock(true));

  sb().restart_logind();
  // logind re-reads /run/systemd/inhibit; the shim may also take a new lock. Either way one is
  // held.
  ASSERT_TRUE(wait_shim_lock(true, kStartTimeout)) << "no shim lock after the logind restart";
  sandbox::http_prober prober(s.port);
  auto r = reboot_and_observe(api, prober);
  report(r);
  ASSERT_TRUE(r.start);
  EXPECT_GE(r.start->usec - r.reboot_us, 2'000'000u) << "the reboot was not held after a restart";
  EXPECT_TRUE(r.first_503_us) << "the shim missed the new logind's PrepareForShutdown";
  EXPECT_EQ(api.signals().size(), 1u);
}

TEST_F(ShimLogind, BusRestartedWhileTheShimRunsStillHoldsTheNextReboot) {
  auto api = start_apiserver("kube-apiserver", api_delay("1s"));
  auto s = start_shim(attach_to(api, "2s", "5s"));
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(wait_shim_lock(true));

  sb().restart_dbus();  // logind is restarted with it
  EXPECT_TRUE(wait_event(s, "BusLost", 10s));
  EXPECT_TRUE(wait_event(s, "BusRestored", kStartTimeout));
  ASSERT_TRUE(wait_shim_lock(true, kStartTimeout)) << "no shim lock after the bus came back";
  EXPECT_TRUE(wait_shim_ready(s)) << "a bus restart is a transient fault, not unreadiness";
  sandbox::http_prober prober(s.port);
  auto r = reboot_and_observe(api, prober);
  report(r);
  ASSERT_TRUE(r.start);
  EXPECT_GE(r.start->usec - r.reboot_us, 2'000'000u);
  EXPECT_EQ(api.signals().size(), 1u);
}

TEST_F(ShimLogind, InhibitDelayMaxShorterThanTheHoldIsReported) {
  auto& node = make_sandbox(logind_delay_max("1"));
  auto api = start_apiserver("kube-apiserver", api_delay("1s"));
  auto s = start_shim(attach_to(api, "3s", "5s"));
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(wait_shim_lock(true));

  sandbox::http_client client(s.port);
  auto verbose = client.get("/readyz?verbose");
  ASSERT_TRUE(verbose.ok) << verbose.error;
  EXPECT_NE(verbose.body.find("InhibitDelayMaxSec"), std::string::npos)
      << "/readyz?verbose says nothing of InhibitDelayMaxSec:\n"
      << verbose.body;
  auto metrics = client.get("/metrics");
  ASSERT_TRUE(metrics.ok) << metrics.error;
  EXPECT_NE(metrics.body.find("shutdown_shim_logind_inhibit_delay_too_short 1"), std::string::npos)
      << metrics.body;
  // A WARNING that carries the value logind gave (1 s).
  std::size_t warnings = 0;
  for (const auto& line : sandbox::read_lines(s.log)) {
    if (sandbox::json_string_field(line, "level") == "warning" &&
        sandbox::json_string_field(line, "InhibitDelayMaxUSec") == "1000000") {
      ++warnings;
    }
  }
  EXPECT_GE(warnings, 1u) << "the shim's log has no WARNING with InhibitDelayMaxUSec=1000000:\n"
                          << sandbox::read_text_file(s.log);

  // logind then ends the hold on its own, after its 1 s, while the shim still drains.
  sandbox::http_prober prober(s.port);
  auto r = reboot_and_observe(api, prober);
  report(r);
  ASSERT_TRUE(r.start);
  EXPECT_GE(r.start->usec - r.reboot_us, 1'000'000u);
  EXPECT_NE(
      sandbox::read_text_file(node.log_path("systemd-logind")).find("inhibitor timeout is reached"),
      std::string::npos)
      << "logind did not end the hold by its timeout";
  // reboot.target started while the shim still held its lock (3 s drain): it had not let go.
  const auto released = s.first_event("InhibitorReleased");
  EXPECT_TRUE(!released || released->monotonic_us > r.start->usec)
      << "the shim released its lock before logind went on: " << released->line;
}

class ShimInhibit : public ShimTest {};

TEST_F(ShimInhibit, RequiredWithoutLogindExitsNonZero) {
  sandbox::sandbox_options no_logind;
  no_logind.start_logind = false;
  make_sandbox(no_logind);
  auto api = start_apiserver("kube-apiserver", api_delay("1s"));
  shim_options o = attach_to(api, "3s", "5s");
  o.inhibit = "required";
  const auto t0 = sandbox::monotonic_us();
  auto s = start_shim(o, /*wait_ready=*/false);
  auto status = s.process->wait_for_exit(kEventTimeout);
  ASSERT_TRUE(status) << "--inhibit=required without logind kept running";
  std::cout << fmt::format("--inhibit=required without logind: exit after {:.1f} ms ({})\n",
                           ms_between(t0, s.process->exit_seen_us()),
                           sandbox::describe_wait_status(*status));
  EXPECT_NE(sandbox::shell_exit_code(*status), 0);
  EXPECT_TRUE(api.signals().empty());
}

TEST_F(ShimInhibit, AutoWithoutLogindIsReadyAndTakesTheLockWhenLogindComes) {
  sandbox::sandbox_options no_logind;
  no_logind.start_logind = false;
  make_sandbox(no_logind);
  auto api = start_apiserver("kube-apiserver", api_delay("1s"));
  auto s = start_shim(attach_to(api, "2s", "5s"));
  ASSERT_FALSE(HasFailure()) << "--inhibit=auto must serve ready without logind";
  sb().start_logind();
  EXPECT_TRUE(wait_shim_lock(true, kEventTimeout)) << "the shim never took the lock (no retry?)";
}

// A listening unix socket that nobody serves: a connection attempt stays in its backlog, so after
// the fact we can tell whether anyone tried.
class connection_trap {
 public:
  explicit connection_trap(const std::filesystem::path& path) {
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0 ||
        listen(fd_, 64) < 0) {
      throw std::runtime_error(fmt::format("trap socket: {}", std::strerror(errno)));
    }
  }
  ~connection_trap() { close(fd_); }
  connection_trap(const connection_trap&) = delete;
  connection_trap& operator=(const connection_trap&) = delete;

  bool anyone_connected() {
    const int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c >= 0) {
      close(c);
      return true;
    }
    return false;
  }

 private:
  int fd_ = -1;
};

TEST_F(ShimInhibit, OffNeverConnectsToTheBus) {
  auto& node = sb();
  const auto trap_path = node.path("trap_bus_socket");
  connection_trap trap(trap_path);
  auto api = start_apiserver("kube-apiserver", api_delay("500ms"));
  shim_options o = attach_to(api, "1s", "5s");
  o.inhibit = "off";
  // With no bus, the auto policy could not ask PID 1 anything: forward unconditionally.
  o.forward_on_sigterm = "always";
  o.extra_env = {"DBUS_SYSTEM_BUS_ADDRESS=unix:path=" + trap_path.string()};
  auto s = start_shim(o);
  ASSERT_FALSE(HasFailure());
  s.process->signal(SIGTERM);
  ASSERT_TRUE(s.process->wait_for_exit(kEventTimeout)) << "the shim did not exit";
  EXPECT_EQ(api.signals().size(), 1u) << "forwarding must work without any bus";
  EXPECT_FALSE(trap.anyone_connected()) << "--inhibit=off connected to the (trap) system bus";
  EXPECT_FALSE(node.find_inhibitor("shutdown-shim"));
}

}  // namespace
}  // namespace shim_it
