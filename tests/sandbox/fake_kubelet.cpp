// A stand-in for kubelet's graceful node shutdown (GNS) manager on a sandbox's private bus,
// faithful in what the shim meets on a node (issue 13). Modelled on Kubernetes' own source (see
// README.md, "fake_kubelet", for the version and the list of behaviours):
//  - start: reads logind's InhibitDelayMaxUSec; when it is shorter than kubelet's whole shutdown
//    (here --sigterm-delay + --grace, kubelet's periodRequested()), writes 99-kubelet.conf with
//    kubelet's exact text into --logind-conf-dir, reloads logind with
//    KillUnit("systemd-logind.service", "all", SIGHUP) and re-reads the property with kubelet's
//    backoff (100 ms, doubling, 5 reads); still too short: exits 3 with kubelet's error, without a
//    lock, as kubelet's shutdown manager fails to start;
//  - takes its delay lock: Inhibit("shutdown", "kubelet", "Kubelet needs time to handle node
//    shutdown", "delay");
//  - listens to PrepareForShutdown on /org/freedesktop/login1 from any sender (kubelet's match has
//    no sender), handling one event at a time in arrival order;
//  - PrepareForShutdown(true): after --sigterm-delay (the lower priority groups' turn), SIGTERM to
//    the target (the container's PID 1, as the runtime's StopContainer does), SIGKILL --grace later
//    if it is still alive, then closes the lock once the target has exited (kubelet's killPod
//    returns when the runtime has stopped the container, and only then is the lock released); a
//    target that exits earlier ends the wait then;
//  - PrepareForShutdown(false): takes a new lock, then closes the old one if it still holds it;
//  - --crash-after: that long after PrepareForShutdown(true) it exits at once, whatever it was
//    doing: its lock goes with the process, as a crashed or killed kubelet's does.
//
// fake_kubelet --address=unix:path=PRIVATE (--target-pid=PID | --target-pidfile=PATH)
//              [--sigterm-delay=DURATION] [--grace=DURATION] [--crash-after=DURATION]
//              [--log=PATH] [--logind-conf-dir=DIR]
//
// --log lines, "WORD monotonic_us [detail]" (sandbox::read_timed_lines): LOCK_TAKEN, WATCHING
// (the PrepareForShutdown match is in place), PREPARE_FOR_SHUTDOWN (true|false), SIGTERM (pid),
// TARGET_EXITED (pid), SIGKILL (pid), NO_TARGET (why), LOCK_RELEASED, CRASH (written just before
// the exit that releases the lock). Exit codes: 0 on SIGTERM/SIGINT; 1 bus error; 2 usage; 3
// logind's InhibitDelayMaxSec too short (kubelet's start-up failure); 4 the bus went away; 5
// --crash-after.

#include <fcntl.h>
#include <fmt/core.h>
#include <signal.h>
#include <sys/syscall.h>
#include <systemd/sd-event.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "bus_names.hpp"
#include "config/config.hpp"
#include "node_sandbox.hpp"
#include "private_bus.hpp"
#include "process.hpp"
#include "util/duration_text.hpp"

namespace {

using namespace std::chrono_literals;

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

struct options {
  std::string address;
  pid_t target_pid = 0;
  std::string target_pidfile;
  std::chrono::nanoseconds sigterm_delay{0};
  std::chrono::nanoseconds grace = 10s;
  std::optional<std::chrono::nanoseconds> crash_after;
  std::string log;
  std::string logind_conf_dir;
};

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
      } else if (auto v = value("--crash-after")) {
        o.crash_after = shim::parse_duration(*v);
      } else if (auto v = value("--log")) {
        o.log = *v;
      } else if (auto v = value("--logind-conf-dir")) {
        o.logind_conf_dir = *v;
      } else {
        return std::nullopt;
      }
    } catch (const std::exception& e) {
      fmt::print(stderr, "fake_kubelet: {}: {}\n", a, e.what());
      return std::nullopt;
    }
  }
  if (o.address.empty() || (o.target_pid > 0) == !o.target_pidfile.empty()) return std::nullopt;
  return o;
}

class kubelet {
 public:
  kubelet(options opts, sandbox::private_bus& bus, sd_event* event)
      : opts_(std::move(opts)), bus_(bus), event_(event) {}

