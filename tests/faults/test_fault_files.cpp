// Files that are not what their flag says (issue 18, item 1), against the real logind. A FIFO at
// --upstream-ca-file, --upstream-client-cert or --upstream-client-key blocked the event loop for
// good, at start or when swapped in behind a symlink at run time: /livez stopped answering, the
// lock was never taken after a restart, and at a reboot the target had no SIGTERM and /readyz
// no 503. The same class sat in logind's drop-in reader (--ensure-inhibit-delay): a FIFO blocked,
// a link to /dev/zero ended the shim in std::bad_alloc. Each case here then reboots the node: the
// hold must still be there, with exactly one SIGTERM.

#include <fmt/core.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <thread>

#include "shim_harness.hpp"

namespace shim_it {
namespace {

namespace fs = std::filesystem;

class FaultFiles : public ShimTest {
 protected:
  // The shim attached to a running apiserver, with extra flags; not waiting for /readyz 200 (a
  // failing upstream check keeps it unready), but for its lock and a /livez that answers.
  shim start_attached(const apiserver& api, std::vector<std::string> flags) {
    auto o = attach_to(api, "2s", "5s");
    o.extra_flags = std::move(flags);
    auto s = start_shim(o, /*wait_ready=*/false);
    EXPECT_TRUE(wait_shim_lock_of(s)) << "the shim never took its lock";
    const auto live = wait_shim_answer(s, "/livez");
    EXPECT_TRUE(live && live->status == 200) << "/livez does not answer";
    return s;
  }

  // The line of `check` in /readyz?verbose once it contains `text` (bounded polling), else the
  // last line seen.
  std::string wait_check(const shim& s, const std::string& check, const std::string& text) {
    std::string line;
    const auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (auto r = wait_shim_answer(s, "/readyz?verbose", 5s)) {
        line = readyz_check_line(r->body, check).value_or("");
        if (line.find(text) != std::string::npos) return line;
      }
      std::this_thread::sleep_for(20ms);
    }
    return line;
  }

  // A reboot: held for the drain (2 s), /readyz answering 503, exactly one SIGTERM.
  void expect_held_reboot(const shim& s, const apiserver& api) {
    sandbox::http_prober prober(s.port);
    auto r = reboot_and_observe(api, prober);
    report(r);
    ASSERT_TRUE(r.start) << "logind never started reboot.target";
    EXPECT_GE(r.start->usec - r.reboot_us, 2'000'000u) << "the reboot was not held for the drain";
    // The upstream check never passes here, so the shim is unready from the start: the 503 in
    // effect at the reboot may be the prober's first answer, from before the reboot call (a flake
    // once, under load). What counts is that a 503 was still what /readyz answered when the hold
    // ended, and that the loop kept answering through it.
    const auto at_end = prober.in_effect_at(r.start->usec);
    ASSERT_TRUE(at_end) << "/readyz never answered";
    EXPECT_EQ(at_end->status, 503u) << "/readyz at the end of the hold: " << at_end->error;
    EXPECT_GE(prober.requests(), 100u) << "/readyz stopped answering during the hold";
    EXPECT_EQ(api.signals().size(), 1u) << "the target must get exactly one signal";
    EXPECT_EQ(s.count_events("SignalForwarded"), 1u);
  }

