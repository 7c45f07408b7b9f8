#include "shutdown_shim.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <string_view>
#include <vector>

#include "boot_id.hpp"
#include "small_file.hpp"

namespace shim {

namespace asio = boost::asio;

namespace {

shutdown_sequence::settings sequence_settings(const config& cfg) {
  using d = shutdown_sequence::duration;
  return {.drain_delay = std::chrono::duration_cast<d>(cfg.drain_delay),
          .signal_delay = std::chrono::duration_cast<d>(cfg.signal_delay),
          .exit_timeout = std::chrono::duration_cast<d>(cfg.exit_timeout),
          .has_target = cfg.target.any(),
          .wrapper = cfg.target.wrapper()};
}

// The flag, else systemd's RuntimeDirectory= (the first, if it lists several), else /run's.
std::string state_directory(const config& cfg) {
  if (!cfg.state_dir.empty()) return cfg.state_dir;
  if (const char* runtime = std::getenv("RUNTIME_DIRECTORY"); runtime && *runtime == '/') {
    const std::string_view dirs(runtime);
    return std::string(dirs.substr(0, dirs.find(':')));
  }
  return std::string(kDefaultStateDir);
}

std::int64_t monotonic_us(shutdown_sequence::time_point t) {
  // steady_clock is CLOCK_MONOTONIC, the clock of the event log's monotonic_us.
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

// Signals whose default action would kill the shim, apart from the two that start the shutdown
// sequence and those that report its own faults (SIGSEGV and the like must still kill it).
// logrotate's `kill -HUP` or a stray SIGUSR1 once cut a hold short (faults suite).
// A wrapper passes these on to its child, as a container's init does (and as it did before).
std::vector<int> passed_on_signals() {
  std::vector<int> signals = {SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGPWR, SIGWINCH};
  for (int s = SIGRTMIN; s <= SIGRTMAX; ++s) signals.push_back(s);
  return signals;
}
// These speak of the receiving process's own limits and profiling: never passed on (Go programs
// such as kube-apiserver crash on SIGSYS), only logged.
constexpr int kOwnSignals[] = {SIGXCPU, SIGXFSZ, SIGVTALRM, SIGPROF, SIGSYS};

// A process's name for the target check's lines ("kube-apiserver"); empty when it is gone.
std::string process_name(pid_t pid) {
  auto comm = read_small_file(fmt::format("/proc/{}/comm", pid), kMaxProcFileBytes);
  if (!comm) return {};
  std::string& name = comm.value();
  if (!name.empty() && name.back() == '\n') name.pop_back();
  return std::move(name);
}

// A wrapped child's exit code (the shell convention: 128 + signal when killed) in words.
std::string describe_exit_code(int code) {
  if (code > 128 && code - 128 < NSIG) {
    return fmt::format("killed by {} (exit code {})", signal_name(code - 128), code);
  }
  return fmt::format("exit code {}", code);
}

std::string wall_now() { return format_wall_time(std::chrono::system_clock::now()); }

}  // namespace

shutdown_shim::shutdown_shim(asio::io_context& io, const config& cfg, logger& log,
                             event_recorder& events)
    : io_(io),
      cfg_(cfg),
      log_(log),
      events_(events),
      runner_(sequence_settings(cfg), {.carry_out = [this](const seq::action& a) { carry_out(a); },
                                       .settled = [this] { settled(); }}),
      server_(io, status_),
      watcher_(io),
      // The record protects attach-mode targets; a wrapper's child is new with every run.
      record_(cfg.target.wrapper() ? std::string() : state_directory(cfg)),
      triggers_(io),
      strays_(io),
      hold_timer_(io),
      target_timer_(io),
      watchdog_timer_(io) {
  status_.drain_delay = cfg.drain_delay;
  status_.hold_needed = cfg.drain_delay + cfg.exit_timeout;
  status_.log = &log;
  status_.events = &events;
  if (cfg.inhibit == inhibit_mode::off) status_.inhibitor = shim_status::inhibitor_state::disabled;
  status_.target.configured = cfg.target.any();
  status_.target.detail = cfg.target.wrapper() ? "the command has not been started yet"
                                               : "not found yet: " + target_description();
  status_.kubelet = kubelet_outlook({.wrapper = cfg.target.wrapper(),
                                     .drain_delay = cfg.drain_delay,
                                     .hold_needed = status_.hold_needed,
                                     .config_given = !cfg.kubelet_config.empty(),
                                     .manifest_given = !cfg.static_pod_manifest.empty()});
}

shutdown_shim::~shutdown_shim() = default;

// The wrapped command's name, as the target check's lines show it: "kube-apiserver".
std::string shutdown_shim::child_name() const {
  return std::filesystem::path(cfg_.target.command.front()).filename().string();
}

std::string shutdown_shim::target_description() const {
  const auto& t = cfg_.target;
  if (t.pid) return fmt::format("pid {}", *t.pid);
  if (!t.pidfile.empty()) return "pidfile " + t.pidfile;
  if (!t.name.empty()) return "processes named " + t.name;
  if (t.wrapper()) return "child " + t.command.front();
  return "none";
}

void shutdown_shim::start() {
  // Signals first, so that a SIGTERM during start-up already runs the sequence.
  install_signal_handlers();
  start_watchdog();

  server_.listen(cfg_.listen);
  status_.listener_bound = true;
  events_.record(event_kind::Started, "start", "shutdown-shim started",
                 {{"version", SHUTDOWN_SHIM_VERSION},
                  {"listen", format_listen_addresses(cfg_.listen)},
                  {"target", target_description()},
                  {"signal", signal_name(cfg_.signal)},
                  {"drain_delay", format_duration(cfg_.drain_delay)},
                  {"signal_delay", format_duration(cfg_.signal_delay)},
                  {"exit_timeout", format_duration(cfg_.exit_timeout)},
                  {"upstream", cfg_.upstream.enabled() ? cfg_.upstream.url.text() : "none"}});
  record_previous_shutdown();

  if (auto loaded = record_.load(); !loaded) {
    log_.warning("ignoring the record of signalled processes; a restart mid-hold may signal again",
                 {{"error", loaded.error()}});
  } else {
    shutdown_ = loaded.value();
    resumable_ = shutdown_.unready_us.has_value();
    if (!shutdown_.signalled.empty()) {
      log_.notice("an earlier run signalled processes that still run; they get no second signal",
                  {{"record", record_.file().string()}});
    }
  }
  // Only now: what the record says was signalled never counts as the target. At once, so that a
  // target already running counts before the lock is taken and READY=1 is sent (ShimNotify).
  if (attach_target()) watch_for_target();
  if (cfg_.upstream.enabled()) start_upstream();
  // Without the flags there is nothing to read until kubelet's lock shows (on_delay_locks).
  if (!cfg_.kubelet_config.empty() || !cfg_.static_pod_manifest.empty()) {
    read_kubelet_files();
    kubelet_changed();
  }

  if (cfg_.inhibit == inhibit_mode::off) {
    start_child();
    on_first_attempt(result<>::success());
    return;
  }
  // With --inhibit=required the command starts only once the lock is held, so that a failed start
  // leaves nothing running.
  if (cfg_.inhibit == inhibit_mode::automatic) start_child();
  start_bus();
}

// Once, before the loop runs: one streamed pass over the event log, during which nothing is
// answered and the lock is not asked for yet. A 100 MB log (384,978 records, 1,254 boots, in the
// page cache) cost 222-349 ms between the Started and PreviousShutdown records, 3 runs on a
// shared 2-core machine. Run on the loop later, it would hold up probes as long.
void shutdown_shim::record_previous_shutdown() {
  if (cfg_.event_log.empty()) return;
  const std::string boot = current_boot_id();
  if (boot.empty()) {
    log_.warning("this boot's id is unreadable: the previous shutdown is not looked for");
    return;
  }
  auto read = previous_shutdown::read(cfg_.event_log, boot);
  if (!read) {
    log_.warning("cannot read the event log for the previous shutdown", {{"error", read.error()}});
    return;
  }
  status_.previous = read.value();
  if (!status_.previous) return;
  events_.record(event_kind::PreviousShutdown, to_string(status_.previous->verdict),
                 "the last shutdown of an earlier boot: " + status_.previous->summary(),
                 status_.previous->fields());
}

void shutdown_shim::start_bus() {
  const auto why = fmt::format(
      "Keeping the reboot until kube-apiserver has left the load balancer (drain {}, up to {})",
      format_duration(cfg_.drain_delay), format_duration(cfg_.drain_delay + cfg_.exit_timeout));
  inhibitor_ = std::make_unique<logind_inhibitor>(
      io_, log_, why,
      logind_inhibitor::handlers{
          .prepare_for_shutdown =
              [this](bool active, const std::string& cause) {
                on_prepare_for_shutdown(active, cause);
              },
          .preparing_read = [this](bool preparing) { on_preparing_read(preparing); },
          .lock_changed = [this](logind_inhibitor::lock_state state,
                                 const std::string& detail) { on_lock_changed(state, detail); },
          .first_attempt_done = [this](const result<>& outcome) { on_first_attempt(outcome); },
          .inhibit_delay_read = [this](std::uint64_t usec) { on_inhibit_delay(usec); },
          .delay_locks_listed =
              [this](const std::vector<logind_inhibitor::listed_lock>& locks) {
                on_delay_locks(locks);
              },
      });
  manager_ = std::make_unique<systemd_manager>(io_);
  if (cfg_.ensure_inhibit_delay != ensure_mode::off) {
    ensurer_ = std::make_unique<inhibit_delay_ensurer>(
        io_, log_, events_, cfg_,
        inhibit_delay_ensurer::bus_calls{
            .reload_logind = [this](auto done) { manager_->reload_logind(std::move(done)); },
            // What it reads is what logind now says: shown as such.
            .read_inhibit_delay =
                [this](auto done) {
                  inhibitor_->read_inhibit_delay(
                      [this, done = std::move(done)](const result<std::uint64_t>& usec) {
                        if (usec) {
                          status_.logind_delay_max_usec = usec.value();
                          notify_status();
                        }
                        done(usec);
                      });
                },
        },
        inhibit_delay_ensurer::handlers{
            .progress =
                [this](const std::string& text) {
                  status_.logind_delay_ensure = text;
                  notify_status();
                },
            .finished =
                [this](const result<>& outcome) {
                  if (!outcome && cfg_.ensure_inhibit_delay == ensure_mode::required) {
                    finish({shim_outcome::kind::ensure_failed, 0, outcome.error()});
                  }
                },
        });
  }
  bus_ = std::make_unique<bus_link>(
      io_,
      bus_link::handlers{
          .connected =
              [this](bus_connection& bus) {
                if (bus_was_lost_) {
                  bus_was_lost_ = false;
                  events_.record(event_kind::BusRestored, "reconnected", "the system bus is back");
                }
                manager_->connected(bus);
                inhibitor_->connected(bus);
              },
          .lost = [this](const std::string& why) { on_bus_lost(why); },
          .retrying =
              [this](const std::string& why, std::chrono::milliseconds delay) {
                log_.info(
                    fmt::format("connecting to the system bus again in {}", format_duration(delay)),
                    {{"why", why}});
                if (!first_attempt_done_) on_first_attempt(result<>::failure(why));
              },
      });
  bus_->start();
}

void shutdown_shim::on_bus_lost(const std::string& why) {
  bus_was_lost_ = true;
  events_.record(event_kind::BusLost, why, "lost the system bus; keeping the lock fd, reconnecting",
                 {{"lock_held", inhibitor_->held() ? "true" : "false"}});
  manager_->lost();
  inhibitor_->lost(why);
}

void shutdown_shim::start_child() {
  if (!cfg_.target.wrapper() || child_) return;
  child_ = std::make_unique<child_process>(io_, cfg_.target.command);
  log_.info("started the command",
            {{"pid", std::to_string(child_->pid())}, {"command", cfg_.target.command.front()}});
  child_->on_exit([this](int code) { on_child_exit(code); });
  status_.target.running = true;
  status_.target.detail = fmt::format("{} (pid {})", child_name(), child_->pid());
  events_.record(event_kind::TargetRunning, "child",
                 "the target is running: " + status_.target.detail,
                 {{"target_pid", std::to_string(child_->pid())}});
  notify_status();
}

void shutdown_shim::install_signal_handlers() {
  triggers_.add(SIGTERM);
  triggers_.add(SIGINT);
  wait_for_triggers();
  for (int s : passed_on_signals()) strays_.add(s);
  for (int s : kOwnSignals) strays_.add(s);
  // As PID 1 (a container's init) every orphan is ours to reap.
  if (cfg_.target.wrapper() && getpid() == 1) strays_.add(SIGCHLD);
  wait_for_strays();
  // Job control must never stop the shim mid-hold; the child gets the default back at exec.
  for (int s : {SIGTSTP, SIGTTIN, SIGTTOU}) ::signal(s, SIG_IGN);
}

void shutdown_shim::wait_for_triggers() {
  triggers_.async_wait([this](const boost::system::error_code& ec, int signal) {
    if (ec) return;
    on_trigger_signal(signal);
    wait_for_triggers();
  });
}

void shutdown_shim::wait_for_strays() {
  strays_.async_wait([this](const boost::system::error_code& ec, int signal) {
    if (ec) return;
    on_stray_signal(signal);
    wait_for_strays();
  });
}

void shutdown_shim::on_stray_signal(int signal) {
  if (signal == SIGCHLD) {
    if (child_) child_->reap_all();
    return;
  }
  if (signal == SIGHUP) {
    // logrotate's convention: the event log is opened again at its path; nothing else changes.
    // A failure is logged there, and the old file is kept.
    events_.reopen();
  }
  const bool own =
      std::find(std::begin(kOwnSignals), std::end(kOwnSignals), signal) != std::end(kOwnSignals);
  if (child_ && child_->running() && !own) {
    log_.info("passing a signal on to the child", {{"signal", signal_name(signal)}});
    child_->send_signal(signal);
  } else if (signal != SIGHUP && signal != SIGWINCH) {
    log_.notice("ignoring a signal", {{"signal", signal_name(signal)}});
  }
}

void shutdown_shim::on_trigger_signal(int signal) {
  const auto kind = signal == SIGINT ? seq::trigger_kind::sigint : seq::trigger_kind::sigterm;
  const std::string cause = signal_name(signal);
  const auto forwarding =
      seq::sigterm_forwarding(cfg_.forward_on_sigterm, cfg_.target.wrapper(), bus_ != nullptr);
  log_.notice("received " + cause, {{"forward", forwarding.why}});
  runner_.feed([now = clock::now(), kind, cause, decision = forwarding.decision](seq& s) {
    return s.trigger(now, kind, cause, decision);
  });
}

void shutdown_shim::on_prepare_for_shutdown(bool active, const std::string& cause) {
  if (!active) return runner_.feed([cause](seq& s) { return s.cancel(cause); });
  // What the shim knows of kubelet at this moment decides; kubelet_changed() logged it already.
  const auto decision = status_.kubelet.leaves_signal_to_kubelet()
                            ? seq::forward_decision::kubelet_signals
                            : seq::forward_decision::forward;
  runner_.feed([now = clock::now(), cause, decision](seq& s) {
    return s.trigger(now, seq::trigger_kind::prepare_for_shutdown, cause, decision);
  });
}

// kubelet reads its config and takes its lock when it starts, so the files are read again whenever
// its lock is taken anew: what they say then is what that kubelet runs with.
void shutdown_shim::read_kubelet_files() {
  const auto files =
      shim::read_kubelet_files(cfg_.kubelet_config, cfg_.static_pod_manifest, cfg_.logind_conf_dir);
  status_.kubelet.set_files(files.config, files.manifest, files.dropin_usec);
}

void shutdown_shim::on_delay_locks(const std::vector<logind_inhibitor::listed_lock>& locks) {
  std::optional<std::uint32_t> kubelet;
  for (const auto& l : locks) {
    if (is_kubelet_inhibitor(l.what, l.who, l.why, l.mode, l.uid)) kubelet = l.pid;
  }
  locks_listed_ = true;
  if (kubelet == status_.kubelet.lock_pid()) return;
  // The kubelet that held it will not act on this shutdown any more (a new one, if any, took its
  // lock after the shutdown began and never saw it).
  const bool gone = status_.kubelet.lock_pid().has_value();
  if (kubelet) read_kubelet_files();
  status_.kubelet.set_lock(kubelet);
  // First: if the hold counted on kubelet's signal, the shim's is due at once.
  if (gone) runner_.feed([now = clock::now()](seq& s) { return s.kubelet_gone(now); });
  kubelet_changed();
}

// Said once per change: at start, and when kubelet's lock or files change what is expected.
void shutdown_shim::kubelet_changed() {
  if (!status_.kubelet.applies()) return;
  const std::string summary = status_.kubelet.summary();
  if (summary == kubelet_said_) return;
  kubelet_said_ = summary;
  if (auto warning = status_.kubelet.warning()) {
    log_.warning(*warning);
  } else {
    log_.notice(summary);
  }
  notify_status();
}

void shutdown_shim::on_preparing_read(bool preparing) {
  const auto& sequence = runner_.sequence();
  if (!preparing) {
    // The shutdown an earlier run recorded is over: never resume it later.
    if (resumable_) forget_shutdown();
    // A restarted logind forgets a delayed shutdown, and a PrepareForShutdown(false) sent while
    // the bus was down is never seen: what logind says now is what counts.
    if (sequence.draining()) {
      runner_.feed([](seq& s) { return s.cancel("logind is not preparing a shutdown any more"); });
    }
    return;
  }
  if (sequence.draining()) return;
  if (resumable_) {
    resumable_ = false;
    std::vector<pid_t> alive;
    bool left_to_kubelet = false;
    for (const auto& s : shutdown_.signalled) {
      if (identify_process(s.process.pid) != s.process) continue;
      if (auto process = process_handle::open(s.process.pid)) {
        alive.push_back(s.process.pid);
        left_to_kubelet = left_to_kubelet || s.left_to_kubelet;
        watch_attached(std::move(*process));
      }
    }
    // None of the processes it signalled runs, but a target does: a new shutdown, with a target
    // that never had its signal, began while no shim ran.
    if (alive.empty() && !resolve_target(cfg_.target).pids.empty()) {
      forget_shutdown();
      return on_prepare_for_shutdown(true, "PreparingForShutdown=true when connecting");
    }
    const auto unready_at = clock::time_point(std::chrono::microseconds(*shutdown_.unready_us));
    runner_.feed([now = clock::now(), unready_at, cause = shutdown_.cause, running = !alive.empty(),
                  left_to_kubelet](seq& s) {
      return s.resume(now, unready_at, cause, running, left_to_kubelet);
    });
    // logind's list came before this answer: a kubelet gone while no shim ran owes its signal.
    if (left_to_kubelet && locks_listed_ && !status_.kubelet.lock_pid()) {
      runner_.feed([now = clock::now()](seq& s) { return s.kubelet_gone(now); });
    }
    return;
  }
  on_prepare_for_shutdown(true, "PreparingForShutdown=true when connecting");
}

void shutdown_shim::on_lock_changed(logind_inhibitor::lock_state state, const std::string& detail) {
  using lock = logind_inhibitor::lock_state;
  using shown = shim_status::inhibitor_state;
  switch (state) {
    case lock::held:
      status_.inhibitor = shown::held;
      events_.record(event_kind::InhibitorTaken, first_attempt_done_ ? "re-taken" : "start",
                     "holding a logind delay lock on shutdown");
      break;
    case lock::retrying:
      // Until the first attempt is over the check fails; after it, a lost lock is a transient
      // fault: reported, retried, not turned into unreadiness.
      status_.inhibitor = first_attempt_done_ ? shown::retrying : shown::pending;
      break;
    case lock::released:
      // Recorded by carry_out(release_inhibitor), which alone releases it and knows why.
      status_.inhibitor = shown::released;
      break;
  }
  status_.inhibitor_detail = detail;
  notify_status();
}

void shutdown_shim::on_first_attempt(const result<>& outcome) {
  if (first_attempt_done_) return;
  first_attempt_done_ = true;
  if (status_.inhibitor == shim_status::inhibitor_state::pending) {
    status_.inhibitor = shim_status::inhibitor_state::retrying;
  }
  if (!outcome && cfg_.inhibit == inhibit_mode::required) {
    return finish({shim_outcome::kind::inhibit_failed, 0, outcome.error()});
  }
  // A stop that came while the lock was being taken: the command is not started at all.
  if (cfg_.inhibit == inhibit_mode::required && !runner_.sequence().draining()) start_child();
  if (!ready_notified_) {
    ready_notified_ = true;
    notify_status();
    sd_notify(0, "READY=1");
  }
}

void shutdown_shim::on_inhibit_delay(std::uint64_t usec) {
  status_.logind_delay_max_usec = usec;
  if (auto warning = status_.logind_delay_warning()) {
    log_.warning(*warning, {{"InhibitDelayMaxUSec", std::to_string(usec)}});
  }
  notify_status();
  if (ensurer_) ensurer_->start(usec);
}

void shutdown_shim::carry_out(const seq::action& a) {
  using kind = seq::action::kind;
  switch (a.what) {
    case kind::become_unready: {
      status_.draining_since = std::chrono::system_clock::now() - (clock::now() - a.at);
      status_.drain_cause = a.cause;
      log_fields fields;
      if (a.event == event_kind::ShutdownResumed) {
        for (pid_t pid : signalled_) fields.emplace_back("target_pid", std::to_string(pid));
      }
      // logind's limit as it stood when this hold began, for `shutdown-shim report`.
      if (status_.logind_delay_max_usec) {
        fields.emplace_back("inhibit_delay_max_usec",
                            std::to_string(*status_.logind_delay_max_usec));
      }
      // Stamped with the moment the drain is counted from, not the (later) moment of writing:
      // the event log must show a hold of at least the drain.
      events_.record(a.event.value_or(event_kind::ShutdownInitiated), a.cause, a.message, fields,
                     a.at);
      if (a.event != event_kind::ShutdownResumed) remember_shutdown(a);
      // What kubelet is expected to do to this shutdown's target, for the operator afterwards.
      if (status_.kubelet.applies() && a.event != event_kind::ShutdownResumed) {
        events_.record(event_kind::KubeletShutdown, a.cause, status_.kubelet.summary(),
                       status_.kubelet.fields());
      }
      // A shutdown wins at once, whatever the upstream says; probing stops for the drain
      // (upstream_check.hpp says why) and starts again after a cancel (settled()).
      if (upstream_) upstream_->pause();
      break;
    }
    case kind::become_ready:
      log_.notice("ready again", {{"why", a.message}});
      break;
    case kind::notify_stopping:
      sd_notify(0, "STOPPING=1");
      break;
    case kind::ask_system_state:
      ask_system_state();
      break;
    case kind::forward_signal:
      forward_signal();
      break;
    case kind::count_kubelet_signal:
      signal_attached(signal_sender::kubelet);
      break;
    case kind::watch_target:
      look_for_target();
      break;
    case kind::arm_timer:
      hold_timer_.expires_at(a.at);
      hold_timer_.async_wait([this](const boost::system::error_code& ec) {
        if (!ec) runner_.feed([now = clock::now()](seq& s) { return s.timer_expired(now); });
      });
      break;
    case kind::cancel_timer:
      hold_timer_.cancel();
      break;
    case kind::release_inhibitor: {
      // A SIGTERM not passed on (a.message says why) lets go of a lock no shutdown waits for;
      // only at the end of a hold does the shutdown go on.
      const bool held = status_.inhibitor == shim_status::inhibitor_state::held;
      const std::string lock = held         ? "closed the logind lock"
                               : inhibitor_ ? "no lock was held"
                                            : "--inhibit=off: no lock to release";
      // Recorded before the lock closes: logind goes on at once, and its "System is rebooting"
      // came 1 ms before a record written after the close (the system suite's ensure case).
      events_.record(event_kind::InhibitorReleased, inhibitor_ ? status_.drain_cause : "hold over",
                     a.message.empty()
                         ? (held ? lock + ": the shutdown goes on" : "hold over (" + lock + ")")
                         : a.message + " (" + lock + ")");
      if (inhibitor_) inhibitor_->release();
      break;
    }
    case kind::retake_inhibitor:
      // Only a cancel asks for this: the shutdown is over without a reboot.
      forget_shutdown();
      if (inhibitor_) inhibitor_->retake();
      break;
    case kind::exit:
      request_exit();
      break;
    case kind::note:
      if (a.event) {
        events_.record(*a.event, a.message, a.message);
      } else {
        log_.info(a.message);
      }
      break;
  }
}

void shutdown_shim::settled() {
  const auto& sequence = runner_.sequence();
  status_.draining = sequence.draining();
  status_.waiting_for_target = sequence.waiting_for_target();
  if (!status_.draining) {
    status_.draining_since.reset();
    status_.drain_cause.clear();
    // A cancelled shutdown: what stopped for the drain starts again.
    if (!target_searching_ && looking_for_target()) look_for_target();
    if (upstream_) upstream_->resume();
  }
  notify_status();
}

void shutdown_shim::request_exit() {
  if (child_ && child_->running()) {
    exit_pending_ = true;
    log_.info("waiting for the child to exit", {{"pid", std::to_string(child_->pid())}});
  } else if (child_) {
    finish({shim_outcome::kind::child_exited, child_->exit_code().value_or(0), {}});
  } else {
    finish({});
  }
}

void shutdown_shim::ask_system_state() {
  manager_->system_state([this](const result<std::string>& state) {
    if (!state) log_.warning("could not read PID 1's SystemState", {{"error", state.error()}});
    const std::string text = state ? state.value() : "unknown";
    runner_.feed([now = clock::now(), text](seq& s) {
      return s.system_state(now, text == "stopping", text);
    });
  });
}

void shutdown_shim::forward_signal() {
  if (child_) return signal_child();
  signal_attached(signal_sender::shim);
}

void shutdown_shim::signal_child() {
  const std::string sig = signal_name(cfg_.signal);
  const auto missed = [this](std::string why) {
    runner_.feed([now = clock::now(), why](seq& s) { return s.no_target(now, why); });
  };
  if (!child_->running()) return missed("the child has already exited");
  if (child_signalled_) {
    log_.notice("the child already had its signal; not sending another");
    return;
  }
  if (!child_->send_signal(cfg_.signal)) return missed("the child has already exited");
  child_signalled_ = true;
  status_.target.running = false;
  status_.target.detail = fmt::format("{} (pid {}) had {} at {} ({})", child_name(), child_->pid(),
                                      sig, wall_now(), status_.drain_cause);
  ++status_.signals_forwarded;
  events_.record(event_kind::SignalForwarded, status_.drain_cause, "sent " + sig + " to the child",
                 {{"target_pid", std::to_string(child_->pid())}, {"signal", sig}});
}

// With signal_sender::kubelet nothing is sent: kubelet's graceful node shutdown sends it, and the
// target is recorded as left to kubelet and watched as if the shim had signalled it (so a restarted
// shim sends none either). With signal_sender::shim, a process left to kubelet gets the shim's one
// signal (kubelet's lock went first) and is the shim's in the record from then on, so that a
// restart after it sends none.
void shutdown_shim::signal_attached(signal_sender sender) {
  const bool by_kubelet = sender == signal_sender::kubelet;
  const std::string sig = signal_name(cfg_.signal);
  const auto found = resolve_target(cfg_.target);
  int sent = 0;
  for (pid_t pid : found.pids) {
    const auto identity = identify_process(pid);
    auto* had = identity ? shutdown_.find(*identity) : nullptr;
    const bool taken_back = had && had->left_to_kubelet && !by_kubelet;
    if (!taken_back && (signalled_.count(pid) || had)) {
      log_.notice(
          "already signalled (by this run or an earlier one) or left to kubelet, and still "
          "running; not sending another",
          {{"pid", std::to_string(pid)}});
      continue;
    }
    try {
      auto process = process_handle::open(pid);
      if (!process || !identity) continue;
      // Recorded before it is sent: a crash in between loses a signal rather than sending two.
      const auto now_us = monotonic_us(clock::now());
      if (taken_back) {
        had->left_to_kubelet = false;
        had->signalled_us = now_us;
      } else {
        shutdown_.signalled.push_back({*identity, now_us, cfg_.signal, by_kubelet});
      }
      save_record();
      if (by_kubelet) {
        const auto& plan = status_.kubelet.plan();
        log_fields fields{{"target_pid", std::to_string(pid)}};
        for (auto& f : status_.kubelet.window_fields()) fields.push_back(std::move(f));
        events_.record(event_kind::SignalLeftToKubelet, status_.drain_cause,
                       fmt::format("kubelet sends {} its SIGTERM at {}; the shim sends none and "
                                   "counts kubelet's as the one",
                                   target_description(), plan ? plan->sigterm_window() : "?"),
                       fields);
      } else {
        if (!process->send_signal(cfg_.signal)) continue;
        ++status_.signals_forwarded;
        log_fields fields{{"target_pid", std::to_string(pid)}, {"signal", sig}};
        if (taken_back) fields.emplace_back("instead_of", "kubelet");
        events_.record(
            event_kind::SignalForwarded, status_.drain_cause,
            fmt::format("sent {} to {}{}", sig, target_description(),
                        taken_back ? ": kubelet's lock went away before it had exited" : ""),
            fields);
      }
      ++sent;
      // One left to kubelet is watched since it was counted.
      if (!taken_back) watch_attached(std::move(*process));
    } catch (const std::system_error& e) {
      log_.error("could not signal the target",
                 {{"pid", std::to_string(pid)}, {"error", e.what()}});
    }
  }
  if (sent > 0) target_signalled();
  if (sent == 0 && signalled_.empty()) {
    const std::string why =
        found.pids.empty() ? found.reason : "every target had exited before the signal";
    log_.warning("no target to signal", {{"target", target_description()}, {"reason", why}});
    runner_.feed([now = clock::now(), why](seq& s) { return s.no_target(now, why); });
  }
}

void shutdown_shim::watch_attached(process_handle process) {
  signalled_.insert(process.pid());
  watcher_.watch(std::move(process), [this](pid_t gone) {
    signalled_.erase(gone);
    events_.record(event_kind::TargetExited, "pidfd", "the target exited",
                   {{"target_pid", std::to_string(gone)}});
    if (signalled_.empty()) {
      runner_.feed(
          [now = clock::now()](seq& s) { return s.target_exited(now, "the target exited"); });
    }
  });
}

bool shutdown_shim::looking_for_target() const {
  // Not during a drain: nothing new is expected then, and the signal resolves the target anew.
  return attach_target() && !runner_.sequence().draining() &&
         (!status_.target.running || runner_.sequence().waiting_for_target());
}

// Whether a target process runs that did not have the signal (from this run or, per the record,
// an earlier one): one that had it is on its way out, however long it still serves.
bool shutdown_shim::target_counts() const {
  return std::any_of(present_.begin(), present_.end(), [this](const auto& p) {
    return !signalled_.count(p.first) && !shutdown_.was_signalled(p.second.identity);
  });
}

// At once (on the loop), with the backoff started again.
void shutdown_shim::look_for_target() {
  target_backoff_.reset();
  arm_target_search(backoff::duration(0));
}

void shutdown_shim::arm_target_search(backoff::duration delay) {
  target_searching_ = true;
  // Replaces a pending wait, whose handler then sees operation_aborted.
  target_timer_.expires_after(delay);
  target_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    target_searching_ = false;
    watch_for_target();
  });
}

