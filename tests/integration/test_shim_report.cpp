// shutdown-shim report after a real reboot through the sandbox's logind, run as the next boot
// would run it: in a mount namespace where /proc/sys/kernel/random/boot_id says another boot (as
// systemd-nspawn gives a container its own), so the shim under test is the production binary.
// The next boot's shim, started the same way with the same event log, finds the shutdown too.

#include <fmt/core.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <list>
#include <sstream>
#include <string>
#include <vector>

#include "shim_harness.hpp"

namespace shim_it {
namespace {

// Any id but this machine's: the boot the report runs in.
constexpr const char* kNextBoot = "11111111-2222-4333-8444-555555555555";

using report_run = cli_run;

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class ShimReport : public ShimTest {
 protected:
  // `shutdown-shim report --event-log=LOG ARGS...` in the next boot, with an empty journal
  // directory (no boot is in it, whatever this machine's journal holds).
  report_run report_from_next_boot(const shim& s, std::vector<std::string> args) {
    const auto boot_id = sb().path("next-boot-id");
    std::ofstream(boot_id) << kNextBoot << '\n';
    const auto journal = sb().path("empty-journal");
    std::filesystem::create_directories(journal);
    std::vector<std::string> argv{"report", "--event-log=" + s.event_log.string(),
                                  "--journal-dir=" + journal.string()};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_cli(argv, {{boot_id, "/proc/sys/kernel/random/boot_id"}});
  }

  // The next boot's shim: s's command line on a port of its own, with the same event log, in a
  // mount namespace where the boot id is kNextBoot. What it found at start is read from its first
  // answers: they come only once its loop runs, after the event log was read.
  struct next_boot_start {
    shim s;  // the next boot's shim
    std::optional<sandbox::shim_event> event;
    std::string verbose;
    std::string metrics;
  };
  next_boot_start start_shim_in_next_boot(const shim& old) {
    const auto boot_id = sb().path("next-boot-id");
    std::ofstream(boot_id) << kNextBoot << '\n';
    shim next = old;
    next.port = sandbox::pick_free_port();
    // A reboot empties /run: the next boot's shim makes its state directory anew (the old shim,
    // still running here, holds its own).
    const auto run = sb().path("next-boot-run");
    std::erase_if(next.env,
                  [](const std::string& e) { return e.starts_with("RUNTIME_DIRECTORY="); });
    next.env.push_back("RUNTIME_DIRECTORY=" + run.string());
    for (auto& arg : next.argv) {
      if (arg.starts_with("--listen=")) arg = fmt::format("--listen=127.0.0.1:{}", next.port);
    }
    sandbox::spawn_options options;
    options.env = sb().child_environment(next.env);
    options.stdout_path = sb().log_path("shutdown-shim-next-boot");
    options.private_mounts = {{boot_id, "/proc/sys/kernel/random/boot_id"}};
    next.process = &next_boot_shims_.emplace_back("shutdown-shim-next-boot", next.argv, options);
    next_boot_start out{.s = next, .event = std::nullopt, .verbose = {}, .metrics = {}};
    if (auto r = wait_shim_answer(next, "/readyz?verbose")) out.verbose = r->body;
    if (auto r = wait_shim_answer(next, "/metrics")) out.metrics = r->body;
    out.event = wait_event(next, "PreviousShutdown");
    note("the next boot's shim:\n" + out.verbose +
         (out.event ? out.event->line : std::string("no PreviousShutdown event")));
    return out;
  }

  // This machine's boot id as the event log writes it: 32 hex digits.
  static std::string this_boot_id() {
    std::string id = slurp("/proc/sys/kernel/random/boot_id");
    std::erase_if(id, [](char c) { return c == '-' || c == '\n'; });
    return id;
  }

  std::list<sandbox::child_process> next_boot_shims_;
};

TEST_F(ShimReport, ACleanRebootIsReportedCleanFromTheNextBoot) {
  auto api = start_apiserver("kube-apiserver", api_delay("1s"));
  auto s = start_shim(attach_to(api, "2s", "5s"));
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(wait_shim_lock(true)) << "the shim never took its delay lock";
  sandbox::http_prober prober(s.port);
  auto r = reboot_and_observe(api, prober);
  ASSERT_TRUE(r.start) << "logind never started reboot.target";
  ASSERT_TRUE(wait_event(s, "InhibitorReleased")) << "the hold never ended";

  const auto table = report_from_next_boot(s, {});
  EXPECT_EQ(table.exit_code, 0) << table.out << table.err;
  EXPECT_NE(table.out.find("PrepareForShutdown(true)"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("  clean\n"), std::string::npos) << table.out;
  EXPECT_EQ(table.out.find("this boot"), std::string::npos) << "the reboot's boot is not this one";

  const auto json = report_from_next_boot(s, {"--json"});
  EXPECT_EQ(json.exit_code, 0);
  EXPECT_EQ(std::count(json.out.begin(), json.out.end(), '\n'), 1) << json.out;
  for (const char* part :
       {R"("current_boot":false)", R"j("trigger":"PrepareForShutdown(true) from )j",
        R"("verdict":"clean")"}) {
    EXPECT_NE(json.out.find(part), std::string::npos) << part << " not in " << json.out;
  }
  // logind's InhibitDelayMaxSec as the shim read it from the sandbox's logind.
  EXPECT_EQ(json.out.find(R"("inhibit_delay_max_seconds":null)"), std::string::npos) << json.out;
  // The hold lasted at least the drain.
  const auto at = json.out.find(R"("hold_seconds":)");
  ASSERT_NE(at, std::string::npos);
  EXPECT_GE(std::stod(json.out.substr(at + 15)), 2.0) << json.out;

  // The next boot's shim finds it at start, says so once and shows it without becoming unready
  // for it.
  const auto next = start_shim_in_next_boot(s);
  ASSERT_TRUE(next.event) << "no PreviousShutdown event";
  EXPECT_EQ(next.event->cause, "clean");
  EXPECT_EQ(sandbox::json_string_field(next.event->line, "verdict"), "clean") << next.event->line;
  EXPECT_EQ(sandbox::json_string_field(next.event->line, "previous_boot_id"), this_boot_id())
      << next.event->line;
  EXPECT_TRUE(sandbox::json_string_field(next.event->line, "hold_seconds")) << next.event->line;
  EXPECT_EQ(metric_value(next.metrics, "shutdown_shim_previous_shutdown_clean"), 1.0)
      << next.metrics;
  EXPECT_GE(metric_value(next.metrics, "shutdown_shim_previous_shutdown_hold_seconds").value_or(0),
            2.0)
      << next.metrics;
  EXPECT_EQ(metric_value(next.metrics, R"(shutdown_shim_check{name="previous-shutdown"})"), 1.0);
  const auto line = readyz_check_line(next.verbose, "previous-shutdown");
  ASSERT_TRUE(line) << next.verbose;
  EXPECT_TRUE(line->starts_with("[+]previous-shutdown ok: clean at ")) << *line;
  EXPECT_NE(line->find(", boot " + this_boot_id().substr(0, 8) + ", hold "), std::string::npos)
      << *line;
}

// Issue 22: `systemctl restart shutdown-shim` was recorded as a shutdown (ShutdownInitiated
// cause=SIGTERM) and reported `not forwarded`, exit 1, in its boot and after a clean reboot. Here
// the shim is restarted idle, the node reboots cleanly through the sandbox's logind, and the shim
// is restarted again in the next boot: the report exits 0 (the last system shutdown was clean)
// and lists both restarts as such; the next boot's shim finds the clean reboot.
TEST_F(ShimReport, RestartsAroundACleanRebootAreListedAndNeverFailTheReport) {
  auto api = start_apiserver("kube-apiserver", api_delay("1s"));
  auto first = start_shim(attach_to(api, "2s", "5s"));
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(wait_shim_lock_of(first)) << "the shim never took its lock";
  ASSERT_EQ(sb().system_state(), "running");
  first.process->signal(SIGTERM);
  ASSERT_TRUE(first.process->wait_for_exit(kEventTimeout)) << "the shim did not stop on SIGTERM";
  auto s = restart_shim(first);
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(wait_shim_lock_of(s)) << "the restarted shim never took its lock";
  EXPECT_TRUE(api.signals().empty()) << "a restart must not stop the apiserver";

  sandbox::http_prober prober(s.port);
  auto r = reboot_and_observe(api, prober);
  ASSERT_TRUE(r.start) << "logind never started reboot.target";
  EXPECT_EQ(api.signals().size(), 1u);
  // The held shim waits for the end; systemd stops it at the reboot (no record: its hold is over).
  s.process->signal(SIGTERM);
  ASSERT_TRUE(s.process->wait_for_exit(kEventTimeout));

  // The next boot: a logind that knows of no shutdown, and the shim restarted once more there.
  sb().restart_logind();
  auto next = start_shim_in_next_boot(s);
  ASSERT_TRUE(next.event) << "no PreviousShutdown event";
  EXPECT_EQ(sandbox::json_string_field(next.event->line, "verdict"), "clean") << next.event->line;
  EXPECT_EQ(sandbox::json_string_field(next.event->line, "restarts"), "1") << next.event->line;
  ASSERT_TRUE(wait_shim_lock_of(next.s)) << "the next boot's shim never took its lock";
  next.s.process->signal(SIGTERM);
  ASSERT_TRUE(next.s.process->wait_for_exit(kEventTimeout));

  EXPECT_EQ(s.count_events("Restart"), 2u);
  EXPECT_EQ(s.count_events("ShutdownInitiated"), 1u) << "only the reboot is a shutdown";
  const auto restart = s.first_event("Restart");
  ASSERT_TRUE(restart);
  EXPECT_EQ(restart->cause, "SIGTERM");
  EXPECT_EQ(sandbox::json_string_field(restart->line, "system_state"), "running") << restart->line;

  const auto table = report_from_next_boot(s, {});
  EXPECT_EQ(table.exit_code, 0) << table.out << table.err;
  const std::string here = this_boot_id().substr(0, 8);
  for (const std::string& part : std::vector<std::string>{
           "  clean\n", "11111111*  -", "  restart\n",
           here + ": restarts of the shim (no shutdowns): 1, the last at ",
           "11111111*: restarts of the shim (no shutdowns): 1, the last at "}) {
    EXPECT_NE(table.out.find(part), std::string::npos) << part << " not in\n" << table.out;
  }
  EXPECT_EQ(table.out.find("not forwarded"), std::string::npos) << table.out;
  const auto json = report_from_next_boot(s, {"--json"});
  EXPECT_EQ(json.exit_code, 0);
  EXPECT_EQ(std::count(json.out.begin(), json.out.end(), '\n'), 2) << json.out;
  EXPECT_NE(json.out.find(R"("current_boot":true,"restarts":1,)"), std::string::npos) << json.out;
}

TEST_F(ShimReport, AKillMidHoldIsReportedCutShort) {
  // The apiserver outlives the test's patience and the drain is long: the shim is mid-hold when
  // it is killed, and logind goes on with the reboot at once, as on a real node.
  auto api = start_apiserver("kube-apiserver", api_delay("120s"));
  auto s = start_shim(attach_to(api, "60s", "60s"));
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(wait_shim_lock_of(s)) << "the shim never took its lock";
  sb().reboot();
  ASSERT_TRUE(wait_event(s, "SignalForwarded")) << "the shim never signalled";
  s.process->signal(SIGKILL);
  ASSERT_TRUE(s.process->wait_for_exit(kEventTimeout)) << "the shim survived SIGKILL";

  const auto table = report_from_next_boot(s, {});
  EXPECT_EQ(table.exit_code, 1) << table.out << table.err;
  EXPECT_NE(table.out.find("cut short (cause unknown: no journal for that boot)"),
            std::string::npos)
      << table.out;
  EXPECT_NE(table.out.find(fmt::format("the records of the shim (pid {}) stop", s.process->pid())),
            std::string::npos)
      << table.out;

  const auto json = report_from_next_boot(s, {"--json"});
  EXPECT_EQ(json.exit_code, 1);
  EXPECT_NE(json.out.find(R"("verdict":"cut short","cut_short_cause":"unknown")"),
            std::string::npos)
      << json.out;
  const auto next = start_shim_in_next_boot(s);
  ASSERT_TRUE(next.event) << "no PreviousShutdown event";
  EXPECT_EQ(next.event->cause, "cut short");
  EXPECT_EQ(next.event->line.find("hold_seconds"), std::string::npos) << next.event->line;
  EXPECT_EQ(metric_value(next.metrics, "shutdown_shim_previous_shutdown_clean"), 0.0)
      << next.metrics;
  EXPECT_FALSE(metric_value(next.metrics, "shutdown_shim_previous_shutdown_hold_seconds"))
      << "unknown, so absent: " << next.metrics;
  const auto line = readyz_check_line(next.verbose, "previous-shutdown");
  ASSERT_TRUE(line) << next.verbose;
  EXPECT_TRUE(line->starts_with("[+]previous-shutdown ok: cut short at ")) << *line;
  EXPECT_NE(line->find(fmt::format("the records of the shim (pid {}) stop", s.process->pid())),
            std::string::npos)
      << *line;
}

TEST_F(ShimReport, NoShutdownOnRecordAndUsageErrors) {
  auto api = start_apiserver("kube-apiserver", api_delay("1s"));
  auto s = start_shim(attach_to(api, "2s", "5s"));
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(wait_event(s, "Started"));
  const auto none = report_from_next_boot(s, {});
  EXPECT_EQ(none.exit_code, 3) << none.out << none.err;
  EXPECT_EQ(none.out, "");
  const auto usage = report_from_next_boot(s, {"--boots=zero"});
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_EQ(usage.err, "shutdown-shim: --boots: \"zero\" is not a number from 1 to 10000\n");
}

}  // namespace
}  // namespace shim_it
