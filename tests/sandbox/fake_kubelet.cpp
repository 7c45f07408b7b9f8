// A stand-in for kubelet's graceful node shutdown (GNS) manager and for the static pods it runs, on
// a sandbox's private bus, faithful in what the shim meets on a node (issues 13 and 19). Modelled
// on Kubernetes 1.35's pkg/kubelet/nodeshutdown: nodeshutdown_manager_linux.go (managerImpl.start,
// acquireInhibitLock, processShutdownEvent), nodeshutdown_manager.go (podManager.killPods,
// migrateConfig, groupByPriority, periodRequested) and systemd/inhibit_linux.go (InhibitShutdown,
// ReleaseInhibitLock, MonitorShutdown, OverrideInhibitDelay, ReloadLogindConf); the runtime's stop
// on pkg/kubelet/kuberuntime/kuberuntime_container.go (killContainer: the grace override, the 2 s
// minimum) and the restarts on kuberuntime_manager.go (doBackOff) with kubelet's 10 s to 5 min
// back-off. See README.md, "fake_kubelet", for the list of behaviours and what is not modelled.
//  - start: no shutdown grace configured: no GNS at all. Else reads logind's InhibitDelayMaxUSec;
//    when it is shorter than kubelet's whole shutdown (periodRequested(), the sum of the groups'
//    grace; --sigterm-delay + --grace with one target), writes 99-kubelet.conf with kubelet's exact
//    text into --logind-conf-dir, reloads logind with KillUnit("systemd-logind.service", "all",
//    SIGHUP) and re-reads the property with kubelet's backoff (100 ms, doubling, 5 reads); still
//    too short, kubelet's shutdown manager does not start: exit 3 with one target (as before),
//    NO_GNS with pods. Then Inhibit("shutdown", "kubelet", "Kubelet needs time to handle node
//    shutdown", "delay"); refused (a shutdown runs: OperationInProgress), NO_GNS. Then the match
//    for PrepareForShutdown on /org/freedesktop/login1 from any sender (kubelet's has no sender).
//    Without GNS the stand-in takes no lock, adds no match, and only runs its pods.
//  - --pods=FILE: runs each pod's command as its child (the runtime), and starts it again when it
//    exits (restartPolicy Always): --restart-delay after the exit the first time, then after
//    kubelet's back-off, unless graceful node shutdown is killing or has killed it (kubelet sets a
//    killed pod's phase to Failed: it is never started again by this kubelet).
//  - PrepareForShutdown(true), one event at a time in arrival order: killPods walks the groups
//    lowest priority first (groupByPriority: the highest group whose priority is not above the
//    pod's; the lowest for a pod below all), skipping a group without pods. Every pod of a group
//    gets its SIGTERM together, and its SIGKILL when max(2 s, min(group grace, pod grace)) plus
//    --sigkill-lag (the runtime's) has passed and it still runs. The group's turn ends when its
//    pods are gone or its grace is over; when the last turn ends the lock is closed
//    (processShutdownEvent's deferred release), even if a SIGKILL is still due.
//  - One target (--target-pid or --target-pidfile, the container's PID 1 found when it is due):
//    the same with one group after --sigterm-delay (the lower groups' turn) whose grace is
//    --grace, which is also when the SIGKILL is due (plus --sigkill-lag); --release-after-exit
//    keeps the lock until the target has exited (how this stand-in behaved before).
//  - PrepareForShutdown(false): acquireInhibitLock, literally: a new lock, then a close of the
//    descriptor number it kept, which processShutdownEvent closed already: when the new lock got
//    that number, the new lock goes (logind drops it). The next PrepareForShutdown(true) is acted
//    on all the same, and its release closes a number that is no lock.
//  - --crash-after: that long after PrepareForShutdown(true) it exits at once, whatever it was
//    doing: its lock goes with the process, as a crashed or killed kubelet's does; its pods run on.
//
// fake_kubelet --address=unix:path=PRIVATE
//              (--target-pid=PID | --target-pidfile=PATH) [--sigterm-delay=D] [--grace=D]
//              | --pods=FILE [--group=PRIORITY:GRACE_S]... [--shutdown-grace-period=D
//                --shutdown-grace-period-critical-pods=D] [--restart-delay=D]
//              [--sigkill-lag=D] [--release-after-exit] [--crash-after=D] [--log=PATH]
//              [--logind-conf-dir=DIR]
//
// --log lines, "WORD monotonic_us [detail]" (sandbox::read_timed_lines): LOCK_TAKEN (fd), WATCHING
// (the PrepareForShutdown match is in place), NO_GNS (why), PREPARE_FOR_SHUTDOWN (true|false),
// POD_STARTED (name pid), POD_EXITED (name pid how), GROUP (priority grace pods), SIGTERM (pid,
// or name pid), TARGET_EXITED (pid), SIGKILL (pid, or name pid), NO_TARGET (why), GROUP_END
// (priority, pods-gone|timer), LOCK_RELEASED (fd), STALE_CLOSE (fd, what that number was),
// LOCK_REFUSED (error), CRASH (written just before the exit that releases the lock). Exit codes: 0
// on SIGTERM/SIGINT (its pods are killed first, so that none outlives a test); 1 bus error; 2
// usage; 3 logind's InhibitDelayMaxSec too short with one target; 4 the bus went away; 5
// --crash-after.

