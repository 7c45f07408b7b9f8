#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "http_probe.hpp"
#include "node_sandbox.hpp"
#include "process.hpp"

namespace shim_it {

using namespace std::chrono_literals;

// Generous bounds for "this should have happened by now": they catch hangs, they are not the
// timing under test, and no test asserts an upper time bound with them.
inline constexpr auto kStartTimeout = 30s;
inline constexpr auto kEventTimeout = 60s;

// A fake_apiserver started in the sandbox (directly, or as the shim's wrapped child).
struct apiserver {
  std::string name;
  sandbox::child_process* process = nullptr;  // null when the shim started it
  std::filesystem::path pidfile, port_file, signal_log, lifecycle_log;

  // The argv that starts it (also used after "--" in wrapper mode).
  std::vector<std::string> argv;

  std::vector<sandbox::timed_line> signals() const;
  std::vector<sandbox::timed_line> lifecycle() const;
  std::optional<std::uint64_t> lifecycle_at(const std::string& word) const;
  std::optional<pid_t> pid() const;  // from the pidfile
  std::uint16_t port() const;        // from the port file, 0 if not there yet
};

struct apiserver_options {
  std::string shutdown_delay = "1s";
  bool ignore_sigterm = false;
  std::vector<std::string> extra;
};

inline apiserver_options api_delay(std::string shutdown_delay) {
  apiserver_options o;
  o.shutdown_delay = std::move(shutdown_delay);
  return o;
}

inline sandbox::sandbox_options logind_delay_max(std::string inhibit_delay_max) {
  sandbox::sandbox_options o;
  o.inhibit_delay_max = std::move(inhibit_delay_max);
  return o;
}

// The shim's command line, per its contract.
struct shim_options {
  std::string drain_delay = "3s";
  // Given explicitly (the timing every test had before issue 32); empty: not given, the shim plans
  // it from the stand-in's --shutdown-delay-duration.
  std::string signal_delay = "0s";
  std::string exit_timeout = "5s";
  std::string signal = "TERM";
  std::string inhibit = "auto";
  std::string forward_on_sigterm = "auto";
  // Exactly one of these target forms: "--target-pidfile=...", "--target-pid=...",
  // "--target-name=..."; or a command for wrapper mode.
  std::vector<std::string> target;
  std::vector<std::string> wrapped_command;
  std::vector<std::string> extra_env;
  std::vector<std::string> extra_flags;  // after the flags above, before the target
  // Runs the shim through this argv prefix, e.g. a shell that sets WATCHDOG_PID to its own PID
  // and execs the shim (which keeps that PID).
  std::vector<std::string> launcher;
};

struct shim {
  sandbox::child_process* process = nullptr;
  std::uint16_t port = 0;
  std::filesystem::path event_log;
  std::filesystem::path log;
  std::vector<std::string> argv;
  std::vector<std::string> env;  // shim_options::extra_env

  std::vector<sandbox::shim_event> events() const;
  std::optional<sandbox::shim_event> first_event(const std::string& name) const;
  std::size_t count_events(const std::string& name) const;
};

// What one Reboot() looked like from outside, all on CLOCK_MONOTONIC.
struct reboot_observation {
  std::uint64_t reboot_us = 0;                      // just before Manager.Reboot(false)
  std::optional<sandbox::start_unit_record> start;  // StartUnit("reboot.target") at the manager
  std::optional<std::uint64_t> first_503_us;        // first 503 on the shim's /readyz
  std::optional<std::uint64_t> sigterm_us;          // the first signal logged by the target

  std::optional<double> readyz_503_ms() const;
  std::optional<double> sigterm_ms() const;
  std::optional<double> reboot_target_ms() const;
  // "FIGURES readyz_503_ms=.. sigterm_ms=.. reboot_target_s=.."
  std::string figures_line() const;
};

// A run of the shim's command line (report, status, drill): its exit code and what it printed.
struct cli_run {
  int exit_code = -1;  // -1: it did not exit within the timeout
  std::string out;
  std::string err;
};

// Shim flags for attach mode on an apiserver's pidfile.
shim_options attach_to(const apiserver& a, std::string drain_delay = "3s",
                       std::string exit_timeout = "5s");

class ShimTest : public ::testing::Test {
 protected:
  void TearDown() override;

