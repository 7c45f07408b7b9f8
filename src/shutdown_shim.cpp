#include "shutdown_shim.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <boost/asio/post.hpp>

namespace shim {

namespace asio = boost::asio;
using seq = shutdown_sequence;

namespace {

std::string listen_list(const std::vector<listen_address>& addresses) {
  std::string out;
  for (const auto& a : addresses) {
    if (!out.empty()) out += ",";
    out += a.host.find(':') != std::string::npos ? fmt::format("[{}]:{}", a.host, a.port)
                                                 : fmt::format("{}:{}", a.host, a.port);
  }
  return out;
}

seq::settings sequence_settings(const config& cfg) {
  return {std::chrono::duration_cast<seq::duration>(cfg.drain_delay),
          std::chrono::duration_cast<seq::duration>(cfg.signal_delay),
          std::chrono::duration_cast<seq::duration>(cfg.exit_timeout), cfg.target.any(),
          cfg.target.wrapper()};
}

}  // namespace

shutdown_shim::shutdown_shim(asio::io_context& io, const config& cfg, logger& log,
                             event_recorder& events)
    : io_(io),
      cfg_(cfg),
      log_(log),
      events_(events),
      sequence_(sequence_settings(cfg)),
      server_(io, status_),
      watcher_(io),
      triggers_(io),
      passed_on_(io),
      hold_timer_(io),
      target_timer_(io),
      watchdog_timer_(io) {
  status_.drain_delay = cfg.drain_delay;
  status_.hold_needed = cfg.drain_delay + cfg.exit_timeout;
  if (cfg.inhibit == inhibit_mode::off) status_.inhibitor = shim_status::inhibitor_state::disabled;
}

shutdown_shim::~shutdown_shim() = default;

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
  triggers_.add(SIGTERM);
  triggers_.add(SIGINT);
  wait_for_signals();
  start_watchdog();

  server_.listen(cfg_.listen);
  status_.listener_bound = true;
  events_.record(event_kind::Started, "start", "shutdown-shim started",
                 {{"version", SHUTDOWN_SHIM_VERSION},
                  {"listen", listen_list(cfg_.listen)},
                  {"target", target_description()},
                  {"signal", signal_name(cfg_.signal)},
                  {"drain_delay", format_duration(cfg_.drain_delay)},
                  {"signal_delay", format_duration(cfg_.signal_delay)},
                  {"exit_timeout", format_duration(cfg_.exit_timeout)}});

  if (cfg_.inhibit == inhibit_mode::off) {
    start_child();
    on_inhibitor_ready({});
    return;
  }
  // With --inhibit=required the command starts only once the lock is held, so that a failed start
  // leaves nothing running.
  if (cfg_.inhibit == inhibit_mode::automatic) start_child();
  auto why = fmt::format(
      "Keeping the reboot until kube-apiserver has left the load balancer (drain {}, up to {})",
      format_duration(cfg_.drain_delay), format_duration(cfg_.drain_delay + cfg_.exit_timeout));
  inhibitor_ = std::make_unique<logind_inhibitor>(
      io_, log_, events_, status_, why,
      logind_inhibitor::handlers{[this](bool active, const std::string& cause) {
                                   auto now = clock::now();
                                   apply(active ? sequence_.trigger(
                                                      now, seq::trigger_kind::prepare_for_shutdown,
                                                      cause, seq::forward_decision::forward)
                                                : sequence_.cancel(cause));
                                 },
                                 [this](const std::string& error) { on_inhibitor_ready(error); },
                                 [this] { notify_status(); },
                                 [this](std::uint64_t usec) {
                                   if (ensurer_) ensurer_->start(usec);
                                 }});
  if (cfg_.ensure_inhibit_delay != ensure_mode::off) {
    ensurer_ = std::make_unique<inhibit_delay_ensurer>(
        io_, log_, events_, status_, cfg_,
        inhibit_delay_ensurer::bus_calls{
            [this](auto done) { inhibitor_->reload_logind(std::move(done)); },
            [this](auto done) { inhibitor_->read_inhibit_delay(std::move(done)); }},
        inhibit_delay_ensurer::handlers{[this] { notify_status(); },
                                        [this](const std::string& error) {
                                          if (!error.empty() &&
                                              cfg_.ensure_inhibit_delay == ensure_mode::required) {
                                            finish({shim_outcome::kind::ensure_failed, 0, error});
                                          }
                                        }});
  }
  inhibitor_->start();
}

void shutdown_shim::start_child() {
  if (!cfg_.target.wrapper() || child_) return;
  child_ = std::make_unique<child_process>(io_, cfg_.target.command);
  log_.info("started the command",
            {{"pid", std::to_string(child_->pid())}, {"command", cfg_.target.command.front()}});
  child_->on_exit([this](int code) { on_child_exit(code); });
  for (int s : {SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, SIGALRM}) passed_on_.add(s);
  // As PID 1 (a container's init) every orphan is ours to reap.
  if (getpid() == 1) passed_on_.add(SIGCHLD);
  wait_for_forwarded_signals();
}

