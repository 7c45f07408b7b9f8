#include "daemon/shutdown_shim.hpp"

#include <signal.h>
#include <unistd.h>

#include <stdexcept>

#include "daemon/daemon_settings.hpp"
#include "log/event_loop.hpp"
#include "report/shutdown_history.hpp"
#include "util/signal_names.hpp"

namespace shim {

shutdown_shim::shutdown_shim(boost::asio::io_context& io, const config& cfg, logger& log,
                             event_recorder& events)
    : io_(io),
      cfg_(cfg),
      log_(log),
      events_(events),
      status_(initial_status(cfg, log, events)),
      runner_(sequence_settings(cfg), {.carry_out = [this](const seq::action& a) { carry_out(a); },
                                       .settled = [this] { settled(); }}),
      lb_(io, cfg.upstream.enabled() ? cfg.upstream.url.port : 0, log),
      server_(io, status_, {},
              [this](const boost::asio::ip::address& from, bool ready, bool kubelet_probe) {
                lb_.probe_answered(from, ready, kubelet_probe);
                status_.last_probe = clock::now();
              }),
      notifier_(io, status_, log),
      logind_(cfg.inhibit == inhibit_mode::off
                  ? nullptr
                  : std::make_unique<logind_edge>(io, logind_settings_of(cfg), log, events,
                                                  status_.logind,
                                                  static_cast<logind_events&>(*this))),
      control_(io, control_settings(cfg), runner_, lb_, status_, log, events),
      kubelet_(io, kubelet_settings(cfg), log, status_.kubelet, *this),
      target_(io, target_settings(cfg), log, events, status_.target, runner_.sequence(), *this),
      signals_(io, *this),
      planner_(io, status_, notifier_, log),
      records_(cfg, log, events, status_, target_),
      hold_timer_(io) {}

shutdown_shim::~shutdown_shim() = default;

void shutdown_shim::start() {
  auto claimed = claimed_directory::claim(state_directory(cfg_));
  if (!claimed) throw std::runtime_error(claimed.error());
  state_dir_.emplace(std::move(claimed.value()));
  // Signals first: a SIGTERM during start-up runs the sequence; as PID 1 every orphan is ours.
  signals_.start(cfg_.target.wrapper() && getpid() == 1);
  notifier_.start_watchdog();

  server_.listen(cfg_.listen);
  status_.listener_bound = true;
  planner_.start();
  records_.started();
  status_.previous = recall_previous_shutdown(cfg_.event_log, log_, events_);
  control_.listen(state_dir_->path());

  // Only now: what the record says was signalled never counts as the target.
  target_.start();
  if (cfg_.upstream.enabled()) {
    upstream_ = std::make_unique<upstream_check>(
        io_, cfg_.upstream, log_, events_, status_.upstream,
        upstream_check::handlers{.changed = [this] { row_changed(); }});
    upstream_->start();
  }
  kubelet_.start();

  // With --inhibit=required the command starts only once the lock is held (first_attempt_done):
  // a failed start leaves nothing running. Here one ends the shim (main() logs it, exit 1).
  if (cfg_.inhibit != inhibit_mode::required) {
    if (auto started = target_.start_child(); !started) throw std::runtime_error(started.error());
  }
  if (!logind_) return first_attempt_done(result<>::success());
  logind_->start();
}

void shutdown_shim::carry_out(const seq::action& a) {
  using kind = seq::action::kind;
  switch (a.what) {
    case kind::become_unready:
      records_.hold_began(a);
      // A shutdown wins over the upstream at once (upstream_check.hpp); the load balancer is
      // measured for DrainElapsed (a drill that became this shutdown keeps its own measurement).
      if (upstream_) upstream_->pause();
      return lb_.begin(a.at, load_balancer_watch::kDefaultFall);
    case kind::record_start:
      return records_.hold_began(a);
    case kind::become_ready:
      log_.notice("ready again", {{"why", a.message}});
      return lb_.end();
    case kind::notify_stopping:
      return notifier_.stopping();
    case kind::ask_system_state:
      return logind_->ask_system_state();
    case kind::forward_signal:
      return target_.forward_signal();
    case kind::count_kubelet_signal:
      return target_.forward_signal(status_.handoff_to_kubelet());
    case kind::signal_restarted:
      return target_.signal_restarted();
    case kind::leave_restarted_to_kubelet:
      return target_.signal_restarted(status_.handoff_to_kubelet());
    case kind::watch_target:
      return target_.look_for_target();
    case kind::arm_timer:
      hold_timer_.expires_at(a.at);
      return hold_timer_.async_wait([this](const boost::system::error_code& ec) {
        if (!ec) runner_.feed([now = clock::now()](seq& s) { return s.timer_expired(now); });
      });
    case kind::cancel_timer:
      hold_timer_.cancel();
      return;
    case kind::release_inhibitor:
      records_.released(a);
      if (logind_) logind_->release();
      return lb_.end();
    case kind::retake_inhibitor:
      // Only a cancel asks for this: the shutdown is over without a reboot.
      target_.forget_shutdown();
      if (logind_) logind_->retake();
      // The hold is over, even while /readyz stays unready for a target that is down.
      return lb_.end();
    case kind::exit:
      return request_exit();
    case kind::start_drill:
      return control_.drill_started(a);
    case kind::end_drill:
      return control_.drill_ended(a);
    case kind::note:
      return records_.note(a, lb_);
  }
}

void shutdown_shim::settled() {
  status_.set_phase(runner_.sequence().phase());
  if (!status_.phase.draining()) {
    // A cancelled shutdown: what stopped for the drain starts again.
    target_.settled();
    if (upstream_) upstream_->resume();
  }
  notifier_.status();
}

void shutdown_shim::request_exit() {
  const auto* child = target_.child();
  exit_pending_ = child && child->running();
  if (exit_pending_) {
    return log_.info("waiting for the child to exit", {{"pid", std::to_string(child->pid())}});
  }
  finish({child ? shim_outcome::kind::child_exited : shim_outcome::kind::done,
          child ? child->exit_code().value_or(0) : 0,
          {}});
}

void shutdown_shim::system_state_read(const result<std::string>& read) {
  if (!read) log_.warning("could not read PID 1's SystemState", {{"error", read.error()}});
  const std::string state = read ? read.value() : "unknown";
  records_.system_state(state);
  runner_.feed([now = clock::now(), state](seq& s) {
    return s.system_state(now, state == "stopping", state);
  });
}

void shutdown_shim::feed_trigger(seq::trigger_kind kind, const std::string& cause,
                                 seq::forward_decision decision) {
  runner_.feed([now = clock::now(), kind, cause, timing = planner_.timing(decision)](seq& s) {
    return s.trigger(now, kind, cause, timing);
  });
}

void shutdown_shim::prepare_for_shutdown(bool active, const std::string& cause) {
  if (!active) return runner_.feed([cause](seq& s) { return s.cancel(cause); });
  // What the shim knows of kubelet at this moment decides; kubelet_watch logged it already.
  feed_trigger(seq::trigger_kind::prepare_for_shutdown, cause, planner_.decision());
}

void shutdown_shim::preparing_read(bool preparing) {
  const bool draining = runner_.sequence().phase().draining();
  if (!preparing) {
    // What an earlier run recorded is over, never to resume: a restarted logind forgets a delayed
    // shutdown, and a PrepareForShutdown(false) sent while the bus was down is never seen.
    if (target_.resumable()) target_.forget_shutdown();
    if (!draining) return;
    return runner_.feed(
        [](seq& s) { return s.cancel("logind is not preparing a shutdown any more"); });
  }
  if (draining) return;
  if (!target_.resumable()) {
    return prepare_for_shutdown(true, "PreparingForShutdown=true when connecting");
  }
  auto r = target_.resume();
  r.hold.timing = planner_.timing(planner_.decision());
  runner_.feed([now = clock::now(), hold = r.hold](seq& s) { return s.resume(now, hold); });
  // kubelet restarted kube-apiserver while no shim ran: the new one is owed its signal.
  if (r.hold.signalled && r.unsignalled_running) target_started();
  // logind's list came before this answer: a kubelet gone while no shim ran owes its signal.
  if (r.hold.left_to_kubelet && kubelet_.listed() && !status_.kubelet.kubelet_pid()) kubelet_gone();
}

// Once: from logind_edge, or at start with --inhibit=off.
void shutdown_shim::first_attempt_done(const result<>& outcome) {
  if (!outcome && cfg_.inhibit == inhibit_mode::required) {
    return finish({shim_outcome::kind::inhibit_failed, 0, outcome.error()});
  }
  // A stop while the lock was being taken: the command never starts; a failed one sends no READY.
  if (cfg_.inhibit == inhibit_mode::required && !runner_.sequence().phase().draining()) {
    if (auto started = target_.start_child(); !started) {
      return log_loop_failure(log_, started.error());
    }
  }
  notifier_.ready();
}

void shutdown_shim::delay_locks_listed(const std::vector<logind_inhibitor::listed_lock>& locks) {
  kubelet_.locks_listed(locks);
}

void shutdown_shim::ensure_failed(const std::string& error) {
  finish({shim_outcome::kind::ensure_failed, 0, error});
}

void shutdown_shim::row_changed() { notifier_.status(); }

void shutdown_shim::target_exited(const std::string& detail) {
  runner_.feed([now = clock::now(), detail](seq& s) { return s.target_exited(now, detail); });
}

void shutdown_shim::target_missed(const std::string& why) {
  runner_.feed([now = clock::now(), why](seq& s) { return s.no_target(now, why); });
}

void shutdown_shim::target_running_again() {
  runner_.feed([](seq& s) { return s.target_running(); });
}

void shutdown_shim::target_started() {
  runner_.feed([now = clock::now()](seq& s) { return s.target_started(now); });
}

void shutdown_shim::child_exited(int exit_code) {
  if (exit_pending_) finish({shim_outcome::kind::child_exited, exit_code, {}});
}

void shutdown_shim::target_command_line(const std::vector<std::string>& argv,
                                        const std::string& source) {
  planner_.command_line(argv, source, /*running=*/true);
}

void shutdown_shim::kubelet_gone() {
  runner_.feed([now = clock::now()](seq& s) { return s.kubelet_gone(now); });
}

void shutdown_shim::kubelet_changed() {
  planner_.kubelet_changed("--static-pod-manifest=" + cfg_.static_pod_manifest);
}

void shutdown_shim::trigger_signal(int signal) {
  const auto forwarding = sigterm_forwarding(cfg_);
  log_.notice("received " + signal_name(signal), {{"forward", forwarding.why}});
  records_.forward_why(forwarding.why);
  feed_trigger(signal == SIGINT ? seq::trigger_kind::sigint : seq::trigger_kind::sigterm,
               signal_name(signal), forwarding.decision);
}

void shutdown_shim::stray_signal(int signal, bool own) {
  if (signal == SIGCHLD) return target_.reap_orphans();
  // logrotate's convention: the event log opened again at its path (failed: the old file kept).
  if (signal == SIGHUP) events_.reopen();
  if (!own && target_.pass_on(signal)) return;
  if (signal != SIGHUP && signal != SIGWINCH) {
    log_.notice("ignoring a signal", {{"signal", signal_name(signal)}});
  }
}

void shutdown_shim::finish(shim_outcome outcome) {
  if (outcome_) return;
  outcome_ = std::move(outcome);
  // Nothing the sequence still has queued is carried out now.
  runner_.halt();
  server_.stop();
  control_.stop();
  signals_.stop();
  notifier_.stop();
  hold_timer_.cancel();
  planner_.stop();
  target_.stop();
  kubelet_.stop();
  if (upstream_) upstream_->stop();
  io_.stop();
}

shim_outcome shutdown_shim::run() {
  run_event_loop(io_, log_);
  return outcome_.value_or(shim_outcome{});
}

}  // namespace shim