  ~kubelet() {
    close_pidfd();
    release_lock();
    if (timer_) sd_event_source_unref(timer_);
    if (crash_timer_) sd_event_source_unref(crash_timer_);
  }

  // kubelet's managerImpl.start(): InhibitDelayMaxSec, the lock, the match. False: kubelet's
  // start-up failure (logged).
  bool start() {
    const auto requested =
        std::chrono::duration_cast<std::chrono::microseconds>(opts_.sigterm_delay + opts_.grace)
            .count();
    auto current = inhibit_delay_usec();
    if (static_cast<std::uint64_t>(requested) > current) {
      if (opts_.logind_conf_dir.empty()) {
        say(fmt::format("InhibitDelayMaxUSec {} < {} and no --logind-conf-dir to override it",
                        current, requested));
        return false;
      }
      override_inhibit_delay(requested);
      auto wait = kReloadFirstWait;
      for (int read = 1; read <= kReloadReads; ++read, wait *= 2) {
        current = inhibit_delay_usec();
        if (static_cast<std::uint64_t>(requested) <= current) break;
        if (read < kReloadReads) std::this_thread::sleep_for(wait);
      }
      if (static_cast<std::uint64_t>(requested) > current) {
        say(fmt::format(
            "node shutdown manager was timed out after {} attempts waiting for logind "
            "InhibitDelayMaxSec to update to {} (ShutdownGracePeriod), current value is {}",
            kReloadReads, shim::format_usec(static_cast<std::uint64_t>(requested)),
            shim::format_usec(current)));
        return false;
      }
    }
    acquire_lock();
    const int r = sd_bus_match_signal(bus_.get(), nullptr, nullptr, kLogin1Path, kLogin1Manager,
                                      "PrepareForShutdown", &kubelet::on_prepare, this);
    if (r < 0) throw std::runtime_error(fmt::format("AddMatch: {}", std::strerror(-r)));
    // kubelet's order: the lock, then the match. A shutdown in between goes unseen by kubelet as
    // by this stand-in, so tests wait for this line rather than for the lock alone.
    log("WATCHING", "");
    return true;
  }

