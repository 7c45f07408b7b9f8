#include "process/target_watch.hpp"

#include <fmt/format.h>
#include <signal.h>

#include <algorithm>
#include <filesystem>

#include "log/event_loop.hpp"
#include "util/signal_names.hpp"

namespace shim {

namespace {

using clock = shutdown_sequence::clock;

std::int64_t monotonic_us(shutdown_sequence::time_point t) {
  // steady_clock is CLOCK_MONOTONIC, the clock of the event log's monotonic_us.
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
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

std::string describe_target(const target_spec& t) {
  if (t.pid) return fmt::format("pid {}", *t.pid);
  if (!t.pidfile.empty()) return "pidfile " + t.pidfile;
  if (!t.name.empty()) return "processes named " + t.name;
  if (t.wrapper()) return "child " + t.command.front();
  return "none";
}

target_watch::target_watch(boost::asio::io_context& io, settings s, logger& log,
                           event_recorder& events, target_row& row,
                           const shutdown_sequence& sequence, target_events& on)
    : io_(io),
      settings_(std::move(s)),
      log_(log),
      events_(events),
      row_(row),
      sequence_(sequence),
      on_(on),
      watcher_(io),
      // The record protects attach-mode targets; a wrapper's child is new with every run.
      record_(settings_.target.wrapper() ? std::string() : settings_.state_dir),
      timer_(io) {
  row_.configured = settings_.target.any();
  row_.detail = settings_.target.wrapper() ? "the command has not been started yet"
                                           : "not found yet: " + describe_target(settings_.target);
}

// The wrapped command's name, as the target check's lines show it: "kube-apiserver".
std::string target_watch::child_name() const {
  return std::filesystem::path(settings_.target.command.front()).filename().string();
}

void target_watch::start() {
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
  // At once, so that a target already running counts before the lock is taken and READY=1 is
  // sent (ShimNotify).
  if (attach()) search();
}

result<> target_watch::start_child() {
  if (!settings_.target.wrapper() || child_) return result<>::success();
  try {
    child_ = std::make_unique<child_process>(io_, settings_.target.command);
  } catch (const std::system_error& e) {
    return result<>::failure(e.what());
  }
  log_.info("started the command", {{"pid", std::to_string(child_->pid())},
                                    {"command", settings_.target.command.front()}});
  child_->on_exit([this](int code) { on_child_exit(code); });
  on_.target_command_line(settings_.target.command, "the wrapped command");
  row_.running = true;
  row_.detail = fmt::format("{} (pid {})", child_name(), child_->pid());
  events_.record(event_kind::TargetRunning, "child", "the target is running: " + row_.detail,
                 {{"target_pid", std::to_string(child_->pid())}});
  on_.row_changed();
  return result<>::success();
}

void target_watch::stop() {
  timer_.cancel();
  watcher_.clear();
}

bool target_watch::pass_on(int signal) {
  if (!child_ || !child_->running()) return false;
  log_.info("passing a signal on to the child", {{"signal", signal_name(signal)}});
  if (auto sent = child_->send_signal(signal); !sent) log_loop_failure(log_, sent.error());
  return true;
}

void target_watch::reap_orphans() {
  if (child_) child_->reap_all();
}

target_watch::resumed target_watch::resume() {
  resumable_ = false;
  resumed out{
      .hold = {.unready_at = clock::time_point(std::chrono::microseconds(*shutdown_.unready_us)),
               .cause = shutdown_.cause,
               .signalled = !shutdown_.signalled.empty()}};
  for (const auto& s : shutdown_.signalled) {
    if (identify_process(s.process.pid) != s.process) continue;
    auto process = process_handle::open(s.process.pid);
    if (!process) log_loop_failure(log_, process.error());
    if (!process || !process.value()) continue;
    out.hold.target_running = true;
    out.hold.left_to_kubelet = out.hold.left_to_kubelet || s.left_to_kubelet;
    if (auto watched = watch_signalled(std::move(*process.value())); !watched) {
      log_loop_failure(log_, watched.error());
    }
  }
  // A target it did not signal runs too: its signal was still to come, or kubelet started it
  // again while no shim ran. The hold waits for it; the sequence signals it at its time.
  out.unsignalled_running = target_counts();
  out.hold.target_running = out.hold.target_running || out.unsignalled_running;
  return out;
}

void target_watch::remember_shutdown(shutdown_sequence::time_point unready_at,
                                     const std::string& cause) {
  if (!record_.enabled()) return;
  shutdown_.unready_us = monotonic_us(unready_at);
  shutdown_.cause = cause;
  save_record();
}

void target_watch::forget_shutdown() {
  resumable_ = false;
  if (!record_.enabled() || !shutdown_.unready_us) return;
  shutdown_.unready_us.reset();
  shutdown_.cause.clear();
  save_record();
}

void target_watch::save_record() {
  if (auto saved = record_.save(shutdown_); !saved) {
    log_.warning(
        "could not keep the record of signalled processes; a restart mid-hold may signal again",
        {{"error", saved.error()}});
  }
}

void target_watch::forward_signal(const std::optional<kubelet_handoff>& kubelet) {
  if (child_ && !kubelet) return signal_child();
  signal_attached(kubelet, signal_scope::owed);
}

void target_watch::signal_restarted(const std::optional<kubelet_handoff>& kubelet) {
  if (attach()) signal_attached(kubelet, signal_scope::new_only);
}

void target_watch::signal_child() {
  const std::string sig = signal_name(settings_.signal);
  if (!child_->running()) return on_.target_missed("the child has already exited");
  if (child_signalled_) {
    log_.notice("the child already had its signal; not sending another");
    return;
  }
  const auto sent = child_->send_signal(settings_.signal);
  if (!sent) return log_loop_failure(log_, sent.error());
  if (!sent.value()) return on_.target_missed("the child has already exited");
  child_signalled_ = true;
  row_.running = false;
  row_.detail = fmt::format("{} (pid {}) had {} at {} ({})", child_name(), child_->pid(), sig,
                            wall_now(), sequence_.cause());
  ++row_.signals_forwarded;
  events_.record(event_kind::SignalForwarded, sequence_.cause(), "sent " + sig + " to the child",
                 {{"target_pid", std::to_string(child_->pid())}, {"signal", sig}});
}

// With a kubelet handoff nothing is sent: kubelet's graceful node shutdown sends it, and the
// target is recorded as left to kubelet and watched as if the shim had signalled it (so a restarted
// shim sends none either). With none and signal_scope::owed, a process left to
// kubelet gets the shim's one signal (kubelet went first) and is the shim's in the record from then
// on, so that a restart after it sends none. signal_scope::new_only reaches only processes the
// record does not know: restarted during the hold (TargetRestarted).
void target_watch::signal_attached(const std::optional<kubelet_handoff>& kubelet,
                                   signal_scope scope) {
  const bool by_kubelet = kubelet.has_value();
  const bool restarted = scope == signal_scope::new_only;
  const std::string sig = signal_name(settings_.signal);
  const auto found = resolve_target(settings_.target);
  int sent = 0;
  for (pid_t pid : found ? found.value() : std::vector<pid_t>{}) {
    const auto identity = identify_process(pid);
    auto* had = identity ? shutdown_.find(*identity) : nullptr;
    const bool taken_back = had && had->left_to_kubelet && !by_kubelet && !restarted;
    if (!taken_back && (signalled_.count(pid) || had)) {
      log_.notice(
          "already signalled (by this run or an earlier one) or left to kubelet, and still "
          "running; not sending another",
          {{"pid", std::to_string(pid)}});
      continue;
    }
    const auto failed = [&](const std::string& error) {
      log_.error("could not signal the target", {{"pid", std::to_string(pid)}, {"error", error}});
    };
    auto opened = process_handle::open(pid);
    if (!opened) failed(opened.error());
    if (!opened || !opened.value() || !identity) continue;
    auto& process = opened.value();
    // Recorded before it is sent: a crash in between loses a signal rather than sending two.
    const auto now_us = monotonic_us(clock::now());
    if (taken_back) {
      had->left_to_kubelet = false;
      had->signalled_us = now_us;
    } else {
      shutdown_.signalled.push_back({*identity, now_us, settings_.signal, by_kubelet});
    }
    save_record();
    log_fields fields{{"target_pid", std::to_string(pid)}};
    if (by_kubelet) {
      fields.insert(fields.end(), kubelet->fields.begin(), kubelet->fields.end());
    } else {
      const auto delivered = process->send_signal(settings_.signal);
      if (!delivered) {
        failed(delivered.error());
        continue;
      }
      if (!delivered.value()) continue;
      ++row_.signals_forwarded;
      fields.emplace_back("signal", sig);
      if (taken_back) fields.emplace_back("instead_of", "kubelet");
    }
    const std::string target = describe_target(settings_.target);
    std::string what;
    if (restarted) {
      fields.emplace_back("signal_by", by_kubelet ? "kubelet" : "shim");
      what = fmt::format(
          "{} (pid {}) ran again during the hold without the signal: {}", target, pid,
          by_kubelet ? fmt::format("kubelet stops it at its group's turn ({}), the shim sends none",
                                   kubelet->window)
                     : "sent it " + sig + ", its one");
    } else if (by_kubelet) {
      what = fmt::format(
          "kubelet sends {} its SIGTERM at {}; the shim sends none and counts kubelet's as the one",
          target, kubelet->window);
    } else {
      what = fmt::format("sent {} to {}{}", sig, target,
                         taken_back ? ": kubelet went before it had exited" : "");
    }
    events_.record(restarted    ? event_kind::TargetRestarted
                   : by_kubelet ? event_kind::SignalLeftToKubelet
                                : event_kind::SignalForwarded,
                   sequence_.cause(), what, fields);
    ++sent;
    // One left to kubelet is watched since it was counted.
    if (!taken_back) {
      if (auto watched = watch_signalled(std::move(*process)); !watched) failed(watched.error());
    }
  }
  if (sent > 0) after_signal();
  if (sent == 0 && signalled_.empty()) {
    // A restarted one gone again before its signal: the hold waits for none.
    if (restarted) return on_.target_exited("the restarted target exited before its signal");
    const std::string why = found ? "every target had exited before the signal" : found.error();
    log_.warning("no target to signal",
                 {{"target", describe_target(settings_.target)}, {"reason", why}});
    on_.target_missed(why);
  }
}

result<> target_watch::watch_signalled(process_handle process) {
  signalled_.insert(process.pid());
  return watcher_.watch(std::move(process), [this](pid_t gone) {
    signalled_.erase(gone);
    events_.record(event_kind::TargetExited, "pidfd", "the target exited",
                   {{"target_pid", std::to_string(gone)}});
    if (!signalled_.empty()) return;
    on_.target_exited("the target exited");
    // The hold goes on (the drain is not over): kubelet may start it again.
    if (looking() && !searching_) look_for_target();
  });
}

bool target_watch::looking() const {
  if (!attach()) return false;
  // During a hold, once every target process has exited: kubelet restarts a static pod's container
  // that exits, and a new kube-apiserver must get its signal too (issue 32).
  if (sequence_.holding()) return present_.empty() && signalled_.empty();
  return !sequence_.phase().draining() && (!row_.running || sequence_.phase().waiting_for_target());
}

// Whether a target process runs that did not have the signal (from this run or, per the record,
// an earlier one): one that had it is on its way out, however long it still serves.
bool target_watch::target_counts() const {
  return std::any_of(present_.begin(), present_.end(), [this](const auto& p) {
    return !signalled_.count(p.first) && !shutdown_.was_signalled(p.second.identity);
  });
}

// At once (on the loop), with the backoff started again.
void target_watch::look_for_target() {
  backoff_.reset();
  hold_backoff_.reset();
  arm_search(backoff::duration(0));
}

// A cancelled shutdown: the search that stopped for the drain starts again.
void target_watch::settled() {
  if (!searching_ && looking()) look_for_target();
}

void target_watch::arm_search(backoff::duration delay) {
  searching_ = true;
  // Replaces a pending wait, whose handler then sees operation_aborted.
  timer_.expires_after(delay);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    searching_ = false;
    search();
  });
}

// Nothing announces that a process named X has started, so the target is re-resolved with capped
// backoff until one runs that did not have the signal (the old one was once taken for a new one:
// faults suite).
void target_watch::search() {
  if (!looking()) return;
  const auto found = resolve_target(settings_.target);
  for (pid_t pid : found ? found.value() : std::vector<pid_t>{}) {
    if (present_.count(pid) || signalled_.count(pid)) continue;
    auto process = process_handle::open(pid);
    auto watched = process ? result<>::success() : result<>::failure_from(process);
    if (process && process.value()) watched = watch_present(std::move(*process.value()));
    if (!watched) {
      log_.warning("could not watch the target",
                   {{"pid", std::to_string(pid)}, {"error", watched.error()}});
    }
  }
  if (target_counts()) return target_found();
  // Once a target has run, the line keeps saying what became of it.
  if (!seen_) {
    row_.detail = found ? "not found yet: only processes that had the signal run"
                        : "not found yet: " + found.error();
  }
  arm_search(sequence_.holding() ? hold_backoff_.next() : backoff_.next());
}

result<> target_watch::watch_present(process_handle process) {
  const pid_t pid = process.pid();
  // After pidfd_open: if the PID was reused in between, the pidfd's process has exited and its
  // watch fires at once, taking this entry away.
  const auto identity = identify_process(pid);
  if (!identity) return result<>::success();
  present_[pid] = {*identity, process_name(pid).value_or("")};
  return watcher_.watch(std::move(process), [this](pid_t gone) { on_present_exit(gone); });
}

void target_watch::target_found() {
  seen_ = true;
  if (!row_.running) {
    std::string pids;
    for (const auto& [pid, p] : present_) {
      if (signalled_.count(pid) || shutdown_.was_signalled(p.identity)) continue;
      if (pids.empty()) row_.detail.clear();
      row_.detail += fmt::format("{}{} (pid {})", pids.empty() ? "" : ", ", p.name, pid);
      if (pids.empty()) read_command_line(pid);
      pids += (pids.empty() ? "" : ",") + std::to_string(pid);
    }
    // Only called with one that did not have the signal (target_counts()).
    row_.running = true;
    events_.record(event_kind::TargetRunning, "found",
                   fmt::format("the target is running: {}", row_.detail),
                   {{"target_pid", pids}, {"target", describe_target(settings_.target)}});
    on_.row_changed();
  }
  if (sequence_.phase().waiting_for_target()) {
    log_.notice("a target is running again", {{"target", row_.detail}});
    on_.target_running_again();
  }
  if (sequence_.holding()) on_.target_started();
}

// What kube-apiserver runs with (its shutdown delay) is on its command line: for signal_plan.
void target_watch::read_command_line(pid_t pid) {
  if (auto argv = shim::read_command_line(pid)) {
    on_.target_command_line(*argv, fmt::format("pid {}'s command line", pid));
  }
}

void target_watch::on_present_exit(pid_t pid) {
  const auto it = present_.find(pid);
  if (it == present_.end()) return;
  const std::string name = it->second.name;
  present_.erase(it);
  // It had the signal (the check failed then), or another target still runs.
  if (!row_.running || target_counts()) {
    // The last of a hold's signalled processes: kubelet may start one again.
    if (looking() && !searching_) look_for_target();
    return;
  }
  row_.running = false;
  // Not the shim's child, so its status cannot be known: waitid(P_PIDFD) answers ECHILD for
  // another's child, and /proc/PID/stat's exit_code (field 52) lasts only until the parent
  // (kubelet's runtime, systemd) reaps the zombie, which it does at once. Only "exited".
  row_.detail = fmt::format("{} (pid {}) exited at {}", name, pid, wall_now());
  events_.record(
      event_kind::TargetLost, "pidfd", "the target exited: " + row_.detail,
      {{"target_pid", std::to_string(pid)}, {"target", describe_target(settings_.target)}});
  on_.row_changed();
  if (looking()) look_for_target();
}

// The signal went out: the processes that had it no longer count as the target.
void target_watch::after_signal() {
  if (!row_.running || target_counts()) return;
  row_.running = false;
  row_.detail = fmt::format("{} had {} at {} ({})", describe_target(settings_.target),
                            signal_name(settings_.signal), wall_now(), sequence_.cause());
}

void target_watch::on_child_exit(int code) {
  const std::string detail = fmt::format("the child exited with {}", code);
  const log_fields fields{{"target_pid", std::to_string(child_->pid())},
                          {"exit_code", std::to_string(code)}};
  events_.record(event_kind::TargetExited, "child", detail, fields);
  // The check fails in this loop iteration; outside a shutdown the sequence then ends the shim
  // with the child's code, as a container's init does.
  row_.running = false;
  row_.detail = fmt::format("{} (pid {}) exited, {} at {}", child_name(), child_->pid(),
                            describe_exit_code(code), wall_now());
  if (!child_signalled_) {
    events_.record(event_kind::TargetLost, "child", "the target exited: " + row_.detail, fields);
  }
  on_.target_exited(detail);
  on_.child_exited(code);
}

}  // namespace shim
