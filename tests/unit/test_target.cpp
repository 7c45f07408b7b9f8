#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "process/target.hpp"
#include "test_child.hpp"
#include "util/trusted_file.hpp"

namespace shim {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// A fresh directory under TMPDIR, removed at the end.
class temp_dir {
 public:
  temp_dir() {
    std::string pattern = (fs::temp_directory_path() / "shim-target-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw std::system_error(errno, std::generic_category(), "mkdtemp");
    }
    path_ = pattern;
  }
  ~temp_dir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write_file(const fs::path& path, const std::string& content) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << content;
}

// A name unique to this test run, for a symlink whose basename becomes the child's comm.
// (Formatted: GCC 12 at -O3 reports a false -Wrestrict for "s" + std::string, GCC bug 105329.)
std::string unique_name(const std::string& tag) { return fmt::format("s{}{}", ::getpid(), tag); }

fs::path link_to(const temp_dir& dir, const std::string& name, const char* program) {
  const fs::path link = dir.path() / name;
  fs::create_symlink(program, link);
  return link;
}

const char* const sleep_program = "/bin/sleep";

constexpr uid_t kNobody = 65534;

// Files owned by another user need root to make. CI runs as root, where skipping would hide the
// test, so there a missing root fails.
#define REQUIRE_ROOT()                                                             \
  do {                                                                             \
    if (::geteuid() != 0) {                                                        \
      if (std::getenv("CI") != nullptr) FAIL() << "needs root (chown, setresuid)"; \
      GTEST_SKIP() << "needs root (chown, setresuid)";                             \
    }                                                                              \
  } while (false)

void change_owner(const fs::path& path, uid_t uid) {
  if (::lchown(path.c_str(), uid, static_cast<gid_t>(-1)) != 0) {
    throw std::system_error(errno, std::generic_category(), "lchown " + path.string());
  }
}

// What open_trusted_file says about a pidfile at path: "trusted", "errno N", or the refusal.
std::string verdict(const fs::path& path) {
  const auto file = open_trusted_file(path.string(), "pidfile");
  if (file) return "trusted";
  if (file.error_code() == 0) return file.error();
  return "errno " + std::to_string(file.error_code());
}

// --- process_handle -----------------------------------------------------------------------------

// process_handle::open for a process the test started: nullopt when it is gone; a failure fails
// the test.
std::optional<process_handle> open_handle(pid_t pid) {
  auto opened = process_handle::open(pid);
  if (!opened) {
    ADD_FAILURE() << opened.error();
    return std::nullopt;
  }
  return std::move(opened.value());
}

// send_signal's answer: whether the signal went out; a failure fails the test.
bool delivered(const result<bool>& sent) {
  if (!sent) {
    ADD_FAILURE() << sent.error();
    return false;
  }
  return sent.value();
}

// check_target_at_start's line, "" when all is well.
std::string start_problem(const target_spec& spec) {
  const auto checked = check_target_at_start(spec);
  return checked ? std::string() : checked.error();
}

TEST(ProcessHandle, OpensAndSignalsRealChild) {
  test_child child({sleep_program, "30"});
  auto handle = open_handle(child.pid());
  ASSERT_TRUE(handle.has_value());
  EXPECT_EQ(handle->pid(), child.pid());
  ASSERT_GE(handle->fd(), 0);
  EXPECT_TRUE(::fcntl(handle->fd(), F_GETFD) & FD_CLOEXEC);
  EXPECT_TRUE(delivered(handle->send_signal(0)));
  EXPECT_TRUE(delivered(handle->send_signal(SIGTERM)));
  const int status = child.reap();
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
}

TEST(ProcessHandle, OpenOfReapedProcessIsNullopt) {
  test_child child({"/bin/true"});
  const pid_t pid = child.pid();
  child.reap();
  const auto opened = process_handle::open(pid);
  ASSERT_TRUE(opened) << opened.error();
  EXPECT_FALSE(opened.value().has_value());
}

TEST(ProcessHandle, SendSignalAfterReapIsFalse) {
  test_child child({sleep_program, "30"});
  auto handle = open_handle(child.pid());
  ASSERT_TRUE(handle.has_value());
  ::kill(child.pid(), SIGKILL);
  child.reap();
  EXPECT_FALSE(delivered(handle->send_signal(SIGTERM)));
}

TEST(ProcessHandle, OpenOfInvalidPidIsAFailure) {
  const auto opened = process_handle::open(-5);
  ASSERT_FALSE(opened);
  EXPECT_EQ(opened.error(), "pidfd_open PID -5: Invalid argument");
}

TEST(ProcessHandle, SendingAnInvalidSignalIsAFailure) {
  test_child child({sleep_program, "30"});
  auto handle = open_handle(child.pid());
  ASSERT_TRUE(handle.has_value());
  const auto sent = handle->send_signal(1000);
  ASSERT_FALSE(sent);
  EXPECT_EQ(sent.error(), fmt::format("send signal 1000 to PID {}: Invalid argument", child.pid()));
  ::kill(child.pid(), SIGKILL);
  child.reap();
}

TEST(ProcessHandle, ReleaseFdTransfersOwnership) {
  test_child child({sleep_program, "30"});
  auto handle = open_handle(child.pid());
  ASSERT_TRUE(handle.has_value());
  const int fd = handle->fd();
  unique_fd released = handle->release_fd();
  EXPECT_EQ(released.get(), fd);
  EXPECT_EQ(handle->fd(), -1);
}

// --- resolve_target: pid ------------------------------------------------------------------------

TEST(ResolveTarget, PidOfLiveProcess) {
  test_child child({sleep_program, "30"});
  target_spec spec;
  spec.pid = child.pid();
  const auto result = resolve_target(spec);
  EXPECT_EQ(result.value(), std::vector<pid_t>{child.pid()});
  EXPECT_TRUE(result.ok()) << result.error();
}

TEST(ResolveTarget, PidOfReapedProcess) {
  test_child child({"/bin/true"});
  const pid_t pid = child.pid();
  child.reap();
  target_spec spec;
  spec.pid = pid;
  const auto result = resolve_target(spec);
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error(), "no process with PID " + std::to_string(pid));
}

