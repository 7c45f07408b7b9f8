// claimed_directory: the state directory a shim holds alone, where only root may write (issue 35,
// items 1 and 10).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "util/claimed_directory.hpp"

namespace shim {
namespace {

namespace fs = std::filesystem;

struct temp_dir {
  fs::path path;
  temp_dir() {
    std::string tmpl = (fs::temp_directory_path() / "claimed-directory-test.XXXXXX").string();
    path = ::mkdtemp(tmpl.data());
  }
  ~temp_dir() { fs::remove_all(path); }
};

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 ? st.st_mode & 07777 : 0;
}

std::string text_of(const fs::path& p) {
  std::ostringstream out;
  out << std::ifstream(p).rdbuf();
  return out.str();
}

// A memory emptyDir as kubelet and podman mount it: a tmpfs whose root is root's, mode 1777.
fs::path empty_dir_volume(const temp_dir& dir) {
  const fs::path volume = dir.path / "volume";
  fs::create_directory(volume);
  ::chmod(volume.c_str(), 01777);
  return volume;
}

TEST(ClaimedDirectory, MakesAMissingDirectoryOnlyItsOwnerMayWriteAndNamesItsHolder) {
  temp_dir dir;
  const auto claimed = claimed_directory::claim(dir.path / "shutdown-shim");
  ASSERT_TRUE(claimed) << claimed.error();
  EXPECT_EQ(claimed.value().path(), dir.path / "shutdown-shim");
  EXPECT_EQ(mode_of(dir.path / "shutdown-shim"), 0700u);
  const fs::path lock = dir.path / "shutdown-shim" / claimed_directory::kLockName;
  EXPECT_EQ(mode_of(lock), 0600u);
  EXPECT_EQ(text_of(lock), std::to_string(::getpid()) + "\n");
}

// The DaemonSet's and the sidecar's state directory was the emptyDir itself: the record a
// restarted shim found there could not be trusted, and the apiserver got a second SIGTERM.
TEST(ClaimedDirectory, RefusesTheRootOfAMemoryEmptyDir) {
  temp_dir dir;
  const auto volume = empty_dir_volume(dir);
  const auto claimed = claimed_directory::claim(volume);
  ASSERT_FALSE(claimed);
  EXPECT_EQ(claimed.error_code(), 0);
  EXPECT_NE(claimed.error().find("state directory not to be trusted"), std::string::npos)
      << claimed.error();
  EXPECT_NE(claimed.error().find("writable by group or others (mode 1777)"), std::string::npos)
      << claimed.error();
  EXPECT_FALSE(fs::exists(volume / claimed_directory::kLockName));
}

// What the manifests do now: the shim's own directory inside the volume (others cannot move it:
// the volume is sticky).
TEST(ClaimedDirectory, TakesADirectoryItMakesInsideAStickyVolume) {
  temp_dir dir;
  const auto volume = empty_dir_volume(dir);
  const auto claimed = claimed_directory::claim(volume / "shutdown-shim");
  ASSERT_TRUE(claimed) << claimed.error();
  EXPECT_EQ(mode_of(volume / "shutdown-shim"), 0700u);
}

TEST(ClaimedDirectory, RefusesADirectoryOthersMayWriteInto) {
  temp_dir dir;
  const fs::path state = dir.path / "state";
  fs::create_directory(state);
  ::chmod(state.c_str(), 0775);
  const auto claimed = claimed_directory::claim(state);
  ASSERT_FALSE(claimed);
  EXPECT_NE(claimed.error().find("mode 0775"), std::string::npos) << claimed.error();
}

TEST(ClaimedDirectory, RefusesADirectoryUnderOneOthersMayReplace) {
  temp_dir dir;
  const fs::path open = dir.path / "open";
  fs::create_directory(open);
  ::chmod(open.c_str(), 0777);  // not sticky: anyone may rename what is in it
  const auto claimed = claimed_directory::claim(open / "shutdown-shim");
  ASSERT_FALSE(claimed);
  EXPECT_NE(claimed.error().find("not sticky"), std::string::npos) << claimed.error();
}

// Two shims on one directory both signalled at a reboot; the second only warned about the control
// socket.
TEST(ClaimedDirectory, ASecondClaimIsRefusedNamingTheHolder) {
  temp_dir dir;
  const auto first = claimed_directory::claim(dir.path / "shutdown-shim");
  ASSERT_TRUE(first) << first.error();
  const auto second = claimed_directory::claim(dir.path / "shutdown-shim");
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error_code(), EWOULDBLOCK);
  EXPECT_NE(second.error().find("another process (PID " + std::to_string(::getpid()) + ")"),
            std::string::npos)
      << second.error();
}

TEST(ClaimedDirectory, IsFreeAgainOnceItsHolderIsGone) {
  temp_dir dir;
  { ASSERT_TRUE(claimed_directory::claim(dir.path / "shutdown-shim")); }
  EXPECT_TRUE(claimed_directory::claim(dir.path / "shutdown-shim"));
}

// A child (the apiserver in wrapper mode) that inherited the lock would keep the claim after the
// shim died, and the restarted shim could not start.
TEST(ClaimedDirectory, AChildDoesNotInheritTheClaim) {
  temp_dir dir;
  auto claimed = claimed_directory::claim(dir.path / "shutdown-shim");
  ASSERT_TRUE(claimed) << claimed.error();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::execl("/bin/sleep", "sleep", "30", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // The exec has happened once /proc says the child is sleep.
  for (int i = 0; i < 1000 && text_of("/proc/" + std::to_string(child) + "/comm") != "sleep\n";
       ++i) {
    ::usleep(1000);
  }
  { auto gone = std::move(claimed); }
  const auto again = claimed_directory::claim(dir.path / "shutdown-shim");
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_TRUE(again) << again.error();
}

}  // namespace
}  // namespace shim
