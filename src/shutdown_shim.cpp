#include "shutdown_shim.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <filesystem>
#include <stdexcept>
#include <vector>

#include "apiserver/apiserver_flags.hpp"
#include "report/shutdown_history.hpp"
#include "util/boot_id.hpp"
#include "util/build_version.hpp"
#include "util/duration_text.hpp"
#include "util/signal_names.hpp"

namespace shim {

namespace asio = boost::asio;

namespace {

shutdown_sequence::settings sequence_settings(const config& cfg) {
  using d = shutdown_sequence::duration;
  return {.drain_delay = std::chrono::duration_cast<d>(cfg.drain_delay),
          .exit_timeout = std::chrono::duration_cast<d>(cfg.exit_timeout),
          .has_target = cfg.target.any(),
          .wrapper = cfg.target.wrapper()};
}

using http_status = boost::beast::http::status;

std::string_view phase_name(const shutdown_sequence& s) {
  if (s.drilling()) return "drill";
  if (s.holding()) return "shutdown";
  if (s.draining()) return "released";
  if (s.waiting_for_target()) return "waiting-for-target";
  return "idle";
}

}  // namespace

shutdown_shim::shutdown_shim(asio::io_context& io, const config& cfg, logger& log,
                             event_recorder& events)
    : io_(io),
      cfg_(cfg),
      log_(log),
      events_(events),
      runner_(sequence_settings(cfg), {.carry_out = [this](const seq::action& a) { carry_out(a); },
                                       .settled = [this] { settled(); }}),
      lb_(io, cfg.upstream.enabled() ? cfg.upstream.url.port : 0, log),
      server_(io, status_, {},
              [this](const boost::asio::ip::address& from, bool ready) {
                lb_.probe_answered(from, ready);
                status_.last_probe = clock::now();
              }),
      control_(io, control_answers()),
      kubelet_(io, cfg, log, status_.kubelet,
               {.gone =
                    [this] {
                      runner_.feed([now = clock::now()](seq& s) { return s.kubelet_gone(now); });
                    },
                .changed = [this] { kubelet_changed(); }}),
      target_(
          io, cfg, log, events, status_, runner_.sequence(),
          {.changed = [this] { notify_status(); },
           .exited =
               [this](const std::string& detail) {
                 runner_.feed(
                     [now = clock::now(), detail](seq& s) { return s.target_exited(now, detail); });
               },
           .missed =
               [this](const std::string& why) {
                 runner_.feed([now = clock::now(), why](seq& s) { return s.no_target(now, why); });
               },
           .running_again = [this] { runner_.feed([](seq& s) { return s.target_running(); }); },
           .started =
               [this] {
                 runner_.feed([now = clock::now()](seq& s) { return s.target_started(now); });
               },
           .child_exited = [this](int code) { on_child_exit(code); },
           .command_line =
               [this](const std::vector<std::string>& argv, const std::string& source) {
                 plan_from(argv, source, /*running=*/true);
               }}),
      signals_(io, {.trigger = [this](int signal) { on_trigger_signal(signal); },
                    .stray = [this](int signal, bool own) { on_stray_signal(signal, own); }}),
      hold_timer_(io),
      watchdog_timer_(io),
      lb_check_timer_(io) {
  status_.drain_delay = cfg.drain_delay;
  status_.hold_needed = cfg.drain_delay + cfg.exit_timeout;
  status_.log = &log;
  status_.events = &events;
  if (cfg.inhibit == inhibit_mode::off)
    status_.logind.inhibitor = logind_row::inhibitor_state::disabled;
  status_.plan = signal_plan({.drain_delay = cfg.drain_delay,
                              .exit_timeout = cfg.exit_timeout,
                              .signal_delay = cfg.signal_delay,
                              .has_target = cfg.target.any()});
  status_.kubelet = kubelet_outlook({.wrapper = cfg.target.wrapper(),
                                     .drain_delay = cfg.drain_delay,
                                     .hold_needed = status_.hold_needed,
                                     .config_given = !cfg.kubelet_config.empty(),
                                     .manifest_given = !cfg.static_pod_manifest.empty()});
}

shutdown_shim::~shutdown_shim() = default;

void shutdown_shim::start() {
  // Signals first, so that a SIGTERM during start-up already runs the sequence.
  // As PID 1 (a container's init) every orphan is ours to reap.
  signals_.start(cfg_.target.wrapper() && getpid() == 1);
  start_watchdog();

  server_.listen(cfg_.listen);
  status_.listener_bound = true;
  status_.listening_since = clock::now();
  // Once: whether a load balancer checks this shim is known only after a window of its probes.
  if (status_.plan.applies()) {
    lb_check_timer_.expires_after(shim_status::kLbProbeWindow);
    lb_check_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) lb_known();
    });
  }
  events_.record(
      event_kind::Started, "start", "shutdown-shim started",
      {{"version", std::string(kVersion)},
       {"revision", std::string(kRevision)},
       {"listen", format_listen_addresses(cfg_.listen)},
       {"target", describe_target(cfg_.target)},
       {"signal", signal_name(cfg_.signal)},
       {"drain_delay", format_duration(cfg_.drain_delay)},
       {"signal_delay", cfg_.signal_delay ? format_duration(*cfg_.signal_delay) : "planned"},
       {"exit_timeout", format_duration(cfg_.exit_timeout)},
       {"upstream", cfg_.upstream.enabled() ? cfg_.upstream.url.text() : "none"}});
  record_previous_shutdown();
  start_control();

  // Only now: what the record says was signalled never counts as the target.
  target_.start();
  if (cfg_.upstream.enabled()) start_upstream();
  kubelet_.start();

  // At start-up a command that cannot be started ends the shim (main() logs it, exit 1).
  const auto start_child = [this] {
    if (auto started = target_.start_child(); !started) throw std::runtime_error(started.error());
  };
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