TEST(ResolveTarget, PidOfThreadIsRefused) {
  // /proc/TID exists for a thread too, but it is no process to signal.
  std::promise<pid_t> started;
  std::promise<void> finish;
  std::thread thread([&] {
    started.set_value(::gettid());
    finish.get_future().wait();
  });
  target_spec spec;
  spec.pid = started.get_future().get();
  const auto result = resolve_target(spec);
  finish.set_value();
  thread.join();
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error(), "PID " + std::to_string(*spec.pid) + " is a thread of process " +
                                std::to_string(::getpid()) + ", not a process");
}

TEST(ResolveTarget, NonPositivePid) {
  target_spec spec;
  spec.pid = 0;
  const auto result = resolve_target(spec);
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error(), "PID 0 is not valid");
}

// --- resolve_target: pidfile --------------------------------------------------------------------

TEST(ResolveTarget, PidfileMissing) {
  temp_dir dir;
  target_spec spec;
  spec.pidfile = (dir.path() / "x.pid").string();
  const auto result = resolve_target(spec);
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error(), "pidfile " + spec.pidfile + ": No such file or directory");
}

TEST(ResolveTarget, PidfileIsADirectory) {
  temp_dir dir;
  target_spec spec;
  spec.pidfile = dir.path().string();
  const auto result = resolve_target(spec);
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error(), "pidfile " + spec.pidfile + ": Is a directory");
}

TEST(ResolveTarget, PidfileEmpty) {
  temp_dir dir;
  target_spec spec;
  spec.pidfile = (dir.path() / "x.pid").string();
  for (const std::string content : {"", " \n\t\n"}) {
    write_file(spec.pidfile, content);
    const auto result = resolve_target(spec);
    EXPECT_FALSE(result.ok());
    EXPECT_EQ(result.error(), "pidfile " + spec.pidfile + ": empty");
  }
}

