// --ensure-inhibit-delay against the real logind: the drop-in written into the sandbox's
// /etc/systemd/logind.conf.d, logind reloaded through KillUnit on the stand-in PID 1, and a reboot
// held past logind's old limit.

#include <fmt/core.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "shim_harness.hpp"

namespace shim_it {
namespace {

namespace fs = std::filesystem;

// The value of the last InhibitDelayMaxSec= line of a file, in seconds; nullopt if none.
std::optional<std::uint64_t> inhibit_delay_seconds_in(const fs::path& file) {
  std::optional<std::uint64_t> value;
  const std::regex line("^InhibitDelayMaxSec=([0-9]+)$");
  for (const auto& l : sandbox::read_lines(file)) {
    std::smatch m;
    if (std::regex_match(l, m, line)) value = std::stoull(m[1]);
  }
  return value;
}

// Bounded polling of a log file for a piece of text (test support).
bool wait_for_text(const fs::path& file, const std::string& text,
                   std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (sandbox::read_text_file(file).find(text) == std::string::npos) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

class ShimEnsureDelay : public ShimTest {
 protected:
  // logind at 5 s, its sandbox drop-in sorting just before the shim's own.
  sandbox::node_sandbox& make_node() {
    auto o = logind_delay_max("5");
    o.logind_dropin_name = "zy-node-sandbox.conf";
    return make_sandbox(o);
  }
  fs::path conf_dir() { return sb().path("etc-systemd") / "logind.conf.d"; }
  fs::path shim_dropin() { return conf_dir() / "zz-shutdown-shim.conf"; }

  // drain 6 s + exit-timeout 2 s: an 8 s hold that logind's 5 s would cut.
  shim_options ensuring(const apiserver& api, const std::string& mode, const fs::path& dir = {}) {
    shim_options o = attach_to(api, "6s", "2s");
    o.extra_flags = {mode.empty() ? "--ensure-inhibit-delay" : "--ensure-inhibit-delay=" + mode,
                     "--logind-conf-dir=" + (dir.empty() ? conf_dir() : dir).string()};
    return o;
  }

  std::string get(const shim& s, const std::string& path) {
    sandbox::http_client client(s.port);
    auto r = client.get(path);
    EXPECT_TRUE(r.ok) << path << ": " << r.error;
    return r.body;
  }
};

TEST_F(ShimEnsureDelay, WithoutTheFlagTheShimOnlyReports) {
  make_node();
  auto api = start_apiserver("kube-apiserver", api_delay("1s"));
  auto s = start_shim(attach_to(api, "6s", "2s"));
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(wait_shim_lock(true));
  // The metric turns 1 only once the shim has read logind's value: after that it has decided.
  ASSERT_TRUE(wait_for_text(s.log, "InhibitDelayMaxSec", kStartTimeout));
  EXPECT_NE(get(s, "/metrics").find("shutdown_shim_logind_inhibit_delay_too_short 1"),
            std::string::npos);
  EXPECT_NE(get(s, "/readyz?verbose").find("--ensure-inhibit-delay"), std::string::npos)
      << "the report should name the fix";
  EXPECT_FALSE(fs::exists(shim_dropin())) << "the shim wrote a drop-in without the flag";
  EXPECT_TRUE(sb().kill_unit_calls().empty()) << "the shim reloaded logind without the flag";
  EXPECT_EQ(sb().inhibit_delay_max_usec(), 5'000'000u);
  EXPECT_FALSE(s.first_event("InhibitDelayEnsured"));
}

TEST_F(ShimEnsureDelay, RaisesLogindsDelayAndTheRebootIsHeldPastTheOldLimit) {
  auto& node = make_node();
  ASSERT_EQ(node.inhibit_delay_max_usec(), 5'000'000u);
  auto api = start_apiserver("kube-apiserver", api_delay("1s"));
  auto s = start_shim(ensuring(api, ""));
  ASSERT_FALSE(HasFailure());
  auto ensured = wait_event(s, "InhibitDelayEnsured", kEventTimeout);
  ASSERT_TRUE(ensured) << "no InhibitDelayEnsured event";
  note(ensured->line);

  // 8 s hold + the 5 s minimum margin, unless a drop-in of the machine's asks for more.
  auto written = inhibit_delay_seconds_in(shim_dropin());
  ASSERT_TRUE(written) << sandbox::read_text_file(shim_dropin());
  EXPECT_GE(*written, 13u);
  struct stat st {};
  ASSERT_EQ(stat(shim_dropin().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  EXPECT_EQ(node.inhibit_delay_max_usec(), *written * 1'000'000) << "logind did not re-read it";
  auto calls = node.kill_unit_calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].unit, "systemd-logind.service");
  EXPECT_EQ(calls[0].who, "all");
  EXPECT_EQ(calls[0].signal, SIGHUP);
  // The event's fields: which file, logind's value before and after, the line written.
  EXPECT_EQ(sandbox::json_string_field(ensured->line, "old_usec"), "5000000");
  EXPECT_EQ(sandbox::json_string_field(ensured->line, "new_usec"),
            std::to_string(*written * 1'000'000));
  EXPECT_EQ(sandbox::json_string_field(ensured->line, "file"), shim_dropin().string());
  EXPECT_EQ(sandbox::json_string_field(ensured->line, "written"),
            "InhibitDelayMaxSec=" + std::to_string(*written));
  EXPECT_NE(get(s, "/metrics").find("shutdown_shim_logind_inhibit_delay_too_short 0"),
            std::string::npos);
  EXPECT_NE(get(s, "/readyz?verbose").find("raised from 5s to"), std::string::npos);

  sandbox::http_prober prober(s.port);
  auto r = reboot_and_observe(api, prober);
  report(r);
  ASSERT_TRUE(r.start);
  EXPECT_GE(r.start->usec - r.reboot_us, 6'000'000u) << "the hold was cut before the drain";
  EXPECT_EQ(
      sandbox::read_text_file(node.log_path("systemd-logind")).find("inhibitor timeout is reached"),
      std::string::npos)
      << "logind's old 5 s limit still ended the hold";
  // The shim let go first (its record is written just before the lock closes), logind after.
  const auto released = s.first_event("InhibitorReleased");
  ASSERT_TRUE(released);
  EXPECT_LE(released->monotonic_us, r.start->usec) << "logind went on while the lock was held";
  EXPECT_EQ(api.signals().size(), 1u);
}

TEST_F(ShimEnsureDelay, AHigherValueInAnotherDropinIsNotLowered) {
  make_node();
  const auto other = conf_dir() / "10-someone-else.conf";
  const std::string other_text = "[Login]\nInhibitDelayMaxSec=40\n";
  std::ofstream(other) << other_text;
  auto api = start_apiserver("kube-apiserver", api_delay("1s"));
  auto s = start_shim(ensuring(api, "required"));
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(wait_event(s, "InhibitDelayEnsured", kEventTimeout));
  auto written = inhibit_delay_seconds_in(shim_dropin());
  ASSERT_TRUE(written);
  EXPECT_GE(*written, 40u) << "the shim's drop-in would lower the 40 s set elsewhere";
  EXPECT_EQ(sb().inhibit_delay_max_usec(), *written * 1'000'000);
  EXPECT_EQ(sandbox::read_text_file(other), other_text) << "the other drop-in was touched";
  EXPECT_TRUE(s.process->running());
}

TEST_F(ShimEnsureDelay, AlreadyLongEnoughWritesNothing) {
  auto o = logind_delay_max("60");
  o.logind_dropin_name = "zy-node-sandbox.conf";
  make_sandbox(o);
  auto api = start_apiserver("kube-apiserver", api_delay("1s"));
  auto s = start_shim(ensuring(api, "required"));
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(wait_for_text(s.log, "long enough already", kStartTimeout));
  EXPECT_FALSE(fs::exists(shim_dropin()));
  EXPECT_TRUE(sb().kill_unit_calls().empty());
  EXPECT_TRUE(s.process->running());
}

TEST_F(ShimEnsureDelay, RequiredExitsOneWithTheReasonAndTryGoesOn) {
  make_node();
  // A regular file where the directory's parent should be: even root cannot create it.
  std::ofstream(sb().path("not-a-dir")) << "x";
  const auto impossible = sb().path("not-a-dir") / "logind.conf.d";
  auto api = start_apiserver("kube-apiserver", api_delay("1s"));

  auto required = start_shim(ensuring(api, "required", impossible), /*wait_ready=*/false);
  auto status = required.process->wait_for_exit(kEventTimeout);
  ASSERT_TRUE(status) << "--ensure-inhibit-delay=required kept running";
  EXPECT_EQ(sandbox::shell_exit_code(*status), 1) << sandbox::describe_wait_status(*status);
  const std::string log = sandbox::read_text_file(required.log);
  EXPECT_NE(log.find("--ensure-inhibit-delay=required"), std::string::npos) << log;
  EXPECT_NE(log.find("not-a-dir"), std::string::npos) << "the reason does not name the path";
  EXPECT_TRUE(api.signals().empty());
  EXPECT_TRUE(wait_shim_lock(false, 10s));

  auto tried = start_shim(ensuring(api, "try", impossible));
  ASSERT_FALSE(HasFailure()) << "--ensure-inhibit-delay=try must go on";
  ASSERT_TRUE(
      wait_for_text(tried.log, "--ensure-inhibit-delay=try: could not raise", kStartTimeout));
  EXPECT_TRUE(tried.process->running());
  EXPECT_TRUE(wait_shim_lock(true));
  EXPECT_NE(get(tried, "/metrics").find("shutdown_shim_logind_inhibit_delay_too_short 1"),
            std::string::npos);
  EXPECT_NE(get(tried, "/readyz?verbose").find("could not raise it"), std::string::npos);
  EXPECT_TRUE(sb().kill_unit_calls().empty());
}

}  // namespace
}  // namespace shim_it