// --- the control socket ----------------------------------------------------------------------

http_answers shutdown_shim::control_answers() {
  const control_handlers handlers{
      .status = [this](bool json) { return answer_status(json); },
      .start_drill = [this](const drill_request& r) { return answer_start_drill(r); },
      .drill = [this](bool json) { return answer_drill(json); },
      .stop_drill = [this](bool json) { return answer_stop_drill(json); },
  };
  return control_http_answers(handlers);
}

// Not a reason to stop: the shim works without it, and says why there is none.
void shutdown_shim::start_control() {
  const std::filesystem::path dir = state_directory(cfg_);
  std::error_code ec;
  if (std::filesystem::create_directory(dir, ec)) {
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all, ec);
  }
  try {
    control_.listen(dir / kControlSocketName);
  } catch (const std::system_error& e) {
    log_.warning("no control socket: shutdown-shim status and drill cannot reach this shim",
                 {{"error", e.what()}});
  }
}

status_snapshot shutdown_shim::snapshot() const {
  const auto& sequence = runner_.sequence();
  const auto now = clock::now();
  status_snapshot snap{
      .status = status_,
      .version = kVersion,
      .phase = phase_name(sequence),
      .signal = signal_name(cfg_.signal),
      .sigterm_policy = seq::sigterm_forwarding(cfg_.forward_on_sigterm, cfg_.target.wrapper(),
                                                logind_ != nullptr)
                            .why,
      .signal_delay = status_.plan.signal_delay(),
      .exit_timeout = cfg_.exit_timeout,
  };
  if (auto since = sequence.unready_since()) {
    snap.elapsed = now - *since;
    snap.signal_sent = sequence.signal_sent();
  }
  if (auto started = sequence.drill_started()) {
    snap.drill_elapsed = now - *started;
    snap.drill_left = std::max(*sequence.drill_end() - now, clock::duration(0));
  }
  if (sequence.drilling() || sequence.draining()) {
    snap.lb_line = lb_.summary(cfg_.drain_delay);
    snap.lb_fields = lb_.fields(cfg_.drain_delay);
  }
  snap.last_drill = last_drill_;
  return snap;
}

control_reply shutdown_shim::answer_status(bool json) const {
  const auto snap = snapshot();
  return {.code = status_.ready() ? http_status::ok : http_status::service_unavailable,
          .body = json ? status_json(snap) : status_text(snap),
          .json = json};
}

std::string shutdown_shim::drill_progress() const {
  const auto& sequence = runner_.sequence();
  const auto now = clock::now();
  const auto started = sequence.drill_started().value_or(now);
  const auto end = sequence.drill_end().value_or(now);
  return fmt::format("drill: {} elapsed, {} left; {}",
                     format_duration(std::chrono::round<std::chrono::milliseconds>(now - started)),
                     format_duration(std::chrono::round<std::chrono::seconds>(end - now)),
                     lb_.summary(cfg_.drain_delay));
}