void shutdown_shim::on_inhibitor_ready(const std::string& error) {
  if (!error.empty() && cfg_.inhibit == inhibit_mode::required) {
    return finish({shim_outcome::kind::inhibit_failed, 0, error});
  }
  // A stop that came while the lock was being taken: the command is not started at all.
  if (cfg_.inhibit == inhibit_mode::required && !sequence_.draining()) start_child();
  if (!ready_notified_) {
    ready_notified_ = true;
    notify_status();
    sd_notify(0, "READY=1");
  }
}

void shutdown_shim::wait_for_signals() {
  triggers_.async_wait([this](const boost::system::error_code& ec, int signal) {
    if (ec) return;
    on_trigger_signal(signal);
    wait_for_signals();
  });
}

void shutdown_shim::wait_for_forwarded_signals() {
  passed_on_.async_wait([this](const boost::system::error_code& ec, int signal) {
    if (ec) return;
    if (signal == SIGCHLD) {
      child_->reap_all();
    } else if (child_->running()) {
      log_.info("passing a signal on to the child", {{"signal", signal_name(signal)}});
      child_->send_signal(signal);
    }
    wait_for_forwarded_signals();
  });
}

void shutdown_shim::on_trigger_signal(int signal) {
  auto kind = signal == SIGINT ? seq::trigger_kind::sigint : seq::trigger_kind::sigterm;
  std::string cause = signal_name(signal);
  auto decision = seq::forward_decision::ask_system_state;
  std::string why;
  switch (cfg_.forward_on_sigterm) {
    case forward_policy::always:
      decision = seq::forward_decision::forward;
      why = "--forward-on-sigterm=always";
      break;
    case forward_policy::never:
      decision = seq::forward_decision::skip;
      why = "--forward-on-sigterm=never";
      break;
    case forward_policy::automatic:
      if (cfg_.target.wrapper()) {
        decision = seq::forward_decision::forward;
        why = "wrapper mode: the shim's stop is the container's stop";
      } else if (!inhibitor_) {
        decision = seq::forward_decision::skip;
        why = "--inhibit=off: PID 1 cannot be asked, so the stop is taken for the shim's alone";
      } else {
        why = "attach mode: forwarding only if PID 1's manager is stopping";
      }
      break;
  }
  log_.notice("received " + cause, {{"forward", why}});
  apply(sequence_.trigger(clock::now(), kind, cause, decision));
}