  // Builds this test's sandbox (once).
  sandbox::node_sandbox& make_sandbox(sandbox::sandbox_options options = {});
  sandbox::node_sandbox& sb();

  // Starts a fake_apiserver and waits until it listens (its port file appears).
  apiserver start_apiserver(const std::string& name, const apiserver_options& options = {});
  // Paths and argv for an apiserver that the shim itself will start (wrapper mode).
  apiserver describe_apiserver(const std::string& name, const apiserver_options& options = {});
  bool wait_apiserver_listening(const apiserver& a,
                                std::chrono::milliseconds timeout = kStartTimeout);

  // Starts the shim; with wait_ready, waits until /readyz answers 200 (failing the test if the shim
  // exits or does not get there).
  shim start_shim(const shim_options& options, bool wait_ready = true);
  // Starts the shim again as s was started (same command line, port, event log, environment), as
  // systemd's Restart= would after s died; waits like start_shim.
  shim restart_shim(const shim& s, bool wait_ready = true);
  // /readyz 200 on the shim's port within timeout (connect retries; test support only).
  bool wait_shim_ready(const shim& s, std::chrono::milliseconds timeout = kStartTimeout);
  // The first complete answer to GET target on the shim's port (connect retries), whatever its
  // status; nullopt if the shim exits or nothing answers within timeout.
  std::optional<sandbox::http_result> wait_shim_answer(
      const shim& s, const std::string& target = "/readyz",
      std::chrono::milliseconds timeout = kStartTimeout);
  // The line of `check` in the shim's /readyz?verbose once it contains `text` (bounded polling), or
  // the last line seen.
  std::string wait_check_line(const shim& s, const std::string& check, const std::string& text);
  // An unlabelled sample of the shim's /metrics, or nullopt.
  std::optional<double> shim_metric(const shim& s, const std::string& name);
  // The shim's delay lock shows in logind's ListInhibitors.
  bool wait_shim_lock(bool present, std::chrono::milliseconds timeout = kStartTimeout);
  // A delay lock of this shim process (its PID) shows in ListInhibitors.
  bool wait_shim_lock_of(const shim& s, std::chrono::milliseconds timeout = kStartTimeout);
  // Whether it shows now.
  bool shim_lock_listed(const shim& s);

  // Waits for a signal line in the apiserver's signal log (bounded polling of a file: test
  // support).
  bool wait_signal_count(const apiserver& a, std::size_t count,
                         std::chrono::milliseconds timeout = kEventTimeout);
  // Waits for a shim event to appear in the event log.
  std::optional<sandbox::shim_event> wait_event(const shim& s, const std::string& name,
                                                std::chrono::milliseconds timeout = kEventTimeout);

  // Calls Reboot and waits (bounded) for StartUnit("reboot.target"); fills in what the prober and
  // the target's signal log saw. Stops the prober.
  reboot_observation reboot_and_observe(const apiserver& target, sandbox::http_prober& prober);
  // Prints the figures and records them as test properties.
  void report(const reboot_observation& r);

  // Prints extra lines with the diagnostics if the test fails.
  void note(const std::string& line);

  // `shutdown-shim ARGS...` with the sandbox's environment, in a mount namespace with `mounts`
  // when there are any; noted.
  cli_run run_cli(const std::vector<std::string>& args,
                  const std::vector<sandbox::bind_mount>& mounts = {});
  // The state directory start_shim() gives its shims (their control socket is in it).
  std::filesystem::path runtime_dir();
  int cli_runs_ = 0;

  std::unique_ptr<sandbox::node_sandbox> sandbox_;
  std::vector<std::string> notes_;
  std::vector<shim> shims_;
};

// Milliseconds between two monotonic_us readings (negative if `to` is earlier).
double ms_between(std::uint64_t from_us, std::uint64_t to_us);

using sandbox::metric_value;
using sandbox::readyz_check_line;

}  // namespace shim_it