control_reply shutdown_shim::answer_start_drill(const drill_request& r) {
  if (auto why = runner_.sequence().drill_refusal()) {
    return {.code = http_status::conflict, .body = "no drill: " + *why + "\n", .json = false};
  }
  const auto length = r.duration.value_or(cfg_.drain_delay);
  if (length <= std::chrono::nanoseconds(0)) {
    return {.code = http_status::bad_request,
            .body = "no drill: --drain-delay is 0s; give the drill a --duration\n",
            .json = false};
  }
  drill_fall_ = r.lb_fall;
  const std::string cause = r.who.empty() ? "shutdown-shim drill" : "shutdown-shim drill, " + r.who;
  runner_.feed([now = clock::now(), d = std::chrono::duration_cast<clock::duration>(length),
                cause](seq& s) { return s.drill(now, d, cause); });
  return answer_drill(r.json);
}

control_reply shutdown_shim::answer_drill(bool json) const {
  const auto& sequence = runner_.sequence();
  if (!sequence.drilling() && last_drill_.empty()) {
    return {.code = http_status::not_found, .body = "no drill since the shim started\n"};
  }
  const std::string line = sequence.drilling() ? drill_progress() : "last drill: " + last_drill_;
  if (!json) return {.code = http_status::ok, .body = line + "\n", .json = false};
  // Flat, so that the CLI reads it with the event log's reader.
  std::string body = "{";
  append_json_string(body, "drilling", sequence.drilling() ? "yes" : "no");
  body += ',';
  append_json_string(body, "summary", line);
  body += ',';
  append_json_string(body, "checkers", lb_.has_checkers() ? "yes" : "no");
  for (const auto& [key, value] : lb_.fields(cfg_.drain_delay)) {
    body += ',';
    append_json_string(body, key, value);
  }
  body += "}\n";
  return {.code = http_status::ok, .body = body, .json = true};
}

control_reply shutdown_shim::answer_stop_drill(bool json) {
  if (!runner_.sequence().drilling()) {
    return {.code = http_status::conflict, .body = "no drill under way\n", .json = false};
  }
  runner_.feed([](seq& s) { return s.stop_drill("shutdown-shim drill --stop"); });
  return answer_drill(json);
}

// Once, before the loop runs: one streamed pass over the event log, during which nothing is
// answered and the lock is not asked for yet. A large log takes a noticeable part of a second
// (a 100 MB one was timed beside ShimReport's cases: docs/benchmarks.md); run on the loop later,
// it would hold up probes as long.
void shutdown_shim::record_previous_shutdown() {
  if (cfg_.event_log.empty()) return;
  const std::string boot = current_boot_id();
  if (boot.empty()) {
    log_.warning("this boot's id is unreadable: the previous shutdown is not looked for");
    return;
  }
  auto read = read_previous_shutdown(cfg_.event_log, boot);
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
  logind_ = std::make_unique<logind_edge>(
      io_, cfg_, log_, events_, status_.logind,
      logind_edge::handlers{
          .prepare_for_shutdown =
              [this](bool active, const std::string& cause) {
                on_prepare_for_shutdown(active, cause);
              },
          .preparing_read = [this](bool preparing) { on_preparing_read(preparing); },
          .first_attempt_done = [this](const result<>& outcome) { on_first_attempt(outcome); },
          .delay_locks_listed =
              [this](const std::vector<logind_inhibitor::listed_lock>& locks) {
                kubelet_.locks_listed(locks);
              },
          .ensure_failed =
              [this](const std::string& error) {
                finish({shim_outcome::kind::ensure_failed, 0, error});
              },
          .changed = [this] { notify_status(); },
      });
  logind_->start();
}

void shutdown_shim::on_stray_signal(int signal, bool own) {
  if (signal == SIGCHLD) return target_.reap_orphans();
  if (signal == SIGHUP) {
    // logrotate's convention: the event log is opened again at its path; nothing else changes.
    // A failure is logged there, and the old file is kept.
    events_.reopen();
  }
  if (!own && target_.pass_on(signal)) return;
  if (signal != SIGHUP && signal != SIGWINCH) {
    log_.notice("ignoring a signal", {{"signal", signal_name(signal)}});
  }
}