 private:
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
      acquire_lock();
      next_event();
      return;
    }
    busy_ = true;
    at(opts_.sigterm_delay, &kubelet::on_sigterm_time);
  }

  static int on_sigterm_time(sd_event_source*, std::uint64_t, void* userdata) {
    auto* self = static_cast<kubelet*>(userdata);
    self->send_sigterm();
    return 0;
  }

  void send_sigterm() {
    const auto pid = target_pid();
    if (!pid) return finish();
    const int fd = static_cast<int>(syscall(SYS_pidfd_open, *pid, 0));
    if (fd < 0) {
      log("NO_TARGET", fmt::format("pid {}: {}", *pid, std::strerror(errno)));
      return finish();
    }
    pidfd_ = fd;
    signalled_pid_ = *pid;
    syscall(SYS_pidfd_send_signal, pidfd_, SIGTERM, nullptr, 0);
    log("SIGTERM", std::to_string(*pid));
    sd_event_add_io(event_, &exit_watch_, pidfd_, EPOLLIN, &kubelet::on_target_exit, this);
    at(opts_.grace, &kubelet::on_grace_over);
  }

  static int on_target_exit(sd_event_source*, int, std::uint32_t, void* userdata) {
    auto* self = static_cast<kubelet*>(userdata);
    self->log("TARGET_EXITED", std::to_string(self->signalled_pid_));
    self->finish();
    return 0;
  }

  // The runtime's StopContainer timeout: SIGKILL to what is left.
  static int on_grace_over(sd_event_source*, std::uint64_t, void* userdata) {
    auto* self = static_cast<kubelet*>(userdata);
    if (syscall(SYS_pidfd_send_signal, self->pidfd_, SIGKILL, nullptr, 0) == 0) {
      self->log("SIGKILL", std::to_string(self->signalled_pid_));
      // Its exit ends the wait (on_target_exit). Closing the lock at once, before the target was
      // gone, once let a loaded shim see the lock go first and signal the dying target
      // (ShimKubelet.ASigkillBeforeTheDrainIsReportedBeforeTheShutdown, at load 4).
      return 0;
    }
    self->finish();
    return 0;
  }

  // processShutdownEvent's deferred ReleaseInhibitLock.
  void finish() {
    close_pidfd();
    if (timer_) timer_ = sd_event_source_unref(timer_);
    release_lock();
    busy_ = false;
    next_event();
  }

  // A crash: no signal, no clean-up; the kernel closes the lock's fd with the process.
  void arm_crash() {
    const auto usec =
        std::chrono::duration_cast<std::chrono::microseconds>(*opts_.crash_after).count();
    sd_event_add_time(
        event_, &crash_timer_, CLOCK_MONOTONIC,
        sandbox::monotonic_us() + static_cast<std::uint64_t>(usec), 1,
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

  void at(std::chrono::nanoseconds after, sd_event_time_handler_t handler) {
    if (timer_) timer_ = sd_event_source_unref(timer_);
    const auto usec = std::chrono::duration_cast<std::chrono::microseconds>(after).count();
    // Accuracy 1 us: sd-event would otherwise coalesce the wake-up up to 250 ms late.
    sd_event_add_time(event_, &timer_, CLOCK_MONOTONIC,
                      sandbox::monotonic_us() + static_cast<std::uint64_t>(usec), 1, handler, this);
  }

  // kubelet's acquireInhibitLock(): the new lock first, then the old one goes.
  void acquire_lock() {
    auto reply = bus_.call(kLogin1, kLogin1Path, kLogin1Manager, "Inhibit", "ssss", kWhat, kWho,
                           kWhy, kMode);
    int fd = -1;
    if (sd_bus_message_read(reply.get(), "h", &fd) < 0 || fd < 0) {
      throw std::runtime_error("Inhibit: no descriptor in the reply");
    }
    const int mine = fcntl(fd, F_DUPFD_CLOEXEC, 3);  // the reply owns its own
    release_lock();
    lock_fd_ = mine;
    log("LOCK_TAKEN", std::to_string(lock_fd_));
  }

  void release_lock() {
    if (lock_fd_ < 0) return;
    close(lock_fd_);
    lock_fd_ = -1;
    log("LOCK_RELEASED", "");
  }

  void close_pidfd() {
    if (exit_watch_) exit_watch_ = sd_event_source_unref(exit_watch_);
    if (pidfd_ >= 0) close(pidfd_);
    pidfd_ = -1;
  }

  std::uint64_t inhibit_delay_usec() {
    return bus_.get_property<std::uint64_t>(kLogin1, kLogin1Path, kLogin1Manager,
                                            "InhibitDelayMaxUSec", 't');
  }

  // kubelet's OverrideInhibitDelay() and ReloadLogindConf().
  void override_inhibit_delay(std::int64_t usec) {
    std::filesystem::create_directories(opts_.logind_conf_dir);
    std::ofstream(std::filesystem::path(opts_.logind_conf_dir) / kKubeletDropin, std::ios::trunc)
        << fmt::format("# Kubelet logind override\n[Login]\nInhibitDelayMaxSec={:.0f}\n",
                       static_cast<double>(usec) / 1e6);
    bus_.call(kSystemd1, kSystemd1Path, kSystemd1Manager, "KillUnit", "ssi",
              "systemd-logind.service", "all", std::int32_t{SIGHUP});
    say(fmt::format("wrote {} and reloaded logind", kKubeletDropin));
  }

  void log(std::string_view word, std::string_view detail) {
    const auto line = fmt::format("{} {}{}{}\n", word, sandbox::monotonic_us(),
                                  detail.empty() ? "" : " ", detail);
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
  int lock_fd_ = -1;
  int pidfd_ = -1;
  pid_t signalled_pid_ = 0;
  sd_event_source* timer_ = nullptr;
  sd_event_source* exit_watch_ = nullptr;
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
               "usage: fake_kubelet --address=unix:path=PRIVATE (--target-pid=PID | "
               "--target-pidfile=PATH) [--sigterm-delay=DURATION] [--grace=DURATION] "
               "[--crash-after=DURATION] [--log=PATH] [--logind-conf-dir=DIR]\n");
    return 2;
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
