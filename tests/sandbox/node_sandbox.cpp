#include "node_sandbox.hpp"

#include <fcntl.h>
#include <fmt/core.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "bus_names.hpp"

extern char** environ;

#ifndef SANDBOX_FAKE_MANAGER_PATH
#define SANDBOX_FAKE_MANAGER_PATH ""
#endif
#ifndef SANDBOX_FAKE_APISERVER_PATH
#define SANDBOX_FAKE_APISERVER_PATH ""
#endif
#ifndef SANDBOX_SHIM_PATH
#define SANDBOX_SHIM_PATH ""
#endif
#ifndef SANDBOX_BUS_ATTACKER_PATH
#define SANDBOX_BUS_ATTACKER_PATH ""
#endif
#ifndef SANDBOX_FAKE_KUBELET_PATH
#define SANDBOX_FAKE_KUBELET_PATH ""
#endif

namespace sandbox {

namespace {

constexpr const char* kTestInterface = "org.shutdownshim.Test1";

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : std::string(fallback);
}

void write_file(const std::filesystem::path& path, const std::string& content) {
  std::ofstream out(path, std::ios::trunc);
  out << content;
  if (!out) throw std::runtime_error(fmt::format("cannot write {}", path.string()));
}

std::chrono::milliseconds remaining(std::chrono::steady_clock::time_point deadline) {
  return std::max(std::chrono::milliseconds(0),
                  std::chrono::duration_cast<std::chrono::milliseconds>(
                      deadline - std::chrono::steady_clock::now()));
}

}  // namespace

tool_paths tool_paths::from_environment() {
  tool_paths t;
  t.dbus_daemon = env_or("DBUS_DAEMON", "/usr/bin/dbus-daemon");
  t.logind = env_or("SYSTEMD_LOGIND", "/lib/systemd/systemd-logind");
  t.fake_manager = env_or("FAKE_SYSTEMD_MANAGER", SANDBOX_FAKE_MANAGER_PATH);
  t.fake_apiserver = env_or("FAKE_APISERVER", SANDBOX_FAKE_APISERVER_PATH);
  t.shim = env_or("SHUTDOWN_SHIM", SANDBOX_SHIM_PATH);
  t.bus_attacker = env_or("BUS_ATTACKER", SANDBOX_BUS_ATTACKER_PATH);
  t.fake_kubelet = env_or("FAKE_KUBELET", SANDBOX_FAKE_KUBELET_PATH);
  t.hostile_upstream = env_or("HOSTILE_UPSTREAM", SANDBOX_HOSTILE_UPSTREAM_PATH);
  return t;
}

void point_system_bus_nowhere() { setenv("DBUS_SYSTEM_BUS_ADDRESS", kNoBusAddress, 1); }

void prepare_sandbox_process() {
  point_system_bus_nowhere();
  become_subreaper();
  install_termination_cleanup();
  signal(SIGPIPE, SIG_IGN);
}