void shutdown_shim::on_trigger_signal(int signal) {
  const auto kind = signal == SIGINT ? seq::trigger_kind::sigint : seq::trigger_kind::sigterm;
  const std::string cause = signal_name(signal);
  const auto forwarding =
      seq::sigterm_forwarding(cfg_.forward_on_sigterm, cfg_.target.wrapper(), logind_ != nullptr);
  log_.notice("received " + cause, {{"forward", forwarding.why}});
  forward_why_ = forwarding.why;
  runner_.feed([now = clock::now(), kind, cause, timing = timing(forwarding.decision)](seq& s) {
    return s.trigger(now, kind, cause, timing);
  });
}

void shutdown_shim::on_prepare_for_shutdown(bool active, const std::string& cause) {
  if (!active) return runner_.feed([cause](seq& s) { return s.cancel(cause); });
  // What the shim knows of kubelet at this moment decides; kubelet_watch logged it already.
  const auto decision = status_.kubelet.leaves_signal_to_kubelet()
                            ? seq::forward_decision::kubelet_signals
                            : seq::forward_decision::forward;
  runner_.feed([now = clock::now(), cause, timing = timing(decision)](seq& s) {
    return s.trigger(now, seq::trigger_kind::prepare_for_shutdown, cause, timing);
  });
}

void shutdown_shim::on_preparing_read(bool preparing) {
  const auto& sequence = runner_.sequence();
  if (!preparing) {
    // The shutdown an earlier run recorded is over: never resume it later.
    if (target_.resumable()) target_.forget_shutdown();
    // A restarted logind forgets a delayed shutdown, and a PrepareForShutdown(false) sent while
    // the bus was down is never seen: what logind says now is what counts.
    if (sequence.draining()) {
      runner_.feed([](seq& s) { return s.cancel("logind is not preparing a shutdown any more"); });
    }
    return;
  }
  if (sequence.draining()) return;
  if (target_.resumable()) {
    const auto r = target_.resume();
    const auto decision = status_.kubelet.leaves_signal_to_kubelet()
                              ? seq::forward_decision::kubelet_signals
                              : seq::forward_decision::forward;
    runner_.feed([now = clock::now(), hold = seq::resumed_hold{.unready_at = r.unready_at,
                                                               .cause = r.cause,
                                                               .target_running = r.running,
                                                               .signalled = r.signalled,
                                                               .left_to_kubelet = r.left_to_kubelet,
                                                               .timing = timing(decision)}](
                     seq& s) { return s.resume(now, hold); });
    // kubelet restarted kube-apiserver while no shim ran: the new one is owed its signal.
    if (r.signalled && r.unsignalled_running) {
      runner_.feed([now = clock::now()](seq& s) { return s.target_started(now); });
    }
    // logind's list came before this answer: a kubelet gone while no shim ran owes its signal.
    if (r.left_to_kubelet && kubelet_.listed() && !status_.kubelet.kubelet_pid()) {
      runner_.feed([now = clock::now()](seq& s) { return s.kubelet_gone(now); });
    }
    return;
  }
  on_prepare_for_shutdown(true, "PreparingForShutdown=true when connecting");
}

// Once: from logind_edge, or at start with --inhibit=off.
void shutdown_shim::on_first_attempt(const result<>& outcome) {
  if (!outcome && cfg_.inhibit == inhibit_mode::required) {
    return finish({shim_outcome::kind::inhibit_failed, 0, outcome.error()});
  }
  // A stop that came while the lock was being taken: the command is not started at all. On the
  // loop a failed start is logged (as run() logged it when it was thrown), and READY=1 is not sent.
  if (cfg_.inhibit == inhibit_mode::required && !runner_.sequence().draining()) {
    if (auto started = target_.start_child(); !started) {
      log_.error("a handler on the event loop failed; the loop goes on",
                 {{"error", started.error()}});
      return;
    }
  }
  if (!ready_notified_) {
    ready_notified_ = true;
    notify_status();
    sd_notify(0, "READY=1");
  }
}