TEST(ResolveTarget, PidfileMalformed) {
  temp_dir dir;
  target_spec spec;
  spec.pidfile = (dir.path() / "x.pid").string();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"abc", R"("abc")"},
      {"12abc\n", R"("12abc")"},
      {"-5", R"("-5")"},
      {"+5", R"("+5")"},
      {"0", R"("0")"},
      {"0x10", R"("0x10")"},
      {"99999999999999", R"("99999999999999")"},
      {"1 2", R"("1 2")"},
      {"12\n34\n", R"("12\n34")"},
  };
  for (const auto& [content, shown] : cases) {
    write_file(spec.pidfile, content);
    const auto result = resolve_target(spec);
    EXPECT_FALSE(result.ok()) << content;
    EXPECT_EQ(result.error(), "pidfile " + spec.pidfile + ": " + shown + " is not a PID");
  }
}

TEST(ResolveTarget, PidfileMalformedLongContentIsShortened) {
  temp_dir dir;
  target_spec spec;
  spec.pidfile = (dir.path() / "x.pid").string();
  write_file(spec.pidfile, std::string(100, 'a'));
  const auto result = resolve_target(spec);
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error(),
            "pidfile " + spec.pidfile + ": \"" + std::string(40, 'a') + "\"... is not a PID");
}

TEST(ResolveTarget, PidfileGood) {
  temp_dir dir;
  test_child child({sleep_program, "30"});
  target_spec spec;
  spec.pidfile = (dir.path() / "x.pid").string();
  write_file(spec.pidfile, "  " + std::to_string(child.pid()) + "\n");
  const auto result = resolve_target(spec);
  EXPECT_EQ(result.value(), std::vector<pid_t>{child.pid()});
  EXPECT_TRUE(result.ok()) << result.error();
}

TEST(ResolveTarget, PidfileOfGoneProcess) {
  temp_dir dir;
  test_child child({"/bin/true"});
  const pid_t pid = child.pid();
  child.reap();
  target_spec spec;
  spec.pidfile = (dir.path() / "x.pid").string();
  write_file(spec.pidfile, std::to_string(pid));
  const auto result = resolve_target(spec);
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error(),
            "pidfile " + spec.pidfile + ": no process with PID " + std::to_string(pid));
}

// --- resolve_target: name -----------------------------------------------------------------------

TEST(ResolveTarget, NameFindsEveryMatchingProcess) {
  const std::string name = unique_name("a");
  const auto first = test_child::named(name);
  const auto second = test_child::named(name);
  const auto other = test_child::named(name + "x");
  target_spec spec;
  spec.name = name;
  const auto result = resolve_target(spec);
  auto expected = std::vector<pid_t>{first->pid(), second->pid()};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(result.value(), expected);
  EXPECT_TRUE(result.ok()) << result.error();
}

TEST(ResolveTarget, NameLongerThanCommMatchesTruncatedComm) {
  const std::string name = unique_name("b") + "-a-rather-long-program-name";
  ASSERT_GT(name.size(), 15u);
  const auto child = test_child::named(name);
  target_spec spec;
  spec.name = name;
  EXPECT_EQ(resolve_target(spec).value(), std::vector<pid_t>{child->pid()});
  // The comm is only a prefix: a different name with the same first 15 bytes matches too, which
  // is the kernel's limit, not the shim's choice.
  spec.name = name.substr(0, 15) + "-something-else";
  EXPECT_EQ(resolve_target(spec).value(), std::vector<pid_t>{child->pid()});
}

TEST(ResolveTarget, NameFromExecIsFound) {
  // The realistic case: comm comes from the executable's basename at exec. A symlink with a unique
  // name to /bin/true, run to completion, leaves a zombie: the name is certainly set by then.
  temp_dir dir;
  const std::string name = unique_name("c");
  const auto program = link_to(dir, name, "/bin/true");
  test_child child({program.string()});
  child.wait_exited();
  std::ifstream comm_file("/proc/" + std::to_string(child.pid()) + "/comm");
  std::string comm;
  std::getline(comm_file, comm);
  EXPECT_EQ(comm, name.substr(0, 15));
  // ...and as a zombie it is skipped: it cannot react to a signal any more.
  target_spec spec;
  spec.name = name;
  const auto result = resolve_target(spec);
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error(), "no process named " + name + " owned by uid 0");
}