// Nothing announces that a process named X has started, so the target is re-resolved with capped
// backoff until one runs that did not have the signal (the old one was once taken for a new one:
// faults suite).
void shutdown_shim::watch_for_target() {
  if (!looking_for_target()) return;
  const auto found = resolve_target(cfg_.target);
  for (pid_t pid : found.pids) {
    if (present_.count(pid) || signalled_.count(pid)) continue;
    try {
      if (auto process = process_handle::open(pid)) watch_present(std::move(*process));
    } catch (const std::system_error& e) {
      log_.warning("could not watch the target",
                   {{"pid", std::to_string(pid)}, {"error", e.what()}});
    }
  }
  if (target_counts()) return target_found();
  // Once a target has run, the line keeps saying what became of it.
  if (!target_seen_) {
    status_.target.detail = found.pids.empty()
                                ? "not found yet: " + found.reason
                                : "not found yet: only processes that had the signal run";
  }
  arm_target_search(target_backoff_.next());
}

void shutdown_shim::watch_present(process_handle process) {
  const pid_t pid = process.pid();
  // After pidfd_open: if the PID was reused in between, the pidfd's process has exited and its
  // watch fires at once, taking this entry away.
  const auto identity = identify_process(pid);
  if (!identity) return;
  present_[pid] = {*identity, process_name(pid)};
  watcher_.watch(std::move(process), [this](pid_t gone) { on_present_exit(gone); });
}

