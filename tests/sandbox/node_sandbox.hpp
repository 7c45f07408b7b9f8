#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "bus_config.hpp"
#include "private_bus.hpp"
#include "process.hpp"

namespace sandbox {

// Where the programs a sandbox runs live. Each can be overridden from the environment (names in
// brackets), which is how meson hands the tests the binaries it built.
struct tool_paths {
  std::string dbus_daemon;     // [DBUS_DAEMON]          default /usr/bin/dbus-daemon
  std::string logind;          // [SYSTEMD_LOGIND]       default /lib/systemd/systemd-logind
  std::string fake_manager;    // [FAKE_SYSTEMD_MANAGER] default: the one built next to this library
  std::string fake_apiserver;  // [FAKE_APISERVER]       default: likewise
  std::string shim;            // [SHUTDOWN_SHIM]        default: the one built in src/
  std::string bus_attacker;    // [BUS_ATTACKER]         default: the one built next to this library
  std::string fake_kubelet;    // [FAKE_KUBELET]         default: likewise
  std::string hostile_upstream;  // [HOSTILE_UPSTREAM]   default: likewise

  static tool_paths from_environment();
};

// What the harness sets DBUS_SYSTEM_BUS_ADDRESS to whenever no sandbox is alive: a socket that does
// not exist, so that anything that would fall back to "the system bus" fails instead of reaching
// the machine's own.
inline constexpr const char* kNoBusAddress = "unix:path=/nonexistent/shutdown-shim-tests/no-bus";

// Sets DBUS_SYSTEM_BUS_ADDRESS to kNoBusAddress in this process. Call first thing in main().
void point_system_bus_nowhere();

// What every program that runs sandboxes does first in main(), before any thread exists: points
// the system bus nowhere, becomes a subreaper, cleans up on SIGTERM/SIGINT, ignores SIGPIPE.
void prepare_sandbox_process();

struct sandbox_options {
  // logind.conf's InhibitDelayMaxSec= in logind's syntax: "30", "1", "500ms".
  std::string inhibit_delay_max = "30";
  // The sandbox's logind.conf.d drop-in repeating that value, so that the machine's
  // /usr/lib/systemd/logind.conf.d cannot override it. It sorts last by default; tests of the
  // shim's own zz-shutdown-shim.conf name it to sort just before that one.
  std::string logind_dropin_name = "zzzz-node-sandbox.conf";
  // allow_all, or Debian's real system-bus policy; with that one the temp dir becomes 0711, so that
  // unprivileged users (an attacker run as nobody) can reach the socket, and nothing else there.
  bus_policy policy = bus_policy::allow_all;
  bool start_manager = true;
  bool start_logind = true;
  // Bound on every start-up wait (socket, bus names).
  std::chrono::milliseconds startup_timeout{20'000};
};

struct inhibitor_info {
  std::string what, who, why, mode;
  std::uint32_t uid = 0;
  std::uint32_t pid = 0;
};

struct start_unit_record {
  std::string unit;
  std::string mode;
  std::uint64_t usec = 0;  // CLOCK_MONOTONIC in the stand-in manager when the call arrived
};

struct kill_unit_record {
  std::string unit, who;
  int signal = 0;
  std::uint64_t usec = 0;  // CLOCK_MONOTONIC in the stand-in manager when the call arrived
};

struct kill_record {
  std::uint32_t pid = 0;
  bool was_alive = false;
  std::uint64_t usec = 0;
};

struct prepare_for_shutdown_record {
  bool start = false;
  std::string sender;
  std::uint64_t seen_us = 0;  // when the harness dispatched it (after the fact)
};

// An inhibitor lock taken by the harness itself; closing it releases the lock.
class lock_fd {
 public:
  lock_fd() = default;
  explicit lock_fd(int fd) : fd_(fd) {}
  ~lock_fd() { release(); }
  lock_fd(lock_fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  lock_fd& operator=(lock_fd&& o) noexcept;
  lock_fd(const lock_fd&) = delete;
  lock_fd& operator=(const lock_fd&) = delete;
  void release();
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// One sandboxed node: a temp dir, a private dbus-daemon (type system), a stand-in PID 1 manager
// (org.freedesktop.systemd1) and the real systemd-logind in its own mount namespace, with
// /run/systemd and /etc/systemd bind-mounted from the temp dir. Every process it starts gets
// DBUS_SYSTEM_BUS_ADDRESS pointing at the private socket, and is killed and reaped by the
// destructor, whatever state the test left it in.
class node_sandbox {
 public:
  explicit node_sandbox(sandbox_options opts = {});
  ~node_sandbox();
  node_sandbox(const node_sandbox&) = delete;
  node_sandbox& operator=(const node_sandbox&) = delete;

  const std::filesystem::path& dir() const { return dir_; }
  std::filesystem::path path(std::string_view name) const { return dir_ / name; }
  const std::string& bus_address() const { return address_; }
  const tool_paths& tools() const { return tools_; }
  // Keep the temp dir after destruction (for a failed test); it is printed then.
  void keep_dir(bool keep = true) { keep_dir_ = keep; }

  // This process's environment for a child, with DBUS_SYSTEM_BUS_ADDRESS set to the private bus
  // and the service-manager variables (NOTIFY_SOCKET, LISTEN_FDS, JOURNAL_STREAM, ...) removed.
  std::vector<std::string> child_environment(const std::vector<std::string>& extra = {}) const;

  // Starts a process of this node; its stdout and stderr go to log_path(name). It is killed when
  // the sandbox is destroyed, if it is still running then. With user, it runs as that user
  // instead of root.
  child_process& spawn(const std::string& name, const std::vector<std::string>& argv,
                       const std::vector<std::string>& extra_env = {},
                       std::optional<user_ids> user = std::nullopt);
  std::filesystem::path log_path(const std::string& name) const;

  // --- services ---
  void start_manager();
  void stop_manager();
  void start_logind();
  void stop_logind();
  void restart_logind();
  bool logind_running();
  pid_t logind_pid() const;
  // Rewrites logind.conf's InhibitDelayMaxSec=; takes effect at the next start or reload_logind().
  void set_inhibit_delay_max(const std::string& value);
  // SIGHUP to logind, then waits (bounded) until InhibitDelayMaxUSec reads expected_usec.
  void reload_logind(std::uint64_t expected_usec);
  // Waits until logind's InhibitDelayMaxUSec reads expected_usec, sending nothing: logind announces
  // no reload (the property is constant to D-Bus, no PropertiesChanged), so it is re-read every
  // 20 ms until the deadline.
  bool wait_for_inhibit_delay_max(std::uint64_t expected_usec, std::chrono::milliseconds timeout);
  // Stops the dbus-daemon and starts a new one on the same socket. The stand-in manager reconnects
  // by itself; logind, which stays up but disconnected (it never reconnects), is restarted.
  void restart_dbus();
  // The two halves of restart_dbus(), for a bus that stays away for a while: stop_dbus() stops the
  // dbus-daemon and logind (which would only linger, disconnected) and drops the harness's
  // connection (bus() throws until start_dbus_again()); start_dbus_again() starts a new daemon on
  // the same socket, waits for the manager's reconnect and starts logind again.
  void stop_dbus();
  void start_dbus_again();

  // The harness's own connection (re-opened by restart_dbus; don't keep the reference across it).
  private_bus& bus();

  // --- logind ---
  // Calls Manager.Reboot(false); returns monotonic_us taken just before the call.
  std::uint64_t reboot();
  std::vector<inhibitor_info> list_inhibitors();
  std::optional<inhibitor_info> find_inhibitor(std::string_view who,
                                               std::string_view mode = "delay");
  // Waits for the inhibitor of `who` to be present (or absent), driven by logind's
  // PropertiesChanged (it emits one whenever a lock comes or goes), re-checked at least every
  // 250 ms in case a signal is missed across restarts.
  bool wait_for_inhibitor(std::string_view who, bool present, std::chrono::milliseconds timeout);
  // Likewise for a lock of `who` held by process pid (after a restart, the old process's lock may
  // still be listed for a moment).
  bool wait_for_inhibitor_of(std::string_view who, pid_t pid, std::chrono::milliseconds timeout);
  bool preparing_for_shutdown();
  std::uint64_t inhibit_delay_max_usec();
  lock_fd take_inhibitor(const std::string& who, const std::string& why,
                         const std::string& what = "shutdown", const std::string& mode = "delay");
  // Emits org.freedesktop.login1.Manager.PrepareForShutdown(start) from a fresh connection that is
  // not logind: a forgery that a careful listener ignores.
  void emit_forged_prepare_for_shutdown(bool start);
  // PrepareForShutdown signals from logind seen so far (dispatched when the harness processes its
  // connection: every wait_* helper does).
  std::vector<prepare_for_shutdown_record> prepare_for_shutdown_signals();
  bool wait_for_prepare_for_shutdown(bool start, std::chrono::milliseconds timeout,
                                     std::size_t after_index = 0);

  // --- the stand-in manager ---
  void set_system_state(const std::string& state);
  std::string system_state();
  void cancel_last_job();
  void finish_last_job(const std::string& result);
  std::vector<start_unit_record> start_unit_calls();
  // Waits for StartUnit(unit) arriving at or after since_us (driven by the manager's
  // StartUnitCalled signal).
  std::optional<start_unit_record> wait_for_start_unit(const std::string& unit,
                                                       std::chrono::milliseconds timeout,
                                                       std::uint64_t since_us = 0);
  void set_kill_on_reboot(const std::vector<pid_t>& pids);
  // When reboot.target starts: SIGTERM to pids, and the SIGKILL of every registered PID (these and
  // set_kill_on_reboot's) only stop_timeout later, as systemd stopping units does.
  void set_stop_on_reboot(const std::vector<pid_t>& pids, std::chrono::microseconds stop_timeout);
  std::vector<kill_record> killed_on_reboot();
  // Every KillUnit call the manager has had, in order.
  std::vector<kill_unit_record> kill_unit_calls();

  // --- diagnostics ---
  // The last max_lines lines of each log in the sandbox (bus, manager, logind, spawned processes).
  void dump_logs(std::ostream& out, std::size_t max_lines = 120) const;

 private:
  void write_configs();
  void write_logind_conf();
  void start_dbus();
  void connect_harness_bus();
  void require_private_environment() const;
  // Waits until holds(ListInhibitors()) is true; see wait_for_inhibitor.
  bool wait_for_inhibitors(const std::function<bool(const std::vector<inhibitor_info>&)>& holds,
                           std::chrono::milliseconds timeout);
  // A stand-in manager test method taking (au) or (aut): PIDs, then usec if given.
  void call_manager_with_pids(const std::string& method, const std::vector<pid_t>& pids,
                              std::optional<std::uint64_t> usec);

  sandbox_options opts_;
  tool_paths tools_;
  std::filesystem::path dir_;
  std::string address_;
  bool keep_dir_ = false;
  std::unique_ptr<child_process> dbus_;
  std::unique_ptr<child_process> manager_;
  std::unique_ptr<child_process> logind_;
  std::list<child_process> spawned_;
  std::unique_ptr<private_bus> bus_;
  slot_ptr prepare_slot_;
  std::vector<prepare_for_shutdown_record> prepare_signals_;
  unsigned logind_starts_ = 0;
  bool logind_was_running_ = false;  // when stop_dbus() stopped it
};

// --- reading what the processes wrote ---

std::string read_text_file(const std::filesystem::path& path);
std::vector<std::string> read_lines(const std::filesystem::path& path);
std::string last_lines(const std::string& text, std::size_t max_lines);
// Replaces path's content through a temporary and rename(), as kubelet rotates projected tokens
// and certificates: a reader sees the old file or the new one, never half of one.
void write_file_atomically(const std::filesystem::path& path, const std::string& content);

// Minimal JSON-line field access for flat objects as the shim writes them.
std::optional<std::string> json_string_field(std::string_view line, std::string_view key);
std::optional<std::uint64_t> json_uint_field(std::string_view line, std::string_view key);

struct shim_event {
  std::string event;
  std::uint64_t monotonic_us = 0;
  std::string cause;
  std::string message;
  std::string line;
};
std::vector<shim_event> read_event_log(const std::filesystem::path& path);

// fake_apiserver's --signal-log and --lifecycle-log lines: "WORD monotonic_us [detail]".
struct timed_line {
  std::string word;
  std::uint64_t usec = 0;
  std::string detail;
};
std::vector<timed_line> read_timed_lines(const std::filesystem::path& path);

}  // namespace sandbox