TEST(ResolveTarget, NameSkipsZombies) {
  const std::string name = unique_name("d");
  const auto zombie = test_child::named(name, /*exit_at_once=*/true);
  const auto live = test_child::named(name);
  target_spec spec;
  spec.name = name;
  EXPECT_EQ(resolve_target(spec).value(), std::vector<pid_t>{live->pid()});
}

TEST(ResolveTarget, NameNeverFindsTheShimItself) {
  std::ifstream comm_file("/proc/self/comm");
  std::string comm;
  std::getline(comm_file, comm);
  ASSERT_FALSE(comm.empty());
  target_spec spec;
  spec.name = comm;
  const auto result = resolve_target(spec);
  if (result) {
    EXPECT_EQ(std::count(result.value().begin(), result.value().end(), ::getpid()), 0);
  }
}

TEST(ResolveTarget, NameWithoutMatch) {
  target_spec spec;
  spec.name = unique_name("-no-such-process");
  const auto result = resolve_target(spec);
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error(), "no process named " + spec.name + " owned by uid 0");
}

TEST(ResolveTarget, FakeProcTree) {
  temp_dir proc;
  const auto& root = proc.path();
  const std::string root_status = "Name:\tfoo\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\n";
  write_file(root / "100" / "comm", "foo\n");
  write_file(root / "100" / "stat", "100 (foo) S 1 100 100 0 -1\n");
  write_file(root / "100" / "status", root_status);
  write_file(root / "101" / "comm", "foo\n");
  write_file(root / "101" / "stat", "101 (foo) Z 1 101 101 0 -1\n");
  write_file(root / "101" / "status", root_status);
  write_file(root / "102" / "comm", "foobar\n");
  write_file(root / "102" / "stat", "102 (foobar) S 1 102 102 0 -1\n");
  // comm may contain ") Z": the state is the field after the last ')'.
  write_file(root / "103" / "comm", "a) Z\n");
  write_file(root / "103" / "stat", "103 (a) Z) R 1 103 103 0 -1\n");
  write_file(root / "103" / "status", root_status);
  write_file(root / "104" / "comm", "foo\n");  // vanished before its stat was read
  // Same name, not root's: real or effective uid 1000, or no status (gone meanwhile).
  write_file(root / "105" / "comm", "foo\n");
  write_file(root / "105" / "stat", "105 (foo) S 1 105 105 0 -1\n");
  write_file(root / "105" / "status", "Name:\tfoo\nUid:\t1000\t0\t0\t0\n");
  write_file(root / "106" / "comm", "foo\n");
  write_file(root / "106" / "stat", "106 (foo) S 1 106 106 0 -1\n");
  write_file(root / "106" / "status", "Name:\tfoo\nUid:\t0\t1000\t1000\t1000\n");
  write_file(root / "107" / "comm", "foo\n");
  write_file(root / "107" / "stat", "107 (foo) S 1 107 107 0 -1\n");
  write_file(root / "108" / "comm", "foo\n");
  write_file(root / "108" / "stat", "108 (foo) S 1 108 108 0 -1\n");
  write_file(root / "108" / "status", "Uid:\t1000\t1000\t1000\t1000\n");  // first line too
  // PID 1 and the shim's parent never count, even when they match.
  write_file(root / "1" / "comm", "foo\n");
  write_file(root / "1" / "stat", "1 (foo) S 0 1 1 0 -1\n");
  write_file(root / "1" / "status", root_status);
  write_file(root / std::to_string(::getppid()) / "comm", "foo\n");
  write_file(root / std::to_string(::getppid()) / "stat", "x (foo) S 1\n");
  write_file(root / std::to_string(::getppid()) / "status", root_status);
  write_file(root / "self" / "comm", "foo\n");
  write_file(root / "200" / "comm", "thread\n");
  write_file(root / "200" / "status", "Name:\tthread\nUmask:\t0022\nState:\tS\nTgid:\t199\n");
  write_file(root / std::to_string(::getpid()) / "comm", "foo\n");
  write_file(root / std::to_string(::getpid()) / "stat", "x (foo) S 1\n");

  target_spec spec;
  spec.name = "foo";
  EXPECT_EQ(resolve_target(spec, root.string()).value(), std::vector<pid_t>{100});
  spec.name_uid = 1000;
  EXPECT_EQ(resolve_target(spec, root.string()).value(), std::vector<pid_t>{108});
  spec.name = "a) Z";
  spec.name_uid = 0;
  EXPECT_EQ(resolve_target(spec, root.string()).value(), std::vector<pid_t>{103});

  target_spec by_pid;
  by_pid.pid = 102;
  EXPECT_EQ(resolve_target(by_pid, root.string()).value(), std::vector<pid_t>{102});
  by_pid.pid = 555;
  EXPECT_EQ(resolve_target(by_pid, root.string()).error(), "no process with PID 555");
  by_pid.pid = 200;
  EXPECT_EQ(resolve_target(by_pid, root.string()).error(),
            "PID 200 is a thread of process 199, not a process");
}