lock_fd& lock_fd::operator=(lock_fd&& o) noexcept {
  if (this != &o) {
    release();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void lock_fd::release() {
  if (fd_ >= 0) {
    close(fd_);
    fd_ = -1;
  }
}

// --- construction and teardown ------------------------------------------------------------------

node_sandbox::node_sandbox(sandbox_options opts)
    : opts_(std::move(opts)), tools_(tool_paths::from_environment()) {
  become_subreaper();
  // /tmp rather than $TMPDIR: the socket path must stay well under sun_path's 108 bytes.
  char templ[] = "/tmp/node-sandbox.XXXXXX";
  if (!mkdtemp(templ)) throw std::runtime_error(fmt::format("mkdtemp: {}", std::strerror(errno)));
  dir_ = templ;
  register_cleanup_dir(dir_);
  address_ = "unix:path=" + (dir_ / "system_bus_socket").string();
  // Before anything is started: this process and all it starts use the private bus, and nothing
  // else. A mismatch here is a hard failure, never something to carry on from.
  setenv("DBUS_SYSTEM_BUS_ADDRESS", address_.c_str(), 1);
  require_private_environment();
  try {
    write_configs();
    start_dbus();
    connect_harness_bus();
    if (opts_.start_manager) start_manager();
    if (opts_.start_logind) start_logind();
  } catch (...) {
    // The destructor does not run for a half-built object: clean up here, keep the logs.
    std::ostringstream logs;
    dump_logs(logs);
    std::fputs(logs.str().c_str(), stderr);
    spawned_.clear();
    logind_.reset();
    manager_.reset();
    bus_.reset();
    dbus_.reset();
    reap_orphans();
    point_system_bus_nowhere();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    unregister_cleanup_dir(dir_);
    throw;
  }
}

node_sandbox::~node_sandbox() {
  // Processes of the node first (they may hold locks), then logind, the manager, the bus.
  for (auto& p : spawned_) p.kill_and_reap();
  spawned_.clear();
  prepare_slot_.reset();
  if (logind_) logind_->stop(std::chrono::milliseconds(2000));
  logind_.reset();
  if (manager_) manager_->stop(std::chrono::milliseconds(2000));
  manager_.reset();
  bus_.reset();
  if (dbus_) dbus_->stop(std::chrono::milliseconds(2000));
  dbus_.reset();
  reap_orphans();
  point_system_bus_nowhere();
  unregister_cleanup_dir(dir_);
  const char* keep = std::getenv("SANDBOX_KEEP");
  if (keep_dir_ || (keep && std::string_view(keep) == "1")) {
    fmt::print(stderr, "sandbox kept at {}\n", dir_.string());
  } else {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

void node_sandbox::require_private_environment() const {
  const char* v = std::getenv("DBUS_SYSTEM_BUS_ADDRESS");
  if (!v || address_ != v || !is_private_bus_address(v)) {
    // Not an exception a test could catch and carry on from.
    fmt::print(stderr, "FATAL: DBUS_SYSTEM_BUS_ADDRESS is '{}', not the sandbox's '{}'\n",
               v ? v : "(unset)", address_);
    std::abort();
  }
}

std::vector<std::string> node_sandbox::child_environment(
    const std::vector<std::string>& extra) const {
  require_private_environment();
  static constexpr std::string_view dropped[] = {"DBUS_SYSTEM_BUS_ADDRESS=",
                                                 "DBUS_SESSION_BUS_ADDRESS=",
                                                 "NOTIFY_SOCKET=",
                                                 "LISTEN_FDS=",
                                                 "LISTEN_PID=",
                                                 "LISTEN_FDNAMES=",
                                                 "WATCHDOG_USEC=",
                                                 "WATCHDOG_PID=",
                                                 "JOURNAL_STREAM=",
                                                 "INVOCATION_ID=",
                                                 "SYSTEMD_EXEC_PID="};
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string_view entry(*e);
    bool drop = false;
    for (auto d : dropped) drop = drop || entry.starts_with(d);
    if (!drop) env.emplace_back(entry);
  }
  env.push_back("DBUS_SYSTEM_BUS_ADDRESS=" + address_);
  for (const auto& x : extra) {
    if (x.starts_with("DBUS_SYSTEM_BUS_ADDRESS=") &&
        !is_private_bus_address(std::string_view(x).substr(24))) {
      throw std::logic_error("refusing a child DBUS_SYSTEM_BUS_ADDRESS that is not private: " + x);
    }
    env.push_back(x);
  }
  // getenv() returns the first match: keep only the last entry of each name, so `extra` wins.
  std::vector<std::string> result;
  for (auto it = env.rbegin(); it != env.rend(); ++it) {
    const std::string key = it->substr(0, it->find('=') + 1);
    bool seen = false;
    for (const auto& r : result) seen = seen || r.starts_with(key);
    if (!seen) result.push_back(*it);
  }
  return {result.rbegin(), result.rend()};
}

std::filesystem::path node_sandbox::log_path(const std::string& name) const {
  return dir_ / (name + ".log");
}

child_process& node_sandbox::spawn(const std::string& name, const std::vector<std::string>& argv,
                                   const std::vector<std::string>& extra_env,
                                   std::optional<user_ids> user) {
  spawn_options o;
  o.env = child_environment(extra_env);
  o.stdout_path = log_path(name);
  o.user = user;
  return spawned_.emplace_back(name, argv, o);
}

// --- configuration ------------------------------------------------------------------------------

void node_sandbox::write_configs() {
  std::filesystem::create_directories(dir_ / "etc-systemd" / "logind.conf.d");
  std::filesystem::create_directories(dir_ / "run-systemd");
  const auto socket = dir_ / "system_bus_socket";
  if (opts_.policy == bus_policy::debian_system) {
    write_file(dir_ / "dbus.conf", debian_system_bus_config(socket));
    // mkdtemp made the dir 0700: search permission for others lets them reach the socket (which
    // dbus-daemon makes 0777) by its name, and list nothing.
    std::filesystem::permissions(dir_, std::filesystem::perms::owner_all |
                                           std::filesystem::perms::group_exec |
                                           std::filesystem::perms::others_exec);
  } else {
    // Everything on the bus is ours, and logind must be able to own org.freedesktop.login1 and
    // the stand-in systemd1.
    write_file(dir_ / "dbus.conf", allow_all_bus_config(socket));
  }
  write_logind_conf();
}

void node_sandbox::write_logind_conf() {
  // Both the main file and a drop-in that sorts last: drop-ins in /usr/lib/systemd/logind.conf.d
  // (e.g. unattended-upgrades' 30 s) would otherwise override the main file. The rest keeps the
  // sandboxed logind away from the machine's VTs and buttons.
  const std::string conf = fmt::format(
      "[Login]\n"
      "InhibitDelayMaxSec={}\n"
      "NAutoVTs=0\n"
      "ReserveVT=0\n"
      "KillUserProcesses=no\n"
      "HandlePowerKey=ignore\n"
      "HandleSuspendKey=ignore\n"
      "HandleHibernateKey=ignore\n"
      "HandleLidSwitch=ignore\n"
      "HandleLidSwitchExternalPower=ignore\n"
      "HandleLidSwitchDocked=ignore\n"
      "HandleRebootKey=ignore\n"
      "IdleAction=ignore\n",
      opts_.inhibit_delay_max);
  write_file(dir_ / "etc-systemd" / "logind.conf", conf);
  write_file(dir_ / "etc-systemd" / "logind.conf.d" / opts_.logind_dropin_name, conf);
}

void node_sandbox::set_inhibit_delay_max(const std::string& value) {
  opts_.inhibit_delay_max = value;
  write_logind_conf();
}

// --- dbus-daemon --------------------------------------------------------------------------------

void node_sandbox::start_dbus() {
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) < 0) {
    throw std::runtime_error(fmt::format("pipe2: {}", std::strerror(errno)));
  }
  spawn_options o;
  o.env = child_environment();
  o.stdout_path = log_path("dbus-daemon");
  o.pass_fds = {{pipefd[1], 3}};
  try {
    dbus_ = std::make_unique<child_process>(
        "dbus-daemon",
        std::vector<std::string>{tools_.dbus_daemon, "--nofork", "--nopidfile", "--nosyslog",
                                 "--config-file=" + (dir_ / "dbus.conf").string(),
                                 "--print-address=3"},
        o);
  } catch (...) {
    close(pipefd[0]);
    close(pipefd[1]);
    throw;
  }
  close(pipefd[1]);
  // dbus-daemon prints its address once the socket listens: the readiness event.
  std::string line;
  const auto deadline = std::chrono::steady_clock::now() + opts_.startup_timeout;
  while (line.find('\n') == std::string::npos) {
    pollfd p{pipefd[0], POLLIN, 0};
    const int n = poll(&p, 1, static_cast<int>(remaining(deadline).count()));
    if (n <= 0) break;
    char buf[256];
    const ssize_t r = read(pipefd[0], buf, sizeof buf);
    if (r <= 0) break;
    line.append(buf, static_cast<std::size_t>(r));
  }
  close(pipefd[0]);
  if (line.find("unix:path=") == std::string::npos) {
    throw std::runtime_error(fmt::format("dbus-daemon did not come up (printed '{}'): {}", line,
                                         last_lines(read_text_file(log_path("dbus-daemon")), 20)));
  }
}

void node_sandbox::connect_harness_bus() {
  prepare_slot_.reset();
  bus_.reset();
  bus_ = std::make_unique<private_bus>(address_);
  // Only logind's own signals count: sender is matched against the owner of org.freedesktop.login1.
  prepare_slot_ = bus_->add_match(
      kLogin1, kLogin1Path, kLogin1Manager, "PrepareForShutdown",
      [](sd_bus_message* m, void* userdata, sd_bus_error*) -> int {
        int start = 0;
        if (sd_bus_message_read(m, "b", &start) >= 0) {
          const char* sender = sd_bus_message_get_sender(m);
          static_cast<std::vector<prepare_for_shutdown_record>*>(userdata)->push_back(
              {start != 0, sender ? sender : "", monotonic_us()});
        }
        return 0;
      },
      &prepare_signals_);
}

private_bus& node_sandbox::bus() {
  if (!bus_) throw std::logic_error("the sandbox has no bus connection");
  return *bus_;
}

void node_sandbox::restart_dbus() {
  stop_dbus();
  start_dbus_again();
}

void node_sandbox::stop_dbus() {
  if (!dbus_) throw std::logic_error("the sandbox's dbus-daemon is not running");
  prepare_slot_.reset();
  bus_.reset();
  dbus_->stop(std::chrono::milliseconds(5000));
  dbus_.reset();
  std::error_code ec;
  std::filesystem::remove(dir_ / "system_bus_socket", ec);
  // logind (252, 257 and 262 alike) neither exits nor reconnects when its bus goes away: it
  // lingers, disconnected.
  // Restarting it is what a node needs after a bus restart, so it is stopped here and started
  // again with the bus.
  logind_was_running_ = logind_ != nullptr;
  if (logind_) logind_->stop(std::chrono::milliseconds(5000));
  logind_.reset();
}

void node_sandbox::start_dbus_again() {
  if (dbus_) throw std::logic_error("the sandbox's dbus-daemon is already running");
  start_dbus();
  connect_harness_bus();
  if (manager_ && !bus_->wait_for_name(kSystemd1, opts_.startup_timeout)) {
    throw std::runtime_error("the stand-in manager did not come back after a bus restart:\n" +
                             last_lines(read_text_file(log_path("fake-systemd-manager")), 20));
  }
  if (logind_was_running_) start_logind();
}

// --- the stand-in manager ----------------------------------------------------------------------

void node_sandbox::start_manager() {
  if (tools_.fake_manager.empty()) {
    throw std::runtime_error("FAKE_SYSTEMD_MANAGER is not set and no default was built in");
  }
  spawn_options o;
  o.env = child_environment();
  o.stdout_path = log_path("fake-systemd-manager");
  manager_ = std::make_unique<child_process>(
      "fake-systemd-manager",
      std::vector<std::string>{tools_.fake_manager, "--address=" + address_}, o);
  const auto deadline = std::chrono::steady_clock::now() + opts_.startup_timeout;
  while (!bus().wait_for_name(kSystemd1, std::chrono::milliseconds(200))) {
    if (!manager_->running() || remaining(deadline).count() == 0) {
      throw std::runtime_error("the stand-in manager did not take org.freedesktop.systemd1:\n" +
                               last_lines(read_text_file(log_path("fake-systemd-manager")), 20));
    }
  }
}

void node_sandbox::stop_manager() {
  if (!manager_) return;
  manager_->stop();
  manager_.reset();
  bus().wait_for_name_gone(kSystemd1, opts_.startup_timeout);
}

// --- logind -------------------------------------------------------------------------------------

void node_sandbox::start_logind() {
  if (logind_ && logind_->running()) throw std::logic_error("logind is already running");
  spawn_options o;
  // Debug logging to stderr (there is no journal in the sandbox): it is what a failed test prints.
  o.env = child_environment({"SYSTEMD_LOG_LEVEL=debug", "SYSTEMD_LOG_TARGET=console",
                             "SYSTEMD_LOG_TIME=1", "SYSTEMD_LOG_COLOR=0"});
  o.stdout_path = log_path("systemd-logind");
  o.private_mounts = {{dir_ / "run-systemd", "/run/systemd"},
                      {dir_ / "etc-systemd", "/etc/systemd"}};
  {
    std::ofstream marker(log_path("systemd-logind"), std::ios::app);
    marker << fmt::format("===== harness: starting systemd-logind (start #{}) at {} =====\n",
                          ++logind_starts_, monotonic_us());
  }
  logind_ =
      std::make_unique<child_process>("systemd-logind", std::vector<std::string>{tools_.logind}, o);
  const auto deadline = std::chrono::steady_clock::now() + opts_.startup_timeout;
  while (!bus().wait_for_name(kLogin1, std::chrono::milliseconds(200))) {
    if (!logind_->running() || remaining(deadline).count() == 0) {
      throw std::runtime_error("systemd-logind did not take org.freedesktop.login1:\n" +
                               last_lines(read_text_file(log_path("systemd-logind")), 30));
    }
  }
  // Lets KillUnit("systemd-logind.service", ...) reach it, as systemd's would (kubelet reloads
  // logind that way).
  if (manager_) {
    bus().call(kSystemd1, kSystemd1Path, kTestInterface, "SetUnitMainPID", "su",
               "systemd-logind.service", static_cast<std::uint32_t>(logind_->pid()));
  }
}

void node_sandbox::stop_logind() {
  if (!logind_) return;
  logind_->stop(std::chrono::milliseconds(5000));
  logind_.reset();
  bus().wait_for_name_gone(kLogin1, opts_.startup_timeout);
}

void node_sandbox::restart_logind() {
  stop_logind();
  start_logind();
}

bool node_sandbox::logind_running() { return logind_ && logind_->running(); }

pid_t node_sandbox::logind_pid() const { return logind_ ? logind_->pid() : -1; }

void node_sandbox::reload_logind(std::uint64_t expected_usec) {
  if (!logind_) throw std::logic_error("logind is not running");
  logind_->signal(SIGHUP);
  if (!wait_for_inhibit_delay_max(expected_usec, opts_.startup_timeout)) {
    throw std::runtime_error(
        fmt::format("logind did not pick up InhibitDelayMaxUSec={}", expected_usec));
  }
}

bool node_sandbox::wait_for_inhibit_delay_max(std::uint64_t expected_usec,
                                              std::chrono::milliseconds timeout) {
  // The reload is asynchronous and announces nothing: a short bounded re-read is all there is.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (inhibit_delay_max_usec() != expected_usec) {
    if (remaining(deadline).count() == 0) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

std::uint64_t node_sandbox::reboot() {
  const std::uint64_t t = monotonic_us();
  bus().call(kLogin1, kLogin1Path, kLogin1Manager, "Reboot", "b", 0);
  return t;
}

std::vector<inhibitor_info> node_sandbox::list_inhibitors() {
  auto reply = bus().call(kLogin1, kLogin1Path, kLogin1Manager, "ListInhibitors", "");
  std::vector<inhibitor_info> result;
  sd_bus_message* m = reply.get();
  if (sd_bus_message_enter_container(m, 'a', "(ssssuu)") < 0) {
    throw std::runtime_error("ListInhibitors: unexpected reply");
  }
  const char *what, *who, *why, *mode;
  std::uint32_t uid, pid;
  while (sd_bus_message_read(m, "(ssssuu)", &what, &who, &why, &mode, &uid, &pid) > 0) {
    result.push_back({what, who, why, mode, uid, pid});
  }
  return result;
}

std::optional<inhibitor_info> node_sandbox::find_inhibitor(std::string_view who,
                                                           std::string_view mode) {
  for (auto& i : list_inhibitors()) {
    if (i.who == who && i.mode == mode) return i;
  }
  return std::nullopt;
}

bool node_sandbox::wait_for_inhibitor(std::string_view who, bool present,
                                      std::chrono::milliseconds timeout) {
  return wait_for_inhibitors(
      [&](const std::vector<inhibitor_info>& locks) {
        const bool found = std::any_of(locks.begin(), locks.end(), [&](const inhibitor_info& i) {
          return i.who == who && i.mode == "delay";
        });
        return found == present;
      },
      timeout);
}

bool node_sandbox::wait_for_inhibitor_of(std::string_view who, pid_t pid,
                                         std::chrono::milliseconds timeout) {
  return wait_for_inhibitors(
      [&](const std::vector<inhibitor_info>& locks) {
        return std::any_of(locks.begin(), locks.end(), [&](const inhibitor_info& i) {
          return i.who == who && i.mode == "delay" && static_cast<pid_t>(i.pid) == pid;
        });
      },
      timeout);
}

bool node_sandbox::wait_for_inhibitors(
    const std::function<bool(const std::vector<inhibitor_info>&)>& holds,
    std::chrono::milliseconds timeout) {
  struct flag {
    bool changed = false;
  } f;
  auto slot = bus().add_match(
      kLogin1, kLogin1Path, "org.freedesktop.DBus.Properties", "PropertiesChanged",
      [](sd_bus_message*, void* userdata, sd_bus_error*) -> int {
        static_cast<flag*>(userdata)->changed = true;
        return 0;
      },
      &f);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto satisfied = [&] {
    try {
      return holds(list_inhibitors());
    } catch (const bus_error&) {
      return false;  // logind restarting
    }
  };
  for (;;) {
    if (satisfied()) return true;
    const auto left = remaining(deadline);
    if (left.count() == 0) return false;
    f.changed = false;
    bus().process_until([&] { return f.changed; }, std::min(left, std::chrono::milliseconds(250)));
  }
}

bool node_sandbox::preparing_for_shutdown() {
  return bus().get_property<int>(kLogin1, kLogin1Path, kLogin1Manager, "PreparingForShutdown",
                                 'b') != 0;
}

std::uint64_t node_sandbox::inhibit_delay_max_usec() {
  return bus().get_property<std::uint64_t>(kLogin1, kLogin1Path, kLogin1Manager,
                                           "InhibitDelayMaxUSec", 't');
}

lock_fd node_sandbox::take_inhibitor(const std::string& who, const std::string& why,
                                     const std::string& what, const std::string& mode) {
  auto reply = bus().call(kLogin1, kLogin1Path, kLogin1Manager, "Inhibit", "ssss", what.c_str(),
                          who.c_str(), why.c_str(), mode.c_str());
  int fd = -1;
  if (sd_bus_message_read(reply.get(), "h", &fd) < 0 || fd < 0) {
    throw std::runtime_error("Inhibit: no descriptor in the reply");
  }
  // The reply owns its descriptor; keep a duplicate of our own.
  return lock_fd(fcntl(fd, F_DUPFD_CLOEXEC, 3));
}

void node_sandbox::emit_forged_prepare_for_shutdown(bool start) {
  private_bus forger(address_);
  const int r = sd_bus_emit_signal(forger.get(), kLogin1Path, kLogin1Manager, "PrepareForShutdown",
                                   "b", static_cast<int>(start));
  if (r < 0) {
    throw std::runtime_error(
        fmt::format("emitting a forged PrepareForShutdown: {}", std::strerror(-r)));
  }
  sd_bus_flush(forger.get());
}

std::vector<prepare_for_shutdown_record> node_sandbox::prepare_for_shutdown_signals() {
  bus().process_pending();
  return prepare_signals_;
}

bool node_sandbox::wait_for_prepare_for_shutdown(bool start, std::chrono::milliseconds timeout,
                                                 std::size_t after_index) {
  auto found = [&] {
    for (std::size_t i = after_index; i < prepare_signals_.size(); ++i) {
      if (prepare_signals_[i].start == start) return true;
    }
    return false;
  };
  return bus().process_until(found, timeout);
}

// --- the stand-in manager's test interface
// --------------------------------------------------------

void node_sandbox::set_system_state(const std::string& state) {
  bus().call(kSystemd1, kSystemd1Path, kTestInterface, "SetSystemState", "s", state.c_str());
}

std::string node_sandbox::system_state() {
  return bus().get_property_string(kSystemd1, kSystemd1Path, "org.freedesktop.systemd1.Manager",
                                   "SystemState");
}

void node_sandbox::cancel_last_job() {
  bus().call(kSystemd1, kSystemd1Path, kTestInterface, "CancelLastJob", "");
}

void node_sandbox::finish_last_job(const std::string& result) {
  bus().call(kSystemd1, kSystemd1Path, kTestInterface, "FinishLastJob", "s", result.c_str());
}

std::vector<start_unit_record> node_sandbox::start_unit_calls() {
  auto reply = bus().call(kSystemd1, kSystemd1Path, kTestInterface, "StartUnitCalls", "");
  std::vector<start_unit_record> result;
  sd_bus_message* m = reply.get();
  if (sd_bus_message_enter_container(m, 'a', "(sst)") < 0) {
    throw std::runtime_error("StartUnitCalls: unexpected reply");
  }
  const char *unit, *mode;
  std::uint64_t usec;
  while (sd_bus_message_read(m, "(sst)", &unit, &mode, &usec) > 0) {
    result.push_back({unit, mode, usec});
  }
  return result;
}

std::optional<start_unit_record> node_sandbox::wait_for_start_unit(
    const std::string& unit, std::chrono::milliseconds timeout, std::uint64_t since_us) {
  struct flag {
    bool seen = false;
  } f;
  auto slot = bus().add_match(
      kSystemd1, kSystemd1Path, kTestInterface, "StartUnitCalled",
      [](sd_bus_message*, void* userdata, sd_bus_error*) -> int {
        static_cast<flag*>(userdata)->seen = true;
        return 0;
      },
      &f);
  auto find = [&]() -> std::optional<start_unit_record> {
    for (auto& c : start_unit_calls()) {
      if (c.unit == unit && c.usec >= since_us) return c;
    }
    return std::nullopt;
  };
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (auto c = find()) return c;
    const auto left = remaining(deadline);
    if (left.count() == 0) return std::nullopt;
    f.seen = false;
    // The signal wakes us; the periodic re-check only covers a restart of the manager's bus.
    bus().process_until([&] { return f.seen; }, std::min(left, std::chrono::milliseconds(1000)));
  }
}

void node_sandbox::set_kill_on_reboot(const std::vector<pid_t>& pids) {
  call_manager_with_pids("SetKillOnReboot", pids, std::nullopt);
}

void node_sandbox::set_stop_on_reboot(const std::vector<pid_t>& pids,
                                      std::chrono::microseconds stop_timeout) {
  call_manager_with_pids("SetStopOnReboot", pids, static_cast<std::uint64_t>(stop_timeout.count()));
}

void node_sandbox::call_manager_with_pids(const std::string& method, const std::vector<pid_t>& pids,
                                          std::optional<std::uint64_t> usec) {
  sd_bus_message* raw = nullptr;
  int r = sd_bus_message_new_method_call(bus().get(), &raw, kSystemd1, kSystemd1Path,
                                         kTestInterface, method.c_str());
  if (r < 0) throw std::runtime_error(method + ": cannot build the call");
  message_ptr call(raw);
  std::vector<std::uint32_t> u(pids.begin(), pids.end());
  r = sd_bus_message_append_array(raw, 'u', u.data(), u.size() * sizeof(std::uint32_t));
  if (r >= 0 && usec) r = sd_bus_message_append(raw, "t", *usec);
  if (r < 0) throw std::runtime_error(method + ": cannot append the arguments");
  sd_bus_error error = SD_BUS_ERROR_NULL;
  sd_bus_message* reply = nullptr;
  r = sd_bus_call(bus().get(), raw, 0, &error, &reply);
  message_ptr owned(reply);
  if (r < 0) {
    std::string what = error.message ? error.message : std::strerror(-r);
    sd_bus_error_free(&error);
    throw bus_error("", method + ": " + what);
  }
}

std::vector<kill_record> node_sandbox::killed_on_reboot() {
  auto reply = bus().call(kSystemd1, kSystemd1Path, kTestInterface, "KilledOnReboot", "");
  std::vector<kill_record> result;
  sd_bus_message* m = reply.get();
  if (sd_bus_message_enter_container(m, 'a', "(ubt)") < 0) {
    throw std::runtime_error("KilledOnReboot: unexpected reply");
  }
  std::uint32_t pid;
  int alive;
  std::uint64_t usec;
  while (sd_bus_message_read(m, "(ubt)", &pid, &alive, &usec) > 0) {
    result.push_back({pid, alive != 0, usec});
  }
  return result;
}

std::vector<kill_unit_record> node_sandbox::kill_unit_calls() {
  auto reply = bus().call(kSystemd1, kSystemd1Path, kTestInterface, "KillUnitCalls", "");
  std::vector<kill_unit_record> result;
  sd_bus_message* m = reply.get();
  if (sd_bus_message_enter_container(m, 'a', "(ssit)") < 0) {
    throw std::runtime_error("KillUnitCalls: unexpected reply");
  }
  const char *unit, *who;
  std::int32_t sig;
  std::uint64_t usec;
  while (sd_bus_message_read(m, "(ssit)", &unit, &who, &sig, &usec) > 0) {
    result.push_back({unit, who, sig, usec});
  }
  return result;
}

// --- diagnostics --------------------------------------------------------------------------------

void node_sandbox::dump_logs(std::ostream& out, std::size_t max_lines) const {
  std::vector<std::filesystem::path> logs;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
    const auto& p = entry.path();
    if (p.extension() == ".log" || p.extension() == ".jsonl") logs.push_back(p);
  }
  std::sort(logs.begin(), logs.end());
  for (const auto& p : logs) {
    out << "----- " << p.string() << " (last " << max_lines << " lines) -----\n";
    out << last_lines(read_text_file(p), max_lines);
  }
  out << "----- end of sandbox logs -----\n";
}

