#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sandbox {

// CLOCK_MONOTONIC in microseconds: the one clock that the harness, the stand-ins, logind and the
// shim's event log ("monotonic_us") all share.
std::uint64_t monotonic_us();

// Exit code the way a shell reports it: the status for a normal exit, 128+N for signal N.
int shell_exit_code(int wait_status);
std::string describe_wait_status(int wait_status);

struct bind_mount {
  std::filesystem::path source;
  std::filesystem::path target;
};

// A user a child runs as instead of root.
struct user_ids {
  uid_t uid = 0;
  gid_t gid = 0;
};
// The uid and primary gid of a user of this machine (getpwnam); throws std::runtime_error if there
// is no such user.
user_ids lookup_user(const std::string& name);

struct spawn_options {
  std::vector<std::string> env;       // the complete environment, "NAME=value"
  std::filesystem::path stdout_path;  // appended to; empty: /dev/null
  std::filesystem::path stderr_path;  // appended to; empty: same as stdout
  // Runs the program in a new private mount namespace with these bind mounts (logind).
  std::vector<bind_mount> private_mounts;
  // Descriptors handed to the child: (descriptor in the parent, number in the child).
  std::vector<std::pair<int, int>> pass_fds;
  // Drops to this user (no supplementary groups) before anything else, so that the child is
  // unprivileged from its first instruction; PR_SET_PDEATHSIG is set after, as the change of
  // credentials clears it.
  std::optional<user_ids> user;
};

// One child process of the harness. It gets its own process group (so that killing the group also
// ends anything it started) and PR_SET_PDEATHSIG=SIGKILL (so that it dies if the test binary does).
// The destructor SIGKILLs the group and reaps the child: nothing outlives the object.
class child_process {
 public:
  child_process() = default;
  // Throws std::runtime_error if fork, the namespace setup or exec fails.
  child_process(std::string name, const std::vector<std::string>& argv, const spawn_options& opts);
  ~child_process();
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;
  child_process(child_process&& other) noexcept;
  child_process& operator=(child_process&& other) noexcept;

  const std::string& name() const { return name_; }
  pid_t pid() const { return pid_; }
  bool started() const { return pid_ > 0; }
  std::uint64_t start_time_us() const { return start_us_; }

  // True until the child has exited (it is reaped on the way, without blocking).
  bool running();
  // Sends sig to the child only (not its group). No-op once it has been reaped.
  void signal(int sig);
  // Waits up to timeout for the child to exit; returns its wait status, or nullopt on timeout.
  std::optional<int> wait_for_exit(std::chrono::milliseconds timeout);
  // Set once reaped.
  std::optional<int> wait_status() const { return status_; }
  // Time (monotonic_us) at which the harness saw the exit; an upper bound of the real exit time.
  std::uint64_t exit_seen_us() const { return exit_seen_us_; }

  // SIGTERM, up to grace to exit, then SIGKILL of the whole group; always reaps.
  void stop(std::chrono::milliseconds grace = std::chrono::milliseconds(2000));
  // SIGKILL of the whole group and reap.
  void kill_and_reap();

 private:
  bool try_reap(bool block);
  void reset();

  std::string name_;
  pid_t pid_ = -1;
  int pidfd_ = -1;
  std::uint64_t start_us_ = 0;
  std::uint64_t exit_seen_us_ = 0;
  std::optional<int> status_;
};

// For a test binary killed by SIGTERM/SIGINT/SIGHUP (a meson timeout): blocks those signals in the
// calling thread and starts a thread that, on one of them, SIGKILLs every tracked child and its
// group, removes every registered directory, and exits 128+signal. Call in main() before any other
// thread exists (threads inherit the mask; children get a clean one).
void install_termination_cleanup();
void register_cleanup_dir(const std::filesystem::path& dir);
void unregister_cleanup_dir(const std::filesystem::path& dir);

// Makes this process the reaper of orphans of its descendants, so that a grandchild whose parent
// was killed is reaped here rather than lingering. Harmless to call more than once.
void become_subreaper();
// Reaps children that no child_process owns (orphans reparented to us). Never blocks for long.
void reap_orphans(std::chrono::milliseconds patience = std::chrono::milliseconds(200));

}  // namespace sandbox