void shutdown_shim::target_found() {
  target_seen_ = true;
  if (!status_.target.running) {
    std::string pids;
    for (const auto& [pid, p] : present_) {
      if (signalled_.count(pid) || shutdown_.was_signalled(p.identity)) continue;
      if (!status_.target.running) {
        status_.target.detail = fmt::format("{} (pid {})", p.name, pid);
      } else {
        status_.target.detail += fmt::format(", {} (pid {})", p.name, pid);
      }
      pids += (pids.empty() ? "" : ",") + std::to_string(pid);
      status_.target.running = true;
    }
    events_.record(event_kind::TargetRunning, "found",
                   fmt::format("the target is running: {}", status_.target.detail),
                   {{"target_pid", pids}, {"target", target_description()}});
    notify_status();
  }
  if (runner_.sequence().waiting_for_target()) {
    log_.notice("a target is running again", {{"target", status_.target.detail}});
    runner_.feed([](seq& s) { return s.target_running(); });
  }
}

void shutdown_shim::on_present_exit(pid_t pid) {
  const auto it = present_.find(pid);
  if (it == present_.end()) return;
  const std::string name = it->second.name;
  present_.erase(it);
  // It had the signal (the check failed then), or another target still runs.
  if (!status_.target.running || target_counts()) return;
  status_.target.running = false;
  // Not the shim's child, so its status cannot be known: waitid(P_PIDFD) answers ECHILD for
  // another's child, and /proc/PID/stat's exit_code (field 52) lasts only until the parent
  // (kubelet's runtime, systemd) reaps the zombie, which it does at once. Only "exited".
  status_.target.detail = fmt::format("{} (pid {}) exited at {}", name, pid, wall_now());
  events_.record(event_kind::TargetLost, "pidfd", "the target exited: " + status_.target.detail,
                 {{"target_pid", std::to_string(pid)}, {"target", target_description()}});
  notify_status();
  if (looking_for_target()) look_for_target();
}