TEST(ResolveTarget, MissingProcRoot) {
  target_spec spec;
  spec.name = "foo";
  const auto result = resolve_target(spec, "/nonexistent-proc-root");
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error(), "/nonexistent-proc-root: No such file or directory");
  EXPECT_EQ(result.error_code(), ENOENT);
}

TEST(ResolveTarget, NothingConfigured) {
  EXPECT_EQ(resolve_target(target_spec{}).error(), "no target configured");
}

// --- never these processes (issue 8, item 7)
// ------------------------------------------------------

// A pidfile that said 1, or --target-pid=1, sent SIGTERM to PID 1. resolve_target only finds PIDs,
// so this test signals nothing even where the old code resolved PID 1.
TEST(ResolveTarget, NeverPidOneTheShimOrItsParent) {
  temp_dir dir;
  const auto pidfile = dir.path() / "x.pid";
  const std::pair<pid_t, std::string> forbidden[] = {
      {1, "PID 1 is init; the shim never signals it"},
      {::getpid(), "PID " + std::to_string(::getpid()) + " is the shim itself; never signalled"},
      {::getppid(),
       "PID " + std::to_string(::getppid()) + " is the shim's parent; never signalled"},
  };
  for (const auto& [pid, why] : forbidden) {
    target_spec by_pid;
    by_pid.pid = pid;
    const auto direct = resolve_target(by_pid);
    EXPECT_FALSE(direct.ok()) << pid;
    EXPECT_EQ(direct.error(), why);

    write_file(pidfile, std::to_string(pid) + "\n");
    target_spec by_file;
    by_file.pidfile = pidfile.string();
    const auto from_file = resolve_target(by_file);
    EXPECT_FALSE(from_file.ok()) << pid;
    EXPECT_EQ(from_file.error(), "pidfile " + pidfile.string() + ": " + why);
  }
}

TEST(CheckTargetAtStart, RefusesTheShimAndItsParentByPid) {
  target_spec spec;
  spec.pid = ::getpid();
  EXPECT_EQ(start_problem(spec), "--target-pid=" + std::to_string(::getpid()) + ": PID " +
                                     std::to_string(::getpid()) +
                                     " is the shim itself; never signalled");
  spec.pid = ::getppid();
  EXPECT_FALSE(check_target_at_start(spec));
  spec.pid = 2'000'000'000;  // no such process: found out at signal time, not a start error
  EXPECT_TRUE(check_target_at_start(spec).ok());
}

// --- --target-name is root's unless --target-user (issue 8, item 7)
// -------------------------------

TEST(ResolveTarget, NameMatchesOnlyTheWantedUser) {
  REQUIRE_ROOT();
  const std::string name = unique_name("u");
  const auto roots = test_child::named(name);
  const auto nobodys = test_child::named(name, false, kNobody);
  target_spec spec;
  spec.name = name;
  EXPECT_EQ(resolve_target(spec).value(), std::vector<pid_t>{roots->pid()});
  spec.name_uid = kNobody;
  EXPECT_EQ(resolve_target(spec).value(), std::vector<pid_t>{nobodys->pid()});
}

// --- pidfile trust, like systemd's PIDFile= (issue 8, item 7)
// -------------------------------------