#include <fcntl.h>
#include <fmt/core.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <systemd/sd-event.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <list>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "bus_names.hpp"
#include "node_sandbox.hpp"
#include "private_bus.hpp"
#include "process.hpp"
#include "util/duration_text.hpp"

extern char** environ;

namespace {

using namespace std::chrono_literals;
using std::chrono::nanoseconds;

using sandbox::kLogin1;
using sandbox::kLogin1Manager;
using sandbox::kLogin1Path;
using sandbox::kSystemd1;
using sandbox::kSystemd1Manager;
using sandbox::kSystemd1Path;
// kubelet's InhibitShutdown() (pkg/kubelet/nodeshutdown/systemd/inhibit_linux.go).
constexpr const char* kWhat = "shutdown";
constexpr const char* kWho = "kubelet";
constexpr const char* kWhy = "Kubelet needs time to handle node shutdown";
constexpr const char* kMode = "delay";
constexpr const char* kKubeletDropin = "99-kubelet.conf";
// kubelet's wait.Backoff after ReloadLogindConf(): Duration 100 ms, Factor 2, Steps 5.
constexpr auto kReloadFirstWait = 100ms;
constexpr int kReloadReads = 5;
constexpr int kCrashExitCode = 5;
// migrateConfig's two groups (scheduling.DefaultPriorityWhenNoDefaultClassExists and
// scheduling.SystemCriticalPriority).
constexpr std::int64_t kDefaultPriority = 0;
constexpr std::int64_t kSystemCriticalPriority = 2'000'000'000;
// killContainer's minimumGracePeriodInSeconds, applied after the grace override.
constexpr auto kMinimumGracePeriod = 2s;
// kubelet's container restart back-off (backOffPeriod, MaxContainerBackOff); an entry older than
// twice the maximum is forgotten (flowcontrol.Backoff's hasExpired).
constexpr auto kInitialBackoff = 10s;
constexpr auto kMaxBackoff = 300s;

struct group_spec {
  std::int64_t priority = 0;
  std::int64_t grace_s = 0;  // shutdownGracePeriodSeconds
};

struct pod_spec {
  std::string name;
  std::int64_t priority = 0;
  std::int64_t grace_s = 0;  // terminationGracePeriodSeconds
  std::vector<std::string> argv;
};

struct options {
  std::string address;
  pid_t target_pid = 0;
  std::string target_pidfile;
  std::optional<nanoseconds> sigterm_delay;
  std::optional<nanoseconds> grace;
  std::string pods_file;
  std::vector<pod_spec> pods;
  std::vector<group_spec> groups;
  std::optional<nanoseconds> grace_period;
  std::optional<nanoseconds> grace_period_critical;
  nanoseconds restart_delay = 1s;
  nanoseconds sigkill_lag = 200ms;
  bool release_after_exit = false;
  std::optional<nanoseconds> crash_after;
  std::string log;
  std::string logind_conf_dir;

  bool target_mode() const { return target_pid > 0 || !target_pidfile.empty(); }
};

std::int64_t whole_seconds(nanoseconds d) {
  return std::chrono::duration_cast<std::chrono::seconds>(d).count();
}

std::uint64_t usec(nanoseconds d) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(d).count());
}

// "NAME PRIORITY GRACE_S COMMAND [ARG...]" per line, words split on blanks (no quoting); blank
// lines and lines starting with '#' are skipped.
std::vector<pod_spec> read_pods(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<pod_spec> pods;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::istringstream words(line);
    pod_spec p;
    if (!(words >> p.name) || p.name.starts_with('#')) continue;
    std::string word;
    while (words >> word) p.argv.push_back(word);
    if (p.argv.size() < 3) {
      throw std::runtime_error(
          fmt::format("{}:{}: want NAME PRIORITY GRACE_S COMMAND", path, number));
    }
    p.priority = std::stoll(p.argv[0]);
    p.grace_s = std::stoll(p.argv[1]);
    p.argv.erase(p.argv.begin(), p.argv.begin() + 2);
    if (p.grace_s < 0) throw std::runtime_error(fmt::format("{}:{}: negative grace", path, number));
    for (const auto& other : pods) {
      if (other.name == p.name) throw std::runtime_error("two pods named " + p.name);
    }
    pods.push_back(std::move(p));
  }
  return pods;
}