  fs::path make_fifo(const std::string& name) {
    const fs::path fifo = sb().path(name);
    EXPECT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    return fifo;
  }
};

TEST_F(FaultFiles, AFifoAsTheUpstreamCaFileIsAFailedProbeNotAHang) {
  auto api = start_apiserver("kube-apiserver", api_delay("1s"));
  const auto fifo = make_fifo("ca.crt");
  auto s =
      start_attached(api, {fmt::format("--upstream-readyz=https://127.0.0.1:{}/readyz", api.port()),
                           "--upstream-ca-file=" + fifo.string(), "--upstream-interval=100ms"});
  ASSERT_FALSE(HasFailure());
  const auto line = wait_check(s, "upstream", "a FIFO, not a regular file");
  EXPECT_THAT(line,
              testing::HasSubstr("CA file " + fifo.string() + ": a FIFO, not a regular file"));
  expect_held_reboot(s, api);
}

TEST_F(FaultFiles, AFifoAsTheClientCertificateOrKeyIsAFailedProbeNotAHang) {
  auto api = start_apiserver("kube-apiserver", api_delay("1s"));
  const auto cert = make_fifo("client.crt");
  const auto key = make_fifo("client.key");
  auto s = start_attached(
      api, {fmt::format("--upstream-readyz=https://127.0.0.1:{}/readyz", api.port()),
            "--upstream-insecure-skip-verify", "--upstream-client-cert=" + cert.string(),
            "--upstream-client-key=" + key.string(), "--upstream-interval=100ms"});
  ASSERT_FALSE(HasFailure());
  EXPECT_THAT(
      wait_check(s, "upstream", "a FIFO"),
      testing::HasSubstr("client certificate " + cert.string() + ": a FIFO, not a regular file"));
  expect_held_reboot(s, api);
}

// The CA file's path is a symlink; at run time it is pointed at a FIFO, as a rotation could be
// subverted by whoever may write the link's directory.
TEST_F(FaultFiles, AFifoSwappedInBehindASymlinkAtRunTime) {
  auto api = start_apiserver("kube-apiserver", api_delay("1s"));
  const fs::path real = sb().path("not-a-ca.crt");
  sandbox::write_file_atomically(real, "not PEM\n");
  const fs::path link = sb().path("ca.crt");
  fs::create_symlink(real, link);
  auto s =
      start_attached(api, {fmt::format("--upstream-readyz=https://127.0.0.1:{}/readyz", api.port()),
                           "--upstream-ca-file=" + link.string(), "--upstream-interval=100ms"});
  ASSERT_FALSE(HasFailure());
  EXPECT_THAT(wait_check(s, "upstream", "CA file"), testing::HasSubstr("CA file " + link.string()));

  const auto fifo = make_fifo("fifo");
  const fs::path new_link = sb().path("ca.crt.new");
  fs::create_symlink(fifo, new_link);
  fs::rename(new_link, link);
  EXPECT_THAT(wait_check(s, "upstream", "a FIFO"),
              testing::HasSubstr("CA file " + link.string() + ": a FIFO, not a regular file"));
  const auto live = wait_shim_answer(s, "/livez", 5s);
  EXPECT_TRUE(live && live->status == 200) << "/livez stopped answering after the swap";
  expect_held_reboot(s, api);
}

class FaultLogindFiles : public FaultFiles {
 protected:
  fs::path conf_dir() { return sb().path("etc-systemd") / "logind.conf.d"; }

  // --ensure-inhibit-delay=try with a hostile file among logind's drop-ins (added after logind
  // has started, so that only the shim reads it). The 2 s + 5 s hold is more than logind's 5 s,
  // so the shim plans a drop-in: the plan fails naming the file, and the shim goes on. The
  // apiserver exits 1 s after its signal, so the hold ends at the drain, within logind's 5 s.
  void ensure_with(const std::string& expect) {
    auto api = start_apiserver("kube-apiserver", api_delay("1s"));
    ASSERT_FALSE(HasFailure());
    auto o = attach_to(api, "2s", "5s");
    o.extra_flags = {"--ensure-inhibit-delay=try", "--logind-conf-dir=" + conf_dir().string()};
    auto s = start_shim(o, /*wait_ready=*/false);
    ASSERT_TRUE(wait_shim_lock_of(s)) << "the shim never took its lock";
    const auto live = wait_shim_answer(s, "/livez");
    ASSERT_TRUE(live && live->status == 200) << "/livez does not answer";
    EXPECT_THAT(wait_check(s, "logind-inhibit-delay", expect), testing::HasSubstr(expect));
    EXPECT_TRUE(s.process->running()) << "the shim died reading logind's drop-ins";
    expect_held_reboot(s, api);
  }
};

TEST_F(FaultLogindFiles, AFifoAmongLogindsDropinsIsAnErrorNotAHang) {
  make_sandbox(logind_delay_max("5"));
  const fs::path fifo = conf_dir() / "50-fifo.conf";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ensure_with("could not raise it: read " + fifo.string() + ": a FIFO, not a regular file");
}

TEST_F(FaultLogindFiles, ALinkToDevZeroAmongLogindsDropinsIsAnErrorNotACrash) {
  make_sandbox(logind_delay_max("5"));
  const fs::path zero = conf_dir() / "50-zero.conf";
  fs::create_symlink("/dev/zero", zero);
  ensure_with("could not raise it: read " + zero.string() +
              ": a character device, not a regular file");
}

}  // namespace
}  // namespace shim_it
