// Issue 8, item 7: the target was trusted blindly. A pidfile anyone could write chose what root
// SIGTERMed, a pidfile saying 1 (or --target-pid=1) signalled PID 1, and --target-name counted any
// user's process. Each test runs the shim against the real logind in the sandbox.
//
// PID 1: on the old code these tests really send SIGTERM to PID 1. So the shim always runs in a
// PID namespace the test makes (unshare --pid --fork --mount-proc), whose PID 1 is a shell that
// only logs the signal: the machine's own PID 1 is not even visible from there.

#include <fmt/core.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "shim_harness.hpp"

namespace shim_it {
namespace {

namespace fs = std::filesystem;

constexpr uid_t kNobody = 65534;

void write_file(const fs::path& path, const std::string& text, mode_t mode) {
  std::ofstream(path) << text;
  ASSERT_EQ(::chmod(path.c_str(), mode), 0) << path;
}

// Runs argv as nobody (setpriv), the unprivileged user of the reproductions.
std::vector<std::string> as_nobody(std::vector<std::string> argv) {
  std::vector<std::string> out = {"/usr/bin/setpriv", "--reuid=nobody", "--regid=nogroup",
                                  "--clear-groups", "--"};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

class FaultTarget : public ShimTest {
 protected:
  // A root-owned process that must never be signalled: a sleep, which SIGTERM would end.
  sandbox::child_process& start_victim(const std::string& name, const fs::path& program) {
    return sb().spawn(name, {program.string(), "1000"});
  }

  // The sandbox dir is 0700; nobody must reach what it runs or writes in there. 0711 keeps it
  // unwritable and unlistable by others.
  void let_nobody_in() { ASSERT_EQ(::chmod(sb().dir().c_str(), 0711), 0); }

  // argv prefix: a new PID namespace whose PID 1 is a shell that appends "TERM" to trap_log on
  // SIGTERM and otherwise waits for the shim, then exits with its status.
  std::vector<std::string> pid_namespace(const fs::path& trap_log) {
    return {"/usr/bin/unshare",
            "--pid",
            "--fork",
            "--mount-proc",
            "--kill-child",
            "/bin/sh",
            "-c",
            fmt::format("trap 'echo TERM >>{}' TERM\n"
                        "\"$@\" & child=$!\n"
                        "while :; do\n"
                        "  wait \"$child\"; rc=$?\n"
                        "  kill -0 \"$child\" 2>/dev/null || exit \"$rc\"\n"
                        "done",
                        trap_log.string()),
            "pid1"};
  }

  std::string log_of(const shim& s) { return sandbox::read_text_file(s.log); }

  // /readyz is 503 with the target check saying why nothing runs.
  void expect_target_not_found(const shim& s, const std::string& reason) {
    auto r = wait_shim_answer(s, "/readyz?verbose");
    ASSERT_TRUE(r) << "the shim never answered";
    EXPECT_EQ(r->status, 503u) << r->body;
    EXPECT_EQ(readyz_check_line(r->body, "target"), "[-]target failed: not found yet: " + reason)
        << r->body;
  }

  // The shim on this pidfile exits 1 at once, with one line naming the file and the reason.
  void expect_refused_at_start(const fs::path& pidfile, const std::string& reason) {
    shim_options o;
    o.target = {"--target-pidfile=" + pidfile.string()};
    auto s = start_shim(o, /*wait_ready=*/false);
    auto status = s.process->wait_for_exit(kStartTimeout);
    ASSERT_TRUE(status) << "the shim started on " << pidfile;
    EXPECT_EQ(sandbox::shell_exit_code(*status), 1) << sandbox::describe_wait_status(*status);
    // The shims of a test share one log file.
    const std::string line = "--target-pidfile=" + pidfile.string() + " is not trusted: " + reason;
    EXPECT_NE(log_of(s).find(line), std::string::npos) << log_of(s);
  }

  // One program name run by root and by nobody (comm is the link's name); a reboot; only the
  // wanted user's process gets the signal.
  void expect_only_the_wanted_user_signalled(bool nobody_wanted) {
    let_nobody_in();
    const auto bin = sb().path("bin");
    fs::create_directory(bin);
    ASSERT_EQ(::chmod(bin.c_str(), 0755), 0);
    const auto program = bin / "shimfaultsleep";
    fs::create_symlink("/bin/sleep", program);
    auto& roots = sb().spawn("root-sleep", {program.string(), "1000"});
    auto& nobodys = sb().spawn("nobody-sleep", as_nobody({program.string(), "1000"}));

    shim_options o;
    o.drain_delay = "1s";
    o.exit_timeout = "3s";
    o.target = {"--target-name=shimfaultsleep"};
    if (nobody_wanted) o.target.push_back("--target-user=nobody");
    auto s = start_shim(o);
    ASSERT_FALSE(HasFailure());
    ASSERT_TRUE(wait_shim_lock(true));

    const auto t0 = sb().reboot();
    ASSERT_TRUE(sb().wait_for_start_unit("reboot.target", kEventTimeout, t0));
    auto& wanted = nobody_wanted ? nobodys : roots;
    auto& other = nobody_wanted ? roots : nobodys;
    EXPECT_TRUE(wanted.wait_for_exit(kEventTimeout)) << "the target was not signalled";
    EXPECT_TRUE(other.running()) << "a same-named process of another user was signalled";
    EXPECT_EQ(s.count_events("SignalForwarded"), 1u);
  }
};

TEST_F(FaultTarget, AnUntrustedPidfileAtStartExitsOne) {
  auto& victim = start_victim("victim", "/bin/sleep");
  const std::string victim_pid = std::to_string(victim.pid()) + "\n";
  // Mode 0666: anyone may write the PID root will signal.
  const auto open_file = sb().path("open.pid");
  write_file(open_file, victim_pid, 0666);
  expect_refused_at_start(open_file,
                          open_file.string() + " is writable by group or others (mode 0666)");

  // A root-owned 0644 file in a directory owned by nobody, who can replace it at will.
  const auto users_dir = sb().path("users-dir");
  fs::create_directory(users_dir);
  ASSERT_EQ(::chown(users_dir.c_str(), kNobody, static_cast<gid_t>(-1)), 0);
  write_file(users_dir / "x.pid", victim_pid, 0644);
  expect_refused_at_start(users_dir / "x.pid",
                          "directory " + users_dir.string() +
                              " is owned by uid 65534, not by root or the shim's uid 0");
  EXPECT_TRUE(victim.running());
}

// The pidfile is fine at start and turns hostile later: at the shutdown it is refused with a
// warning, and the root-owned sleep it names is not signalled.
TEST_F(FaultTarget, APidfileMadeWritableLaterIsRefusedAtTheShutdown) {
  let_nobody_in();
  auto& victim = start_victim("victim", "/bin/sleep");
  const auto run_dir = sb().path("run");
  fs::create_directory(run_dir);
  ASSERT_EQ(::chmod(run_dir.c_str(), 0755), 0);
  const auto pidfile = run_dir / "kube-apiserver.pid";
  shim_options o;
  o.drain_delay = "1s";
  o.exit_timeout = "2s";
  o.target = {"--target-pidfile=" + pidfile.string()};
  // No target runs yet, so /readyz is 503 (issue 9): wait for the lock, not for readiness.
  auto s = start_shim(o, /*wait_ready=*/false);
  ASSERT_TRUE(wait_shim_lock(true));
  expect_target_not_found(s, "pidfile " + pidfile.string() + ": No such file or directory");

  // A careless admin leaves it 0666; nobody writes the PID of root's sleep into it.
  write_file(pidfile, "", 0666);
  auto& writer = sb().spawn(
      "nobody-writes",
      as_nobody({"/bin/sh", "-c", fmt::format("echo {} >{}", victim.pid(), pidfile.string())}));
  auto written = writer.wait_for_exit(kStartTimeout);
  ASSERT_TRUE(written && sandbox::shell_exit_code(*written) == 0) << "nobody could not write it";

  const auto t0 = sb().reboot();
  ASSERT_TRUE(sb().wait_for_start_unit("reboot.target", kEventTimeout, t0));
  EXPECT_TRUE(victim.running()) << "root's sleep, named by a hostile pidfile, was signalled";
  EXPECT_EQ(s.count_events("SignalForwarded"), 0u);
  const std::string log = log_of(s);
  EXPECT_NE(log.find("pidfile " + pidfile.string() + " is not trusted"), std::string::npos) << log;
}

TEST_F(FaultTarget, TargetNameIgnoresAnotherUsersProcessOfThatName) {
  expect_only_the_wanted_user_signalled(/*nobody_wanted=*/false);
}

TEST_F(FaultTarget, TargetUserNobodyTakesNobodysProcess) {
  expect_only_the_wanted_user_signalled(/*nobody_wanted=*/true);
}

TEST_F(FaultTarget, TargetPidOneIsAUsageErrorInsideAPidNamespace) {
  const auto trap_log = sb().path("pid1-signals.log");
  shim_options o;
  o.launcher = pid_namespace(trap_log);
  o.target = {"--target-pid=1"};
  auto s = start_shim(o, /*wait_ready=*/false);
  auto status = s.process->wait_for_exit(kStartTimeout);
  ASSERT_TRUE(status) << "--target-pid=1 was accepted";
  EXPECT_EQ(sandbox::shell_exit_code(*status), 2) << sandbox::describe_wait_status(*status);
  EXPECT_NE(log_of(s).find("--target-pid: PID 1 is init"), std::string::npos) << log_of(s);
  EXPECT_EQ(sandbox::read_text_file(trap_log), "");
}

// A trusted pidfile (root's, 0644) that says 1: at the shutdown the namespace's PID 1 gets
// nothing, and the hold ends after the drain as with no target.
TEST_F(FaultTarget, APidfileSayingOneNeverSignalsPidOne) {
  const auto trap_log = sb().path("pid1-signals.log");
  const auto pidfile = sb().path("init.pid");
  write_file(pidfile, "1\n", 0644);
  shim_options o;
  o.launcher = pid_namespace(trap_log);
  o.drain_delay = "1s";
  o.exit_timeout = "2s";
  o.target = {"--target-pidfile=" + pidfile.string()};
  // PID 1 is never the target, so /readyz is 503 (issue 9): wait for the lock, not for readiness.
  auto s = start_shim(o, /*wait_ready=*/false);
  ASSERT_TRUE(wait_shim_lock(true));
  expect_target_not_found(
      s, "pidfile " + pidfile.string() + ": PID 1 is init; the shim never signals it");

  const auto t0 = sb().reboot();
  ASSERT_TRUE(sb().wait_for_start_unit("reboot.target", kEventTimeout, t0));
  EXPECT_EQ(sandbox::read_text_file(trap_log), "") << "PID 1 (of the test's namespace) got it";
  EXPECT_EQ(s.count_events("SignalForwarded"), 0u);
  EXPECT_NE(log_of(s).find("PID 1 is init; the shim never signals it"), std::string::npos)
      << log_of(s);
}

}  // namespace
}  // namespace shim_it