// --- reading what the processes wrote
// ---------------------------------------------------------------

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file_atomically(const std::filesystem::path& path, const std::string& content) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  std::ofstream(tmp, std::ios::binary | std::ios::trunc) << content;
  std::filesystem::rename(tmp, path);
}

std::vector<std::string> read_lines(const std::filesystem::path& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) lines.push_back(line);
  }
  return lines;
}

std::string last_lines(const std::string& text, std::size_t max_lines) {
  std::size_t pos = text.size();
  if (pos > 0 && text[pos - 1] == '\n') --pos;
  std::size_t count = 0;
  while (pos > 0) {
    const std::size_t nl = text.rfind('\n', pos - 1);
    if (nl == std::string::npos) {
      pos = 0;
      break;
    }
    if (++count == max_lines) {
      pos = nl + 1;
      break;
    }
    pos = nl;
  }
  std::string result = text.substr(pos);
  if (!result.empty() && result.back() != '\n') result.push_back('\n');
  return result;
}

namespace {

// Position just after `"key":` (and any blanks), or npos.
std::size_t json_value_pos(std::string_view line, std::string_view key) {
  const std::string needle = fmt::format("\"{}\"", key);
  std::size_t pos = 0;
  while ((pos = line.find(needle, pos)) != std::string_view::npos) {
    std::size_t p = pos + needle.size();
    while (p < line.size() && (line[p] == ' ' || line[p] == '\t')) ++p;
    if (p < line.size() && line[p] == ':') {
      ++p;
      while (p < line.size() && (line[p] == ' ' || line[p] == '\t')) ++p;
      return p;
    }
    pos = p;
  }
  return std::string_view::npos;
}

}  // namespace

