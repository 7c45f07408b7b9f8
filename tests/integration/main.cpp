// The integration tests need root, mount namespaces, dbus-daemon and systemd-logind. Without them
// the binary reports why and exits 77 (meson: skipped); with CI=true it fails instead, so that a
// CI machine that lost a prerequisite cannot pass by running nothing.

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "node_sandbox.hpp"
#include "process.hpp"

namespace {

bool executable(const std::string& path) {
  return !path.empty() && access(path.c_str(), X_OK) == 0;
}

bool is_directory(const char* path) {
  struct stat st {};
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

// Tries, in a throw-away child, what the sandbox does for logind: a private mount namespace with a
// bind mount. Touches nothing outside that namespace.
std::optional<std::string> mount_namespace_problem() {
  char dir[] = "/tmp/shim-it-probe.XXXXXX";
  if (!mkdtemp(dir)) return std::string("mkdtemp failed: ") + std::strerror(errno);
  const pid_t pid = fork();
  if (pid < 0) {
    rmdir(dir);
    return std::string("fork failed: ") + std::strerror(errno);
  }
  if (pid == 0) {
    if (unshare(CLONE_NEWNS) < 0) _exit(10);
    if (mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) < 0) _exit(11);
    if (mount(dir, "/run/systemd", nullptr, MS_BIND, nullptr) < 0) _exit(12);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  rmdir(dir);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return std::nullopt;
  switch (WIFEXITED(status) ? WEXITSTATUS(status) : -1) {
    case 10:
      return std::string("unshare(CLONE_NEWNS) is not permitted");
    case 11:
      return std::string("cannot make / private in a new mount namespace");
    case 12:
      return std::string("cannot bind-mount over /run/systemd in a new mount namespace");
    default:
      return std::string("mount namespace probe failed");
  }
}

std::optional<std::string> missing_prerequisite(const sandbox::tool_paths& tools) {
  if (geteuid() != 0) return "must run as root (logind, mount namespaces)";
  if (!executable(tools.dbus_daemon)) return "dbus-daemon not found at " + tools.dbus_daemon;
  if (!executable(tools.logind)) return "systemd-logind not found at " + tools.logind;
  if (!is_directory("/run/systemd") || !is_directory("/etc/systemd")) {
    return std::string("/run/systemd or /etc/systemd is missing (bind-mount targets for logind)");
  }
  return mount_namespace_problem();
}

// Helpers that the build should have produced: their absence is a broken build, never a skip.
std::optional<std::string> missing_helper(const sandbox::tool_paths& tools) {
  if (!executable(tools.fake_manager))
    return "FAKE_SYSTEMD_MANAGER not executable: " + tools.fake_manager;
  if (!executable(tools.fake_apiserver))
    return "FAKE_APISERVER not executable: " + tools.fake_apiserver;
  if (!executable(tools.shim)) return "SHUTDOWN_SHIM not executable: " + tools.shim;
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  // First of all: nothing in this process may reach the machine's own system bus.
  sandbox::prepare_sandbox_process();
  ::testing::InitGoogleTest(&argc, argv);

  const auto tools = sandbox::tool_paths::from_environment();
  if (auto problem = missing_helper(tools)) {
    std::fprintf(stderr, "integration tests: %s\n", problem->c_str());
    return 1;
  }
  if (auto problem = missing_prerequisite(tools)) {
    const char* ci = std::getenv("CI");
    if (ci && std::string(ci) == "true") {
      std::fprintf(stderr, "integration tests cannot run, and CI=true makes that a failure: %s\n",
                   problem->c_str());
      return 1;
    }
    std::fprintf(stderr, "integration tests skipped: %s\n", problem->c_str());
    return 77;
  }
  const int rc = RUN_ALL_TESTS();
  sandbox::reap_orphans();
  return rc;
}
