// Issue 8, item 9: durations and logind values that parsed could overflow later. With
// --drain-delay=2562047h47m16s the hold was released after 3.7 ms, and a logind drop-in saying
// 472.5s made --ensure-inhibit-delay write 472, lower than asked. Against the real logind in the
// sandbox.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>

#include "shim_harness.hpp"

namespace shim_it {
namespace {

namespace fs = std::filesystem;

class FaultDurations : public ShimTest {};

TEST_F(FaultDurations, ADurationBeyondADayExitsTwoNamingTheFlag) {
  auto api = start_apiserver("kube-apiserver", api_delay("1s"));
  const std::string huge = "2562047h47m16s";
  for (const std::string flag : {"drain-delay", "signal-delay", "exit-timeout"}) {
    SCOPED_TRACE(flag);
    shim_options o = attach_to(api);
    if (flag == "drain-delay") o.drain_delay = huge;
    if (flag == "signal-delay") o.signal_delay = huge;
    if (flag == "exit-timeout") o.exit_timeout = huge;
    auto s = start_shim(o, /*wait_ready=*/false);
    auto status = s.process->wait_for_exit(kStartTimeout);
    ASSERT_TRUE(status) << "--" << flag << "=" << huge << " was accepted";
    EXPECT_EQ(sandbox::shell_exit_code(*status), 2) << sandbox::describe_wait_status(*status);
    // The shims of this test share one log file: each adds its one line.
    const std::string log = sandbox::read_text_file(s.log);
    EXPECT_NE(log.find("shutdown-shim: --" + flag + ": \"" + huge +
                       "\" is longer than 24h0m0s, the most a duration flag may be\n"),
              std::string::npos)
        << log;
  }
  EXPECT_TRUE(api.signals().empty());
}

// The drop-in holds whole seconds; 472.5 s elsewhere must become 473, never 472.
TEST_F(FaultDurations, ADropinSaying472Point5sMakesEnsureWrite473) {
  auto options = logind_delay_max("5");
  options.logind_dropin_name = "zy-node-sandbox.conf";
  auto& node = make_sandbox(options);
  const fs::path conf_dir = node.path("etc-systemd") / "logind.conf.d";
  std::ofstream(conf_dir / "10-operator.conf") << "[Login]\nInhibitDelayMaxSec=472.5s\n";

  auto api = start_apiserver("kube-apiserver", api_delay("1s"));
  shim_options o = attach_to(api, "6s", "2s");
  o.extra_flags = {"--ensure-inhibit-delay=required", "--logind-conf-dir=" + conf_dir.string()};
  auto s = start_shim(o);
  ASSERT_FALSE(HasFailure());
  const fs::path dropin_file = conf_dir / "zz-shutdown-shim.conf";
  // The file is renamed into place whole: once it exists, it says what it will say.
  const auto deadline = std::chrono::steady_clock::now() + kEventTimeout;
  while (!fs::exists(dropin_file) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  const std::string dropin = sandbox::read_text_file(dropin_file);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(dropin, m, std::regex("\nInhibitDelayMaxSec=([^\n]*)\n")))
      << dropin;
  EXPECT_EQ(m[1].str(), "473") << "the drop-in must not say less than the 472.5s set elsewhere";

  auto ensured = wait_event(s, "InhibitDelayEnsured", kEventTimeout);
  ASSERT_TRUE(ensured) << "logind never showed the value the shim meant to write";
  note(ensured->line);
  EXPECT_EQ(node.inhibit_delay_max_usec(), 473'000'000u);
  EXPECT_TRUE(s.process->running());
}

}  // namespace
}  // namespace shim_it