void shutdown_shim::carry_out(const seq::action& a) {
  using kind = seq::action::kind;
  switch (a.what) {
    case kind::become_unready:
      status_.draining_since = std::chrono::system_clock::now() - (clock::now() - a.at);
      status_.drain_cause = a.cause;
      if (a.event) {
        record_start(a);
      } else {
        log_.notice(a.message);
      }
      // A shutdown wins at once, whatever the upstream says; probing stops for the drain
      // (upstream_check.hpp says why) and starts again after a cancel (settled()).
      if (upstream_) upstream_->pause();
      // What the load balancer makes of it, for DrainElapsed (a drill that became this shutdown
      // goes on with its own measurement).
      lb_.begin(a.at, load_balancer_watch::kDefaultFall);
      break;
    case kind::record_start:
      record_start(a);
      break;
    case kind::become_ready:
      log_.notice("ready again", {{"why", a.message}});
      lb_.end();
      break;
    case kind::notify_stopping:
      sd_notify(0, "STOPPING=1");
      break;
    case kind::ask_system_state:
      ask_system_state();
      break;
    case kind::forward_signal:
      target_.forward_signal();
      break;
    case kind::count_kubelet_signal:
      target_.leave_signal_to_kubelet();
      break;
    case kind::signal_restarted:
      target_.signal_restarted();
      break;
    case kind::leave_restarted_to_kubelet:
      target_.leave_restarted_to_kubelet();
      break;
    case kind::watch_target:
      target_.look_for_target();
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
      const bool held = status_.logind.inhibitor == logind_row::inhibitor_state::held;
      const std::string lock = held      ? "closed the logind lock"
                               : logind_ ? "no lock was held"
                                         : "--inhibit=off: no lock to release";
      // Recorded before the lock closes: logind goes on at once, and in the system suite's ensure
      // case its "System is rebooting" came before a record written after the close.
      events_.record(event_kind::InhibitorReleased, logind_ ? status_.drain_cause : "hold over",
                     a.message.empty()
                         ? (held ? lock + ": the shutdown goes on" : "hold over (" + lock + ")")
                         : a.message + " (" + lock + ")");
      if (logind_) logind_->release();
      lb_.end();
      break;
    }
    case kind::retake_inhibitor:
      // Only a cancel asks for this: the shutdown is over without a reboot.
      target_.forget_shutdown();
      if (logind_) logind_->retake();
      break;
    case kind::exit:
      request_exit();
      break;
    case kind::start_drill: {
      const auto end = runner_.sequence().drill_end().value_or(a.at);
      status_.drill = shim_status::drill_state{
          .since = std::chrono::system_clock::now() - (clock::now() - a.at),
          .started = a.at,
          .ends = end,
          .cause = a.cause};
      ++status_.drills;
      lb_.begin(a.at, drill_fall_);
      // Said at once: with no remote checker the drill cannot take the node out of the LB.
      log_fields fields{{"duration", format_duration(end - a.at)},
                        {"drain_delay", format_duration(cfg_.drain_delay)},
                        {"lb", lb_.summary(cfg_.drain_delay)}};
      events_.record(event_kind::DrillStarted, a.cause, a.message, fields, a.at);
      if (!lb_.has_checkers()) log_.warning(lb_.summary(cfg_.drain_delay));
      break;
    }
    case kind::end_drill: {
      status_.drill.reset();
      const auto served = std::chrono::round<std::chrono::milliseconds>(clock::now() - a.at);
      // A drill that became a shutdown goes on measuring for it.
      if (a.cause != "shutdown") lb_.end();
      log_fields fields{{"outcome", a.cause}, {"served", format_duration(served)}};
      for (auto& f : lb_.fields(cfg_.drain_delay)) fields.push_back(std::move(f));
      last_drill_ = fmt::format("{} after {}, at {}: {}", a.cause, format_duration(served),
                                format_wall_time(std::chrono::system_clock::now()),
                                lb_.summary(cfg_.drain_delay));
      events_.record(event_kind::DrillEnded, a.cause, "drill " + last_drill_, fields);
      break;
    }
    case kind::note:
      if (a.event == event_kind::DrainElapsed) {
        // What the load balancer did in the drain, for `report` after the reboot.
        events_.record(*a.event, a.message, a.message, lb_.fields(cfg_.drain_delay));
      } else if (a.event) {
        events_.record(*a.event, a.message, a.message);
      } else {
        log_.info(a.message);
      }
      break;
  }
}

