#include "daemon/daemon_settings.hpp"

#include "util/signal_names.hpp"

namespace shim {

shutdown_sequence::settings sequence_settings(const config& cfg) {
  using d = shutdown_sequence::duration;
  return {.drain_delay = std::chrono::duration_cast<d>(cfg.drain_delay),
          .exit_timeout = std::chrono::duration_cast<d>(cfg.exit_timeout),
          .has_target = cfg.target.any(),
          .wrapper = cfg.target.wrapper()};
}

shutdown_sequence::forwarding sigterm_forwarding(const config& cfg) {
  const auto policy = cfg.forward_on_sigterm;
  return shutdown_sequence::sigterm_forwarding(
      policy == forward_policy::automatic ? std::nullopt
                                          : std::optional(policy == forward_policy::always),
      cfg.target.wrapper(), cfg.inhibit != inhibit_mode::off);
}

logind_settings logind_settings_of(const config& cfg) {
  return {.drain_delay = cfg.drain_delay,
          .exit_timeout = cfg.exit_timeout,
          .ensure_inhibit_delay = cfg.ensure_inhibit_delay,
          .logind_conf_dir = cfg.logind_conf_dir};
}

control_desk::settings control_settings(const config& cfg) {
  return {.drain_delay = cfg.drain_delay,
          .exit_timeout = cfg.exit_timeout,
          .signal = signal_name(cfg.signal),
          .sigterm_policy = sigterm_forwarding(cfg).why};
}

kubelet_watch::settings kubelet_settings(const config& cfg) {
  return {.kubelet_config = cfg.kubelet_config,
          .static_pod_manifest = cfg.static_pod_manifest,
          .logind_conf_dir = cfg.logind_conf_dir,
          .bus = cfg.inhibit != inhibit_mode::off};
}

target_watch::settings target_settings(const config& cfg) {
  return {.target = cfg.target, .signal = cfg.signal, .state_dir = state_directory(cfg)};
}

shim_status initial_status(const config& cfg, const logger& log, const event_recorder& events) {
  shim_status s;
  s.log = &log;
  s.events = &events;
  s.drain_delay = cfg.drain_delay;
  s.hold_needed = cfg.drain_delay + cfg.exit_timeout;
  if (cfg.inhibit == inhibit_mode::off) s.logind.inhibitor = logind_row::inhibitor_state::disabled;
  s.plan = signal_plan({.drain_delay = cfg.drain_delay,
                        .exit_timeout = cfg.exit_timeout,
                        .signal_delay = cfg.signal_delay,
                        .has_target = cfg.target.any()});
  s.kubelet = kubelet_outlook({.wrapper = cfg.target.wrapper(),
                               .drain_delay = cfg.drain_delay,
                               .hold_needed = s.hold_needed,
                               .config_given = !cfg.kubelet_config.empty(),
                               .manifest_given = !cfg.static_pod_manifest.empty()});
  return s;
}

}  // namespace shim