// migrateConfig(): shutdownGracePeriod and shutdownGracePeriodCriticalPods as two groups.
std::vector<group_spec> migrate_config(nanoseconds requested, nanoseconds critical) {
  if (requested.count() == 0 || requested < critical) return {};
  return {{kDefaultPriority, whole_seconds(requested - critical)},
          {kSystemCriticalPriority, whole_seconds(critical)}};
}

std::optional<options> parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a(argv[i]);
    const auto value = [&](std::string_view flag) -> std::optional<std::string_view> {
      if (a.size() > flag.size() && a.starts_with(flag) && a[flag.size()] == '=') {
        return a.substr(flag.size() + 1);
      }
      return std::nullopt;
    };
    try {
      if (auto v = value("--address")) {
        o.address = *v;
      } else if (auto v = value("--target-pid")) {
        o.target_pid = static_cast<pid_t>(std::stol(std::string(*v)));
      } else if (auto v = value("--target-pidfile")) {
        o.target_pidfile = *v;
      } else if (auto v = value("--sigterm-delay")) {
        o.sigterm_delay = shim::parse_duration(*v);
      } else if (auto v = value("--grace")) {
        o.grace = shim::parse_duration(*v);
      } else if (auto v = value("--pods")) {
        o.pods_file = *v;
        o.pods = read_pods(o.pods_file);
      } else if (auto v = value("--group")) {
        const auto colon = v->find(':');
        if (colon == std::string_view::npos) throw std::invalid_argument("want PRIORITY:GRACE_S");
        o.groups.push_back({std::stoll(std::string(v->substr(0, colon))),
                            std::stoll(std::string(v->substr(colon + 1)))});
      } else if (auto v = value("--shutdown-grace-period")) {
        o.grace_period = shim::parse_duration(*v);
      } else if (auto v = value("--shutdown-grace-period-critical-pods")) {
        o.grace_period_critical = shim::parse_duration(*v);
      } else if (auto v = value("--restart-delay")) {
        o.restart_delay = shim::parse_duration(*v);
      } else if (auto v = value("--sigkill-lag")) {
        o.sigkill_lag = shim::parse_duration(*v);
      } else if (a == "--release-after-exit") {
        o.release_after_exit = true;
      } else if (auto v = value("--crash-after")) {
        o.crash_after = shim::parse_duration(*v);
      } else if (auto v = value("--log")) {
        o.log = *v;
      } else if (auto v = value("--logind-conf-dir")) {
        o.logind_conf_dir = *v;
      } else {
        fmt::print(stderr, "fake_kubelet: unknown argument '{}'\n", a);
        return std::nullopt;
      }
    } catch (const std::exception& e) {
      fmt::print(stderr, "fake_kubelet: {}: {}\n", a, e.what());
      return std::nullopt;
    }
  }
  const bool pods_mode = !o.pods_file.empty();
  if (o.address.empty() || (o.target_pid > 0 && !o.target_pidfile.empty()) ||
      o.target_mode() == pods_mode) {
    return std::nullopt;
  }
  if (o.grace_period_critical && !o.grace_period) return std::nullopt;
  if (o.grace_period) {
    if (!o.groups.empty()) return std::nullopt;  // kubelet takes one form or the other
    o.groups = migrate_config(*o.grace_period, o.grace_period_critical.value_or(0s));
  }
  if (o.target_mode() ? !o.groups.empty() : (o.sigterm_delay || o.grace)) return std::nullopt;
  // kubelet sorts the groups by priority, low to high.
  std::stable_sort(o.groups.begin(), o.groups.end(), [](const group_spec& x, const group_spec& y) {
    return x.priority < y.priority;
  });
  return o;
}