// The signal went out: the processes that had it no longer count as the target.
void shutdown_shim::target_signalled() {
  if (!status_.target.running || target_counts()) return;
  status_.target.running = false;
  status_.target.detail = fmt::format("{} had {} at {} ({})", target_description(),
                                      signal_name(cfg_.signal), wall_now(), status_.drain_cause);
}

void shutdown_shim::on_child_exit(int code) {
  const std::string detail = fmt::format("the child exited with {}", code);
  events_.record(
      event_kind::TargetExited, "child", detail,
      {{"target_pid", std::to_string(child_->pid())}, {"exit_code", std::to_string(code)}});
  // The check fails in this loop iteration; outside a shutdown the sequence then ends the shim
  // with the child's code, as a container's init does.
  status_.target.running = false;
  status_.target.detail = fmt::format("{} (pid {}) exited, {} at {}", child_name(), child_->pid(),
                                      describe_exit_code(code), wall_now());
  if (!child_signalled_) {
    events_.record(
        event_kind::TargetLost, "child", "the target exited: " + status_.target.detail,
        {{"target_pid", std::to_string(child_->pid())}, {"exit_code", std::to_string(code)}});
  }
  runner_.feed([now = clock::now(), detail](seq& s) { return s.target_exited(now, detail); });
  if (exit_pending_) finish({shim_outcome::kind::child_exited, code, {}});
}