TEST(TrustedPidfile, AGoodOneIsReadable) {
  temp_dir dir;
  write_file(dir.path() / "x.pid", "42\n");
  EXPECT_EQ(verdict(dir.path() / "x.pid"), "trusted");
  EXPECT_EQ(verdict(dir.path() / "missing.pid"), "errno " + std::to_string(ENOENT));
  EXPECT_EQ(verdict(dir.path() / "nodir" / "x.pid"), "errno " + std::to_string(ENOENT));
  EXPECT_EQ(verdict(dir.path() / "x.pid" / "y"), "errno " + std::to_string(ENOTDIR));
  EXPECT_EQ(verdict(dir.path()), "errno " + std::to_string(EISDIR));
}

TEST(TrustedPidfile, WritableByOthersIsRefused) {
  temp_dir dir;
  const auto file = dir.path() / "x.pid";
  write_file(file, "42\n");
  for (const mode_t mode : {0666, 0664, 0646, 0622}) {
    ASSERT_EQ(::chmod(file.c_str(), mode), 0);
    EXPECT_EQ(verdict(file),
              fmt::format("{} is writable by group or others (mode {:04o})", file.string(), mode));
  }
  ASSERT_EQ(::chmod(file.c_str(), 0600), 0);
  EXPECT_EQ(verdict(file), "trusted");
  // Sticky or not: another user could create the file before its daemon does.
  for (const mode_t mode : {01777, 01770}) {
    ASSERT_EQ(::chmod(dir.path().c_str(), mode), 0);
    EXPECT_EQ(verdict(file), fmt::format("directory {}, which holds the pidfile, is writable by "
                                         "group or others (mode {:04o})",
                                         dir.path().string(), mode));
  }
  for (const mode_t mode : {0777, 0770}) {
    ASSERT_EQ(::chmod(dir.path().c_str(), mode), 0);
    EXPECT_EQ(verdict(file), fmt::format("directory {} is writable by group or others (mode "
                                         "{:04o}) and not sticky",
                                         dir.path().string(), mode));
  }
}

TEST(TrustedPidfile, OwnedByAnotherUserIsRefused) {
  REQUIRE_ROOT();
  temp_dir dir;
  const auto file = dir.path() / "d" / "x.pid";
  write_file(file, "42\n");
  change_owner(file, kNobody);
  EXPECT_EQ(verdict(file),
            file.string() + " is owned by uid 65534, not by root or the shim's uid 0");
  change_owner(file, 0);
  change_owner(file.parent_path(), kNobody);
  EXPECT_EQ(verdict(file), "directory " + file.parent_path().string() +
                               " is owned by uid 65534, not by root or the shim's uid 0");
}

TEST(TrustedPidfile, AncestorsMayBeWritableOnlyWhenSticky) {
  temp_dir dir;
  const auto shared = dir.path() / "shared";
  const auto file = shared / "app" / "x.pid";
  write_file(file, "42\n");
  ASSERT_EQ(::chmod(shared.c_str(), 01777), 0);  // like /tmp: others cannot move "app"
  EXPECT_EQ(verdict(file), "trusted");
  ASSERT_EQ(::chmod(shared.c_str(), 0777), 0);
  EXPECT_EQ(verdict(file), "directory " + shared.string() +
                               " is writable by group or others (mode 0777) and not sticky");
}