bool pidfd_exited(int pidfd) {
  pollfd p{.fd = pidfd, .events = POLLIN, .revents = 0};
  return poll(&p, 1, 0) == 1;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exit {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("signal {}", WTERMSIG(status));
  return fmt::format("status {}", status);
}

class kubelet;

// A static pod and its one container (or, with one target, the process named by the flags).
struct pod {
  kubelet* owner = nullptr;
  pod_spec spec;
  bool external = false;  // the target: not started, not restarted, found when its SIGTERM is due
  pid_t pid = 0;          // 0: not running
  int pidfd = -1;
  sd_event_source* exit_watch = nullptr;
  sd_event_source* restart_timer = nullptr;
  sd_event_source* kill_timer = nullptr;
  bool killed = false;  // graceful node shutdown is killing it or has: terminal
  std::optional<nanoseconds> backoff;
  std::uint64_t backoff_updated_us = 0;
};

// One group of killPods' walk.
struct group_turn {
  group_spec spec;
  std::vector<pod*> pods;
};

class kubelet {
 public:
  kubelet(options opts, sandbox::private_bus& bus, sd_event* event)
      : opts_(std::move(opts)), bus_(bus), event_(event) {
    for (const auto& spec : opts_.pods) add_pod(spec, false);
    if (opts_.target_mode()) {
      pod_spec target;
      target.name = "target";
      add_pod(std::move(target), true);
    }
  }

  // A stopped kubelet leaves its containers running; this one kills them, so that nothing it
  // started outlives a test.
  ~kubelet() {
    for (auto& p : pods_) {
      if (!p.external && p.pid > 0) {
        kill(p.pid, SIGKILL);
        waitpid(p.pid, nullptr, 0);
      }
      forget_process(p);
      if (p.restart_timer) sd_event_source_unref(p.restart_timer);
    }
    for (const int fd : live_locks_) {
      const auto closed_at = sandbox::monotonic_us();  // before the close, as close_lock_number's
      close(fd);
      log("LOCK_RELEASED", std::to_string(fd), closed_at);
    }
    if (step_timer_) sd_event_source_unref(step_timer_);
    if (crash_timer_) sd_event_source_unref(crash_timer_);
  }

  // kubelet's managerImpl.start(), then its pods. False: kubelet's start-up failure with one
  // target (exit 3, logged).
  bool start() {
    if (opts_.target_mode() || !opts_.groups.empty()) {
      if (!start_shutdown_manager()) return false;
    } else {
      log("NO_GNS", "no shutdownGracePeriod: graceful node shutdown is off");
    }
    for (auto& p : pods_) {
      if (!p.external) start_container(p);
    }
    return true;
  }

 private:
  // False: InhibitDelayMaxSec stays too short with one target. Otherwise GNS runs, or not (NO_GNS),
  // and the pods run either way.
  bool start_shutdown_manager() {
    const auto requested = period_requested_usec();
    auto current = inhibit_delay_usec();
    if (requested > current) {
      const auto fail = [&](const std::string& why) {
        if (opts_.target_mode()) {
          say(why);
          return false;
        }
        log("NO_GNS", why);
        return true;
      };
      if (opts_.logind_conf_dir.empty()) {
        return fail(
            fmt::format("InhibitDelayMaxUSec {} < {} and no --logind-conf-dir to override it",
                        current, requested));
      }
      override_inhibit_delay(requested);
      auto wait = kReloadFirstWait;
      for (int read = 1; read <= kReloadReads; ++read, wait *= 2) {
        current = inhibit_delay_usec();
        if (requested <= current) break;
        if (read < kReloadReads) std::this_thread::sleep_for(wait);
      }
      if (requested > current) {
        return fail(fmt::format(
            "node shutdown manager was timed out after {} attempts waiting for logind "
            "InhibitDelayMaxSec to update to {} (ShutdownGracePeriod), current value is {}",
            kReloadReads, shim::format_usec(requested), shim::format_usec(current)));
      }
    }
    try {
      acquire_lock();
    } catch (const sandbox::bus_error& e) {
      // kubelet logs "Failed to start node shutdown manager" and runs on without it.
      log("NO_GNS", fmt::format("{}: {}", e.name(), e.what()));
      return true;
    }
    const int r = sd_bus_match_signal(bus_.get(), nullptr, nullptr, kLogin1Path, kLogin1Manager,
                                      "PrepareForShutdown", &kubelet::on_prepare, this);
    if (r < 0) throw std::runtime_error(fmt::format("AddMatch: {}", std::strerror(-r)));
    // kubelet's order: the lock, then the match. A shutdown in between goes unseen by kubelet as
    // by this stand-in, so tests wait for this line rather than for the lock alone.
    log("WATCHING", "");
    return true;
  }

  std::uint64_t period_requested_usec() const {
    if (opts_.target_mode()) {
      return usec(opts_.sigterm_delay.value_or(0s) + opts_.grace.value_or(10s));
    }
    std::int64_t seconds = 0;
    for (const auto& g : opts_.groups) seconds += g.grace_s;
    return static_cast<std::uint64_t>(seconds) * 1'000'000u;
  }

  // --- the pods ---------------------------------------------------------------------------------

  void add_pod(pod_spec spec, bool external) {
    auto& p = pods_.emplace_back();
    p.owner = this;
    p.spec = std::move(spec);
    p.external = external;
  }

  void start_container(pod& p) {
    std::vector<char*> argv;
    for (auto& a : p.spec.argv) argv.push_back(a.data());
    argv.push_back(nullptr);
    // The stand-in blocks SIGTERM and SIGINT for its sd-event loop; a container starts clean.
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGTERM);
    sigaddset(&defaults, SIGINT);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    pid_t pid = 0;
    const int r = posix_spawnp(&pid, argv[0], nullptr, &attr, argv.data(), environ);
    posix_spawnattr_destroy(&attr);
    if (r != 0) {
      log("POD_EXITED", fmt::format("{} 0 not started: {}", p.spec.name, std::strerror(r)));
      return schedule_restart(p);
    }
    watch(p, pid, static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
    log("POD_STARTED", fmt::format("{} {}", p.spec.name, pid));
  }

  void watch(pod& p, pid_t pid, int pidfd) {
    p.pid = pid;
    p.pidfd = pidfd;
    sd_event_add_io(event_, &p.exit_watch, p.pidfd, EPOLLIN, &kubelet::on_exit, &p);
  }

  void forget_process(pod& p) {
    if (p.exit_watch) p.exit_watch = sd_event_source_unref(p.exit_watch);
    if (p.kill_timer) p.kill_timer = sd_event_source_unref(p.kill_timer);
    if (p.pidfd >= 0) close(p.pidfd);
    p.pidfd = -1;
    p.pid = 0;
  }

  static int on_exit(sd_event_source*, int, std::uint32_t, void* userdata) {
    auto& p = *static_cast<pod*>(userdata);
    auto& self = *p.owner;
    if (p.external) {
      self.log("TARGET_EXITED", std::to_string(p.pid));
    } else {
      int status = 0;
      waitpid(p.pid, &status, 0);
      self.log("POD_EXITED", fmt::format("{} {} {}", p.spec.name, p.pid, describe_status(status)));
    }
    self.forget_process(p);
    if (p.killed) {
      self.turn_progress();
    } else {
      self.schedule_restart(p);
    }
    return 0;
  }

  // kuberuntime's doBackOff: the first restart as soon as kubelet notices (--restart-delay), then
  // not before the back-off since the exit, which doubles at each restart up to 5 minutes and is
  // forgotten once 10 minutes pass without one.
  void schedule_restart(pod& p) {
    if (p.external || p.killed) return;
    const auto now = sandbox::monotonic_us();
    if (p.backoff && now - p.backoff_updated_us > 2 * usec(kMaxBackoff)) p.backoff.reset();
    const nanoseconds delay =
        p.backoff ? std::max(opts_.restart_delay, *p.backoff) : opts_.restart_delay;
    p.restart_timer = at(delay, &kubelet::on_restart_time, &p);
  }

  static int on_restart_time(sd_event_source*, std::uint64_t, void* userdata) {
    auto& p = *static_cast<pod*>(userdata);
    p.restart_timer = sd_event_source_unref(p.restart_timer);
    p.backoff = p.backoff ? std::min(*p.backoff * 2, nanoseconds(kMaxBackoff))
                          : nanoseconds(kInitialBackoff);
    p.backoff_updated_us = sandbox::monotonic_us();
    p.owner->start_container(p);
    return 0;
  }

  // --- the shutdown ------------------------------------------------------------------------------

  static int on_prepare(sd_bus_message* m, void* userdata, sd_bus_error*) {
    int start = 0;
    if (sd_bus_message_read(m, "b", &start) < 0) return 0;  // kubelet logs and ignores it
    auto* self = static_cast<kubelet*>(userdata);
    self->log("PREPARE_FOR_SHUTDOWN", start ? "true" : "false");
    if (start && self->opts_.crash_after && !self->crash_timer_) self->arm_crash();
    self->pending_.push_back(start != 0);
    if (!self->busy_) self->next_event();
    return 0;
  }

  // kubelet's event loop handles one event at a time: a shutdown in progress runs to its end
  // (processShutdownEvent returns) before the next event is looked at.
  void next_event() {
    if (pending_.empty()) return;
    const bool start = pending_.front();
    pending_.pop_front();
    if (!start) {
      try {
        acquire_lock();
      } catch (const sandbox::bus_error& e) {
        log("LOCK_REFUSED", fmt::format("{}: {}", e.name(), e.what()));  // kubelet ignores it
      }
      next_event();
      return;
    }
    busy_ = true;
    // With one target, --sigterm-delay stands for the lower groups' turns.
    step_timer_ = at(opts_.sigterm_delay.value_or(0s), &kubelet::on_kill_pods, this);
  }

  static int on_kill_pods(sd_event_source*, std::uint64_t, void* userdata) {
    auto* self = static_cast<kubelet*>(userdata);
    self->step_timer_ = sd_event_source_unref(self->step_timer_);
    self->turns_ = self->group_by_priority();
    self->turn_ = 0;
    self->next_turn();
    return 0;
  }

  // groupByPriority() over the active pods (not the ones killed at an earlier shutdown).
  std::vector<group_turn> group_by_priority() {
    if (opts_.target_mode()) {
      pods_.back().killed = false;  // whatever runs under the target's name now
      return {{{.priority = 0, .grace_s = whole_seconds(*opts_.grace)}, {&pods_.back()}}};
    }
    std::vector<group_turn> turns;
    for (const auto& g : opts_.groups) turns.push_back({g, {}});
    for (auto& p : pods_) {
      if (p.killed) continue;
      auto index =
          static_cast<std::size_t>(std::lower_bound(turns.begin(), turns.end(), p.spec.priority,
                                                    [](const group_turn& t, std::int64_t v) {
                                                      return t.spec.priority < v;
                                                    }) -
                                   turns.begin());
      if (index == turns.size()) {
        index = turns.size() - 1;
      } else if (index > 0 && turns[index].spec.priority > p.spec.priority) {
        --index;
      }
      turns[index].pods.push_back(&p);
    }
    return turns;
  }

  // killPods: the next group with pods gets its turn; after the last, the lock is released.
  void next_turn() {
    while (turn_ < turns_.size() && turns_[turn_].pods.empty()) ++turn_;
    if (turn_ == turns_.size()) return finish_shutdown();
    const auto& turn = turns_[turn_];
    std::string names;
    for (const auto* p : turn.pods) names += (names.empty() ? "" : ",") + p->spec.name;
    const auto grace =
        opts_.target_mode() ? *opts_.grace : nanoseconds(std::chrono::seconds(turn.spec.grace_s));
    log("GROUP", fmt::format("priority={} grace={} pods={}", turn.spec.priority,
                             shim::format_usec(usec(grace)), names));
    for (auto* p : turn.pods) kill_pod(*p, turn);
    // The group's timer; --release-after-exit waits for its pods instead.
    if (!opts_.release_after_exit) step_timer_ = at(grace, &kubelet::on_turn_timer, this);
    turn_progress();
  }

  // killPodFunc with the grace override: SIGTERM now, SIGKILL when the runtime's timeout is over.
  void kill_pod(pod& p, const group_turn& turn) {
    p.killed = true;
    if (p.restart_timer) p.restart_timer = sd_event_source_unref(p.restart_timer);
    nanoseconds kill_after;
    if (p.external) {
      const auto pid = target_pid();
      if (!pid) return;
      const int fd = static_cast<int>(syscall(SYS_pidfd_open, *pid, 0));
      if (fd < 0) {
        log("NO_TARGET", fmt::format("pid {}: {}", *pid, std::strerror(errno)));
        return;
      }
      watch(p, *pid, fd);
      kill_after = *opts_.grace;
    } else {
      if (p.pid == 0) {
        log("NO_TARGET", p.spec.name + " is not running (between restarts)");
        return;
      }
      const std::int64_t seconds = std::min(turn.spec.grace_s, p.spec.grace_s);
      kill_after =
          std::max(nanoseconds(std::chrono::seconds(seconds)), nanoseconds(kMinimumGracePeriod));
    }
    // Logged before it is sent: a test that sees the process gone finds the line.
    log("SIGTERM", who(p));
    syscall(SYS_pidfd_send_signal, p.pidfd, SIGTERM, nullptr, 0);
    p.kill_timer = at(kill_after + opts_.sigkill_lag, &kubelet::on_kill_time, &p);
  }

  static int on_kill_time(sd_event_source*, std::uint64_t, void* userdata) {
    auto& p = *static_cast<pod*>(userdata);
    p.kill_timer = sd_event_source_unref(p.kill_timer);
    if (p.pidfd < 0 || pidfd_exited(p.pidfd)) return 0;  // its exit is being reported
    p.owner->log("SIGKILL", p.owner->who(p));
    syscall(SYS_pidfd_send_signal, p.pidfd, SIGKILL, nullptr, 0);
    return 0;
  }

  // The turn ends early once every pod of the group is gone.
  void turn_progress() {
    if (!busy_ || turn_ >= turns_.size()) return;
    for (const auto* p : turns_[turn_].pods) {
      if (p->pid != 0) return;
    }
    end_turn("pods-gone");
  }

  static int on_turn_timer(sd_event_source*, std::uint64_t, void* userdata) {
    auto* self = static_cast<kubelet*>(userdata);
    self->end_turn("timer");
    return 0;
  }

  void end_turn(std::string_view why) {
    if (step_timer_) step_timer_ = sd_event_source_unref(step_timer_);
    log("GROUP_END", fmt::format("priority={} {}", turns_[turn_].spec.priority, why));
    ++turn_;
    next_turn();
  }

  // processShutdownEvent's deferred ReleaseInhibitLock(m.inhibitLock), then the next event.
  void finish_shutdown() {
    turns_.clear();
    close_lock_number(lock_number_, -1);
    busy_ = false;
    next_event();
  }

  std::string who(const pod& p) const {
    return p.external ? std::to_string(p.pid) : fmt::format("{} {}", p.spec.name, p.pid);
  }

  // A crash: no signal, no clean-up; the kernel closes the lock's fd with the process.
  void arm_crash() {
    crash_timer_ = at(
        *opts_.crash_after,
        [](sd_event_source*, std::uint64_t, void* userdata) {
          static_cast<kubelet*>(userdata)->log("CRASH", fmt::format("exit {}", kCrashExitCode));
          _exit(kCrashExitCode);
          return 0;
        },
        this);
  }

  std::optional<pid_t> target_pid() {
    if (opts_.target_pid > 0) return opts_.target_pid;
    std::ifstream in(opts_.target_pidfile);
    long pid = 0;
    if (!(in >> pid) || pid <= 0) {
      log("NO_TARGET", "no PID in " + opts_.target_pidfile);
      return std::nullopt;
    }
    return static_cast<pid_t>(pid);
  }

  sd_event_source* at(nanoseconds after, sd_event_time_handler_t handler, void* userdata) {
    sd_event_source* source = nullptr;
    // Accuracy 1 us: sd-event would otherwise coalesce the wake-up up to 250 ms late.
    sd_event_add_time(event_, &source, CLOCK_MONOTONIC, sandbox::monotonic_us() + usec(after), 1,
                      handler, userdata);
    return source;
  }

  // --- the lock ----------------------------------------------------------------------------------

  // kubelet's acquireInhibitLock(): a new lock, then ReleaseInhibitLock of the number it kept
  // (processShutdownEvent closed that one and left the number in m.inhibitLock).
  void acquire_lock() {
    auto reply = bus_.call(kLogin1, kLogin1Path, kLogin1Manager, "Inhibit", "ssss", kWhat, kWho,
                           kWhy, kMode);
    int fd = -1;
    if (sd_bus_message_read(reply.get(), "h", &fd) < 0 || fd < 0) {
      throw std::runtime_error("Inhibit: no descriptor in the reply");
    }
    // godbus keeps the descriptor at the number recvmsg gave it, the lowest free one; sd-bus's
    // reply owns that one, so the lock is moved back to the same number once the reply is gone.
    const int number = fd;
    const int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    reply.reset();
    if (moved < 0 || dup3(moved, number, O_CLOEXEC) < 0) {
      throw std::runtime_error(
          fmt::format("Inhibit: keeping fd {}: {}", number, std::strerror(errno)));
    }
    close(moved);
    live_locks_.insert(number);
    log("LOCK_TAKEN", std::to_string(number));
    if (lock_number_ != 0) close_lock_number(lock_number_, number);
    lock_number_ = number;
  }

  // ReleaseInhibitLock(): close(number), whatever that number is now.
  void close_lock_number(int number, int newest) {
    if (live_locks_.erase(number) > 0) {
      // Stamped before the close: logind may start the reboot before this process runs again
      // (StandInKubelet.TwoGroupsStopEtcdWithTheApiserverAndReleaseAtTheLastTimer, under ASan and
      // load, saw StartUnit 118 us before a stamp taken after the close).
      const auto closed_at = sandbox::monotonic_us();
      close(number);
      if (number == newest) {
        log("STALE_CLOSE", fmt::format("{} the new lock", number), closed_at);
      } else {
        log("LOCK_RELEASED", std::to_string(number), closed_at);
      }
    } else if (fcntl(number, F_GETFD) >= 0) {
      // kubelet would close it; the stand-in keeps its own descriptor working.
      log("STALE_CLOSE", fmt::format("{} another descriptor, left open", number));
    } else {
      log("STALE_CLOSE", fmt::format("{} EBADF", number));
    }
  }

  std::uint64_t inhibit_delay_usec() {
    return bus_.get_property<std::uint64_t>(kLogin1, kLogin1Path, kLogin1Manager,
                                            "InhibitDelayMaxUSec", 't');
  }

  // kubelet's OverrideInhibitDelay() and ReloadLogindConf().
  void override_inhibit_delay(std::uint64_t requested_usec) {
    std::filesystem::create_directories(opts_.logind_conf_dir);
    std::ofstream(std::filesystem::path(opts_.logind_conf_dir) / kKubeletDropin, std::ios::trunc)
        << fmt::format("# Kubelet logind override\n[Login]\nInhibitDelayMaxSec={:.0f}\n",
                       static_cast<double>(requested_usec) / 1e6);
    bus_.call(kSystemd1, kSystemd1Path, kSystemd1Manager, "KillUnit", "ssi",
              "systemd-logind.service", "all", std::int32_t{SIGHUP});
    say(fmt::format("wrote {} and reloaded logind", kKubeletDropin));
  }

  void log(std::string_view word, std::string_view detail,
           std::uint64_t at = sandbox::monotonic_us()) {
    const auto line = fmt::format("{} {}{}{}\n", word, at, detail.empty() ? "" : " ", detail);
    say(line.substr(0, line.size() - 1));
    if (opts_.log.empty()) return;
    std::ofstream(opts_.log, std::ios::app) << line;
  }

  static void say(std::string_view text) {
    fmt::print(stderr, "fake-kubelet[{}] {}\n", getpid(), text);
    std::fflush(stderr);
  }

  options opts_;
  sandbox::private_bus& bus_;
  sd_event* event_;
  std::list<pod> pods_;  // the target, with one, is the last
  int lock_number_ = 0;  // m.inhibitLock: the number of the last lock taken, kept after its close
  std::set<int> live_locks_;
  std::vector<group_turn> turns_;
  std::size_t turn_ = 0;
  sd_event_source* step_timer_ = nullptr;  // --sigterm-delay, then the current group's timer
  sd_event_source* crash_timer_ = nullptr;
  std::deque<bool> pending_;
  bool busy_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  sandbox::point_system_bus_nowhere();
  auto opts = parse(argc, argv);
  if (!opts) {
    fmt::print(stderr,
               "usage: fake_kubelet --address=unix:path=PRIVATE\n"
               "         (--target-pid=PID | --target-pidfile=PATH) [--sigterm-delay=D] "
               "[--grace=D]\n"
               "         | --pods=FILE [--group=PRIORITY:GRACE_S]... [--shutdown-grace-period=D\n"
               "           [--shutdown-grace-period-critical-pods=D]] [--restart-delay=D]\n"
               "         [--sigkill-lag=D] [--release-after-exit] [--crash-after=D] [--log=P]\n"
               "         [--logind-conf-dir=DIR]\n");
    return 2;
  }
  if (opts->target_mode()) {
    opts->sigterm_delay = opts->sigterm_delay.value_or(0s);
    opts->grace = opts->grace.value_or(10s);
  }
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  sigprocmask(SIG_BLOCK, &mask, nullptr);

  sd_event* event = nullptr;
  if (sd_event_new(&event) < 0) return 1;
  sd_event_add_signal(event, nullptr, SIGTERM, nullptr, nullptr);  // default handler: exit 0
  sd_event_add_signal(event, nullptr, SIGINT, nullptr, nullptr);
  int code = 0;
  try {
    sandbox::private_bus bus(opts->address);  // refuses anything but a private socket
    sd_bus_attach_event(bus.get(), event, SD_EVENT_PRIORITY_NORMAL);
    sd_bus_set_exit_on_disconnect(bus.get(), 1);
    {
      kubelet k(*opts, bus, event);
      if (!k.start()) {
        code = 3;
      } else {
        const int r = sd_event_loop(event);
        // sd-bus ends the loop with a non-zero code when the connection closes.
        code = r == 0 ? 0 : 4;
      }
    }
    sd_bus_detach_event(bus.get());
  } catch (const std::exception& e) {
    fmt::print(stderr, "fake_kubelet: {}\n", e.what());
    code = 1;
  }
  sd_event_unref(event);
  return code;
}