// What began: a shutdown (ShutdownInitiated, ShutdownResumed) or the shim's own restart.
void shutdown_shim::record_start(const seq::action& a) {
  const event_kind event = a.event.value_or(event_kind::ShutdownInitiated);
  if (event == event_kind::Restart) {
    // No hold record: a restarted shim has no shutdown to resume.
    events_.record(event, a.cause, a.message,
                   {{"system_state", system_state_.empty() ? "not asked" : system_state_},
                    {"forward", forward_why_}},
                   a.at);
    return;
  }
  log_fields fields;
  if (event == event_kind::ShutdownResumed) {
    for (pid_t pid : target_.signalled()) {
      fields.emplace_back("target_pid", std::to_string(pid));
    }
  }
  // logind's limit as it stood when this hold began, for `shutdown-shim report`.
  if (status_.logind.delay_max_usec) {
    fields.emplace_back("inhibit_delay_max_usec", std::to_string(*status_.logind.delay_max_usec));
  }
  // Stamped with the moment the drain is counted from, not the (later) moment of writing:
  // the event log must show a hold of at least the drain.
  events_.record(event, a.cause, a.message, fields, a.at);
  if (event == event_kind::ShutdownResumed) return;
  target_.remember_shutdown(a.at, a.cause);
  // What kubelet is expected to do to this shutdown's target, for the operator afterwards.
  if (status_.kubelet.applies()) {
    events_.record(event_kind::KubeletShutdown, a.cause, status_.kubelet.summary(),
                   status_.kubelet.fields());
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
    target_.settled();
    if (upstream_) upstream_->resume();
  }
  notify_status();
}

void shutdown_shim::request_exit() {
  const auto* child = target_.child();
  if (child && child->running()) {
    exit_pending_ = true;
    log_.info("waiting for the child to exit", {{"pid", std::to_string(child->pid())}});
  } else if (child) {
    finish({shim_outcome::kind::child_exited, child->exit_code().value_or(0), {}});
  } else {
    finish({});
  }
}

void shutdown_shim::ask_system_state() {
  logind_->ask_system_state([this](const result<std::string>& read) {
    if (!read) log_.warning("could not read PID 1's SystemState", {{"error", read.error()}});
    const std::string state = read ? read.value() : "unknown";
    system_state_ = state;
    runner_.feed([now = clock::now(), state](seq& s) {
      return s.system_state(now, state == "stopping", state);
    });
  });
}

// Who signals the next shutdown and when, as the plan says now (issue 32).
shutdown_sequence::signal_timing shutdown_shim::timing(seq::forward_decision decision) const {
  const auto& plan = status_.kubelet.plan();
  return {.decision = decision,
          .signal_delay = std::chrono::duration_cast<seq::duration>(status_.plan.signal_delay()),
          .kubelet_by = plan ? std::chrono::duration_cast<seq::duration>(plan->sigterm_latest)
                             : seq::duration(0)};
}

// kube-apiserver's shutdown settings from a command line: the running target's, which wins, or
// the manifest's until a target has run.
void shutdown_shim::plan_from(const std::vector<std::string>& argv, const std::string& source,
                              bool running) {
  if (!running && plan_from_process_) return;
  plan_from_process_ = plan_from_process_ || running;
  if (!status_.plan.set_apiserver(read_apiserver_flags(argv), source)) return;
  const auto lb = status_.lb_checks_shim(clock::now());
  if (status_.plan.stops_accepting_early(lb)) {
    log_.warning(status_.plan.line(lb));
  } else {
    log_.notice("signal plan: " + status_.plan.line(lb));
  }
  notify_status();
}

// A minute after start: an LB that does not probe the shim checks kube-apiserver itself, and with
// a delay shorter than the drain no signal time keeps its clients whole. Said once, as a WARNING;
// the check signal-plan, STATUS= and the metric go on saying it while it lasts.
void shutdown_shim::lb_known() {
  const auto lb = status_.lb_checks_shim(clock::now());
  if (lb == false && status_.plan.stops_accepting_early(lb)) log_.warning(status_.plan.line(lb));
  notify_status();
}

void shutdown_shim::kubelet_changed() {
  const auto& plan = status_.kubelet.plan();
  status_.plan.set_kubelet(
      status_.kubelet.leaves_signal_to_kubelet() && plan
          ? std::optional(signal_plan::kubelet_window{plan->sigterm_earliest, plan->sigterm_latest})
          : std::nullopt);
  const auto& manifest = status_.kubelet.manifest_command();
  if (!manifest.empty()) {
    plan_from(manifest, "--static-pod-manifest=" + cfg_.static_pod_manifest, /*running=*/false);
  }
  notify_status();
}

void shutdown_shim::on_child_exit(int code) {
  if (exit_pending_) finish({shim_outcome::kind::child_exited, code, {}});
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
  control_.stop();
  signals_.stop();
  hold_timer_.cancel();
  watchdog_timer_.cancel();
  lb_check_timer_.cancel();
  target_.stop();
  kubelet_.stop();
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