TEST(TrustedPidfile, SymlinksAreFollowedWhenTrusted) {
  REQUIRE_ROOT();
  temp_dir dir;
  const auto real = dir.path() / "run" / "x.pid";
  write_file(real, "42\n");
  // Like /var/run -> /run: a directory link, relative and absolute, and a link to the file.
  fs::create_directories(dir.path() / "var");
  fs::create_symlink("../run", dir.path() / "var" / "run");
  EXPECT_EQ(verdict(dir.path() / "var" / "run" / "x.pid"), "trusted");
  fs::create_symlink(real, dir.path() / "abs.pid");
  EXPECT_EQ(verdict(dir.path() / "abs.pid"), "trusted");
  EXPECT_EQ(verdict(dir.path() / "run" / ".." / "run" / "." / "x.pid"), "trusted");

  // A link another user owns could have been pointed anywhere.
  change_owner(dir.path() / "abs.pid", kNobody);
  EXPECT_EQ(verdict(dir.path() / "abs.pid"),
            "symlink " + (dir.path() / "abs.pid").string() +
                " is owned by uid 65534, not by root or the shim's uid 0");
  // A trusted link to a file in an untrusted directory: the directory is what counts.
  const auto open_dir = dir.path() / "open";
  write_file(open_dir / "y.pid", "42\n");
  ASSERT_EQ(::chmod(open_dir.c_str(), 0777), 0);
  fs::create_symlink(open_dir / "y.pid", dir.path() / "y.pid");
  EXPECT_EQ(verdict(dir.path() / "y.pid"),
            "directory " + open_dir.string() +
                " is writable by group or others (mode 0777) and not sticky");
  // A loop ends in ELOOP, as the kernel's own lookup would.
  fs::create_symlink("loop", dir.path() / "loop");
  EXPECT_EQ(verdict(dir.path() / "loop"), "errno " + std::to_string(ELOOP));
}

TEST(TrustedPidfile, OnlyRegularFiles) {
  temp_dir dir;
  const auto fifo = dir.path() / "x.pid";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(verdict(fifo), fifo.string() + " is not a regular file");
}

TEST(TrustedPidfile, RelativePathsStartAtTheWorkingDirectory) {
  temp_dir dir;
  write_file(dir.path() / "x.pid", "42\n");
  const auto cwd = fs::current_path();
  fs::current_path(dir.path());
  const auto trusted = verdict("x.pid");
  ASSERT_EQ(::chmod(dir.path().c_str(), 01777), 0);
  const auto refused = verdict("x.pid");
  fs::current_path(cwd);
  EXPECT_EQ(trusted, "trusted");
  EXPECT_EQ(refused, "directory " + dir.path().string() +
                         ", which holds the pidfile, is writable by group or others (mode 1777)");
}

TEST(ResolveTarget, UntrustedPidfileIsNotRead) {
  temp_dir dir;
  test_child child({sleep_program, "30"});
  target_spec spec;
  spec.pidfile = (dir.path() / "x.pid").string();
  write_file(spec.pidfile, std::to_string(child.pid()));
  ASSERT_EQ(::chmod(spec.pidfile.c_str(), 0666), 0);
  const auto result = resolve_target(spec);
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error(), "pidfile " + spec.pidfile + " is not trusted: " + spec.pidfile +
                                " is writable by group or others (mode 0666)");
}

TEST(CheckTargetAtStart, AnExistingUntrustedPidfileIsAnError) {
  temp_dir dir;
  target_spec spec;
  spec.pidfile = (dir.path() / "x.pid").string();
  EXPECT_TRUE(check_target_at_start(spec).ok()) << "not there yet: written later";
  write_file(spec.pidfile, "42\n");
  EXPECT_TRUE(check_target_at_start(spec).ok());
  ASSERT_EQ(::chmod(spec.pidfile.c_str(), 0666), 0);
  EXPECT_EQ(start_problem(spec), "--target-pidfile=" + spec.pidfile + " is not trusted: " +
                                     spec.pidfile + " is writable by group or others (mode 0666)");
  spec.pidfile = dir.path().string();
  EXPECT_EQ(start_problem(spec), "--target-pidfile=" + spec.pidfile + ": Is a directory");
  EXPECT_TRUE(check_target_at_start(target_spec{}).ok());
}

// --- exit_watcher -------------------------------------------------------------------------------

TEST(ExitWatcher, FiresOnceOnExit) {
  boost::asio::io_context io;
  exit_watcher watcher(io);
  test_child child({sleep_program, "30"});
  auto handle = open_handle(child.pid());
  ASSERT_TRUE(handle.has_value());
  std::vector<pid_t> exited;
  ASSERT_TRUE(watcher.watch(std::move(*handle), [&](pid_t pid) { exited.push_back(pid); }).ok());
  EXPECT_EQ(watcher.watching(), 1u);
  io.poll();  // the process still runs: nothing to deliver
  EXPECT_TRUE(exited.empty());
  io.restart();
  ::kill(child.pid(), SIGKILL);
  io.run_for(10s);  // returns as soon as the watcher has no more work
  EXPECT_EQ(exited, std::vector<pid_t>{child.pid()});
  EXPECT_EQ(watcher.watching(), 0u);
}

