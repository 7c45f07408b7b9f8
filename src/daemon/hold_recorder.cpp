#include "daemon/hold_recorder.hpp"

#include "util/build_version.hpp"
#include "util/duration_text.hpp"
#include "util/signal_names.hpp"

namespace shim {

void hold_recorder::started() {
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
}

void hold_recorder::hold_began(const shutdown_sequence::action& a) {
  if (!a.event) return log_.notice(a.message);
  const event_kind event = *a.event;
  if (event == event_kind::Restart) {
    // No hold record: a restarted shim has no shutdown to resume.
    return events_.record(event, a.cause, a.message,
                          {{"system_state", system_state_.empty() ? "not asked" : system_state_},
                           {"forward", forward_why_}},
                          a.at);
  }
  log_fields fields;
  if (event == event_kind::ShutdownResumed) {
    for (pid_t pid : target_.signalled()) fields.emplace_back("target_pid", std::to_string(pid));
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

// A SIGTERM not passed on (a.message says why) lets go of a lock no shutdown waits for; only at
// the end of a hold does the shutdown go on.
void hold_recorder::released(const shutdown_sequence::action& a) {
  const bool bus = cfg_.inhibit != inhibit_mode::off;
  const bool held = status_.logind.inhibitor == logind_row::inhibitor_state::held;
  const std::string lock = held  ? "closed the logind lock"
                           : bus ? "no lock was held"
                                 : "--inhibit=off: no lock to release";
  events_.record(event_kind::InhibitorReleased, bus ? a.cause : "hold over",
                 a.message.empty()
                     ? (held ? lock + ": the shutdown goes on" : "hold over (" + lock + ")")
                     : a.message + " (" + lock + ")");
}

void hold_recorder::note(const shutdown_sequence::action& a, const load_balancer_watch& lb) {
  if (!a.event) return log_.info(a.message);
  events_.record(*a.event, a.message, a.message,
                 a.event == event_kind::DrainElapsed ? lb.fields(cfg_.drain_delay) : log_fields{});
}

}  // namespace shim