void shutdown_shim::remember_shutdown(const seq::action& unready) {
  if (!record_.enabled()) return;
  shutdown_.unready_us = monotonic_us(unready.at);
  shutdown_.cause = unready.cause;
  save_record();
}

void shutdown_shim::forget_shutdown() {
  resumable_ = false;
  if (!record_.enabled() || !shutdown_.unready_us) return;
  shutdown_.unready_us.reset();
  shutdown_.cause.clear();
  save_record();
}

void shutdown_shim::save_record() {
  if (auto saved = record_.save(shutdown_); !saved) {
    log_.warning(
        "could not keep the record of signalled processes; a restart mid-hold may "
        "signal again",
        {{"error", saved.error()}});
  }
}

void shutdown_shim::start_upstream() {
  upstream_ = std::make_unique<upstream_check>(
      io_, cfg_.upstream, log_, events_, status_.upstream,
      upstream_check::handlers{.changed = [this] { notify_status(); }});
  upstream_->start();
}

void shutdown_shim::notify_status() { sd_notify(0, ("STATUS=" + status_line(status_)).c_str()); }

// Only the loop turning counts as healthy: a lost bus or a missing target is retried on the loop
// and reported, and a restart by the watchdog would only drop the lock. So nothing else stops the
// pings; without WATCHDOG_USEC for this PID there is no timer at all.
void shutdown_shim::start_watchdog() {
  std::uint64_t usec = 0;
  const int r = sd_watchdog_enabled(0, &usec);
  if (r < 0) {
    log_.warning("ignoring a malformed WATCHDOG_USEC/WATCHDOG_PID",
                 {{"error", std::generic_category().message(-r)}});
  }
  if (r <= 0 || usec == 0) return;
  watchdog_period_ = std::chrono::microseconds(usec / 2);
  log_.info("systemd watchdog enabled; sending WATCHDOG=1 at half the interval",
            {{"interval", format_duration(std::chrono::microseconds(usec))}});
  ping_watchdog();
}