TEST(ExitWatcher, FiresForAlreadyExitedProcess) {
  boost::asio::io_context io;
  exit_watcher watcher(io);
  test_child child({"/bin/true"});
  auto handle = open_handle(child.pid());
  ASSERT_TRUE(handle.has_value());
  child.wait_exited();
  int calls = 0;
  ASSERT_TRUE(watcher.watch(std::move(*handle), [&](pid_t) { ++calls; }).ok());
  io.run_for(10s);
  EXPECT_EQ(calls, 1);
}

TEST(ExitWatcher, FiresForReapedProcess) {
  boost::asio::io_context io;
  exit_watcher watcher(io);
  test_child child({sleep_program, "30"});
  auto handle = open_handle(child.pid());
  ASSERT_TRUE(handle.has_value());
  ::kill(child.pid(), SIGKILL);
  child.reap();
  int calls = 0;
  ASSERT_TRUE(watcher.watch(std::move(*handle), [&](pid_t) { ++calls; }).ok());
  io.run_for(10s);
  EXPECT_EQ(calls, 1);
}

TEST(ExitWatcher, WatchesSeveralProcessesIndependently) {
  boost::asio::io_context io;
  exit_watcher watcher(io);
  test_child first({sleep_program, "30"});
  test_child second({sleep_program, "30"});
  std::vector<pid_t> exited;
  for (const auto* child : {&first, &second}) {
    auto handle = open_handle(child->pid());
    ASSERT_TRUE(handle.has_value());
    ASSERT_TRUE(watcher
                    .watch(std::move(*handle),
                           [&](pid_t pid) {
                             exited.push_back(pid);
                             if (exited.size() == 1) ::kill(second.pid(), SIGKILL);
                           })
                    .ok());
  }
  EXPECT_EQ(watcher.watching(), 2u);
  ::kill(first.pid(), SIGKILL);
  io.run_for(10s);
  EXPECT_EQ(exited, (std::vector<pid_t>{first.pid(), second.pid()}));
  EXPECT_EQ(watcher.watching(), 0u);
}

TEST(ExitWatcher, ClearCancelsEverything) {
  boost::asio::io_context io;
  exit_watcher watcher(io);
  test_child child({sleep_program, "30"});
  auto handle = open_handle(child.pid());
  ASSERT_TRUE(handle.has_value());
  int calls = 0;
  ASSERT_TRUE(watcher.watch(std::move(*handle), [&](pid_t) { ++calls; }).ok());
  watcher.clear();
  EXPECT_EQ(watcher.watching(), 0u);
  ::kill(child.pid(), SIGKILL);
  child.wait_exited();
  io.run_for(10s);  // only the aborted wait is left to run
  EXPECT_EQ(calls, 0);
}

TEST(ExitWatcher, HandlerMayClearTheWatcher) {
  boost::asio::io_context io;
  exit_watcher watcher(io);
  test_child first({sleep_program, "30"});
  test_child second({sleep_program, "30"});
  int calls = 0;
  for (const auto* child : {&first, &second}) {
    auto handle = open_handle(child->pid());
    ASSERT_TRUE(handle.has_value());
    ASSERT_TRUE(watcher
                    .watch(std::move(*handle),
                           [&](pid_t) {
                             ++calls;
                             watcher.clear();
                           })
                    .ok());
  }
  ::kill(first.pid(), SIGKILL);
  first.wait_exited();
  io.run_for(10s);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(watcher.watching(), 0u);
}

TEST(ExitWatcher, RejectsHandleWithoutFd) {
  boost::asio::io_context io;
  exit_watcher watcher(io);
  const auto watched = watcher.watch(process_handle(1, unique_fd()), [](pid_t) {});
  ASSERT_FALSE(watched);
  EXPECT_EQ(watched.error(), "watch PID 1: Bad file descriptor");
  EXPECT_EQ(watcher.watching(), 0u);
}

}  // namespace
}  // namespace shim