void shutdown_shim::apply(const seq::actions& actions) {
  using kind = seq::action::kind;
  for (const auto& a : actions) {
    switch (a.what) {
      case kind::become_unready:
        status_.draining_since = std::chrono::system_clock::now();
        status_.drain_cause = a.cause;
        // Stamped with the moment the drain is counted from, not the (later) moment of writing:
        // the event log must show a hold of at least the drain.
        events_.record(event_kind::ShutdownInitiated, a.cause, a.message, {}, a.at);
        break;
      case kind::become_ready:
        log_.notice("ready again", {{"why", a.message}});
        break;
      case kind::notify_stopping:
        sd_notify(0, "STOPPING=1");
        break;
      case kind::ask_system_state:
        inhibitor_->query_system_state(
            [this](std::optional<std::string> state, const std::string& error) {
              if (!state) log_.warning("could not read PID 1's SystemState", {{"error", error}});
              std::string s = state.value_or("unknown");
              apply(sequence_.system_state(clock::now(), s == "stopping", s));
            });
        break;
      case kind::forward_signal:
        forward_signal();
        break;
      case kind::watch_target:
        target_backoff_.reset();
        watch_for_target();
        break;
      case kind::arm_timer:
        hold_timer_.expires_at(a.at);
        hold_timer_.async_wait([this](const boost::system::error_code& ec) {
          if (!ec) apply(sequence_.timer_expired(clock::now()));
        });
        break;
      case kind::cancel_timer:
        hold_timer_.cancel();
        break;
      case kind::release_inhibitor:
        if (inhibitor_) {
          inhibitor_->release("hold over");
        } else {
          events_.record(event_kind::InhibitorReleased, "hold over",
                         "hold over (--inhibit=off: no lock to release)");
        }
        break;
      case kind::retake_inhibitor:
        if (inhibitor_) inhibitor_->retake();
        break;
      case kind::exit:
        if (child_ && child_->running()) {
          exit_pending_ = true;
          log_.info("waiting for the child to exit", {{"pid", std::to_string(child_->pid())}});
        } else if (child_) {
          finish({shim_outcome::kind::child_exited, child_->exit_code().value_or(0), {}});
        } else {
          finish({});
        }
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
  status_.draining = sequence_.draining();
  status_.waiting_for_target = sequence_.waiting_for_target();
  if (!status_.draining) {
    status_.draining_since.reset();
    status_.drain_cause.clear();
  }
  notify_status();
}

void shutdown_shim::forward_signal() {
  const std::string sig = signal_name(cfg_.signal);
  if (child_) {
    if (!child_->running()) return no_target("the child has already exited");
    if (child_signalled_) {
      log_.notice("the child already had its signal; not sending another");
      return;
    }
    if (child_->send_signal(cfg_.signal)) {
      child_signalled_ = true;
      ++status_.signals_forwarded;
      events_.record(event_kind::SignalForwarded, status_.drain_cause,
                     "sent " + sig + " to the child",
                     {{"target_pid", std::to_string(child_->pid())}, {"signal", sig}});
    }
    return;
  }

  auto found = resolve_target(cfg_.target);
  int sent = 0;
  for (pid_t pid : found.pids) {
    if (signalled_.count(pid)) {
      log_.notice("already signalled and still running; not sending another",
                  {{"pid", std::to_string(pid)}});
      continue;
    }
    try {
      auto process = process_handle::open(pid);
      if (!process || !process->send_signal(cfg_.signal)) continue;
      ++sent;
      ++status_.signals_forwarded;
      signalled_.insert(pid);
      events_.record(event_kind::SignalForwarded, status_.drain_cause,
                     fmt::format("sent {} to {}", sig, target_description()),
                     {{"target_pid", std::to_string(pid)}, {"signal", sig}});
      watcher_.watch(std::move(*process), [this](pid_t gone) {
        signalled_.erase(gone);
        events_.record(event_kind::TargetExited, "pidfd", "the target exited",
                       {{"target_pid", std::to_string(gone)}});
        if (signalled_.empty()) apply(sequence_.target_exited(clock::now(), "the target exited"));
      });
    } catch (const std::system_error& e) {
      log_.error("could not signal the target",
                 {{"pid", std::to_string(pid)}, {"error", e.what()}});
    }
  }
  if (sent == 0 && signalled_.empty()) {
    no_target(found.pids.empty() ? found.reason : "every target had exited before the signal");
  }
}

void shutdown_shim::no_target(const std::string& why) {
  log_.warning("no target to signal", {{"target", target_description()}, {"reason", why}});
  // Not from inside the actions being applied: the sequence must finish this step first.
  asio::post(io_, [this, why] { apply(sequence_.target_exited(clock::now(), why)); });
}

void shutdown_shim::watch_for_target() {
  auto found = resolve_target(cfg_.target);
  if (!found.pids.empty()) {
    log_.notice("a target is running again", {{"pid", std::to_string(found.pids.front())}});
    apply(sequence_.target_running());
    return;
  }
  target_timer_.expires_after(target_backoff_.next());
  target_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec && sequence_.waiting_for_target()) watch_for_target();
  });
}

void shutdown_shim::on_child_exit(int code) {
  events_.record(
      event_kind::TargetExited, "child", fmt::format("the child exited with {}", code),
      {{"target_pid", std::to_string(child_->pid())}, {"exit_code", std::to_string(code)}});
  apply(sequence_.target_exited(clock::now(), fmt::format("the child exited with {}", code)));
  if (exit_pending_) finish({shim_outcome::kind::child_exited, code, {}});
}

void shutdown_shim::notify_status() {
  std::string text;
  if (status_.draining) {
    text = status_.inhibitor == shim_status::inhibitor_state::released
               ? "hold over, unready: " + status_.drain_cause
               : "draining, reboot on hold: " + status_.drain_cause;
  } else if (status_.waiting_for_target) {
    text = "shutdown cancelled; waiting for the target to run again";
  } else if (status_.ready()) {
    text = status_.inhibitor == shim_status::inhibitor_state::held
               ? "ready; holding a logind delay lock"
               : "ready; no logind lock (" +
                     (status_.inhibitor_detail.empty() ? std::string("--inhibit=off")
                                                       : status_.inhibitor_detail) +
                     ")";
  } else {
    text = "starting";
  }
  if (status_.logind_delay_too_short()) text += "; WARNING: logind InhibitDelayMaxSec too short";
  sd_notify(0, ("STATUS=" + text).c_str());
}

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
  server_.stop();
  triggers_.cancel();
  passed_on_.cancel();
  hold_timer_.cancel();
  target_timer_.cancel();
  watchdog_timer_.cancel();
  watcher_.clear();
  io_.stop();
}

shim_outcome shutdown_shim::run() {
  io_.run();
  return outcome_.value_or(shim_outcome{});
}

}  // namespace shim