void shutdown_shim::ping_watchdog() {
  sd_notify(0, "WATCHDOG=1");
  watchdog_timer_.expires_after(watchdog_period_);
  watchdog_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) ping_watchdog();
  });
}

void shutdown_shim::finish(shim_outcome outcome) {
  if (outcome_) return;
  outcome_ = std::move(outcome);
  // Nothing the sequence still has queued is carried out now.
  runner_.halt();
  server_.stop();
  triggers_.cancel();
  strays_.cancel();
  hold_timer_.cancel();
  target_timer_.cancel();
  watchdog_timer_.cancel();
  watcher_.clear();
  if (upstream_) upstream_->stop();
  io_.stop();
}

// Nothing that runs on the loop throws on purpose (result.hpp), but a library may: one upstream
// answer made Boost.Beast's parser reserve 1 TiB, and its std::bad_alloc left io_context::run,
// ending the shim and its lock (issue 18, item 2). What an input can cause must never stop the
// daemon: the handler that threw is gone, the error is logged, and the loop goes on.
shim_outcome shutdown_shim::run() {
  for (;;) {
    try {
      io_.run();
      break;
    } catch (const std::exception& e) {
      log_.error("a handler on the event loop failed; the loop goes on", {{"error", e.what()}});
    }
  }
  return outcome_.value_or(shim_outcome{});
}

}  // namespace shim