std::optional<std::string> json_string_field(std::string_view line, std::string_view key) {
  std::size_t p = json_value_pos(line, key);
  if (p == std::string_view::npos || p >= line.size() || line[p] != '"') return std::nullopt;
  std::string value;
  for (++p; p < line.size(); ++p) {
    const char c = line[p];
    if (c == '"') return value;
    if (c == '\\' && p + 1 < line.size()) {
      const char e = line[++p];
      switch (e) {
        case 'n':
          value.push_back('\n');
          break;
        case 't':
          value.push_back('\t');
          break;
        case 'r':
          value.push_back('\r');
          break;
        case 'u':  // kept escaped: tests only compare ASCII
          value += "\\u";
          break;
        default:
          value.push_back(e);
      }
    } else {
      value.push_back(c);
    }
  }
  return std::nullopt;
}

std::optional<std::uint64_t> json_uint_field(std::string_view line, std::string_view key) {
  std::size_t p = json_value_pos(line, key);
  if (p == std::string_view::npos) return std::nullopt;
  if (p < line.size() && line[p] == '"') ++p;  // tolerate a quoted number
  std::uint64_t v = 0;
  bool any = false;
  while (p < line.size() && line[p] >= '0' && line[p] <= '9') {
    v = v * 10 + static_cast<std::uint64_t>(line[p] - '0');
    any = true;
    ++p;
  }
  return any ? std::optional<std::uint64_t>(v) : std::nullopt;
}

std::vector<shim_event> read_event_log(const std::filesystem::path& path) {
  std::vector<shim_event> events;
  for (auto& line : read_lines(path)) {
    shim_event e;
    e.event = json_string_field(line, "event").value_or("");
    e.monotonic_us = json_uint_field(line, "monotonic_us").value_or(0);
    e.cause = json_string_field(line, "cause").value_or("");
    e.message = json_string_field(line, "message").value_or("");
    e.line = line;
    events.push_back(std::move(e));
  }
  return events;
}

std::vector<timed_line> read_timed_lines(const std::filesystem::path& path) {
  std::vector<timed_line> result;
  for (auto& line : read_lines(path)) {
    std::istringstream in(line);
    timed_line t;
    in >> t.word >> t.usec;
    std::getline(in >> std::ws, t.detail);
    result.push_back(std::move(t));
  }
  return result;
}

}  // namespace sandbox
