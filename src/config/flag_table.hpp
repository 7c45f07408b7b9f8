#pragma once

#include <array>
#include <string_view>

// The daemon's flags, for parse_flags() alone: their names, what each takes, and which may be left
// without a value.
namespace shim {

enum class flag_id {
  listen,
  drain_delay,
  signal_delay,
  exit_timeout,
  signal,
  target_pid,
  target_pidfile,
  target_name,
  target_user,
  inhibit,
  forward_on_sigterm,
  event_log,
  log_format,
  ensure_inhibit_delay,
  logind_conf_dir,
  state_dir,
  upstream_readyz,
  upstream_interval,
  upstream_timeout,
  upstream_fall,
  upstream_rise,
  upstream_ca_file,
  upstream_tls_server_name,
  upstream_insecure_skip_verify,
  upstream_client_cert,
  upstream_client_key,
  upstream_token_file,
  kubelet_config,
  static_pod_manifest,
  help,
  version,
};

struct flag_def {
  std::string_view name;
  flag_id id;
  std::string_view value_name;  // empty for flags without a value
  // The value may be left out; then it is only taken from "--flag=value", never from the next
  // argument, and default_value stands in for it.
  std::string_view default_value = {};
};

inline constexpr std::array<flag_def, 32> kFlags{{
    {"--listen", flag_id::listen, "HOST:PORT"},
    {"--drain-delay", flag_id::drain_delay, "DURATION"},
    {"--signal-delay", flag_id::signal_delay, "DURATION"},
    {"--exit-timeout", flag_id::exit_timeout, "DURATION"},
    {"--signal", flag_id::signal, "NAME"},
    {"--target-pid", flag_id::target_pid, "PID"},
    {"--target-pidfile", flag_id::target_pidfile, "PATH"},
    {"--target-name", flag_id::target_name, "NAME"},
    {"--target-user", flag_id::target_user, "NAME|UID"},
    {"--inhibit", flag_id::inhibit, "auto|required|off"},
    {"--forward-on-sigterm", flag_id::forward_on_sigterm, "auto|always|never"},
    {"--event-log", flag_id::event_log, "PATH"},
    {"--log-format", flag_id::log_format, "text|json"},
    {"--ensure-inhibit-delay", flag_id::ensure_inhibit_delay, "try|required", "try"},
    {"--logind-conf-dir", flag_id::logind_conf_dir, "PATH"},
    {"--state-dir", flag_id::state_dir, "PATH"},
    {"--upstream-readyz", flag_id::upstream_readyz, "URL"},
    {"--upstream-interval", flag_id::upstream_interval, "DURATION"},
    {"--upstream-timeout", flag_id::upstream_timeout, "DURATION"},
    {"--upstream-fall", flag_id::upstream_fall, "N"},
    {"--upstream-rise", flag_id::upstream_rise, "N"},
    {"--upstream-ca-file", flag_id::upstream_ca_file, "PATH"},
    {"--upstream-tls-server-name", flag_id::upstream_tls_server_name, "NAME"},
    {"--upstream-insecure-skip-verify", flag_id::upstream_insecure_skip_verify, ""},
    {"--upstream-client-cert", flag_id::upstream_client_cert, "PATH"},
    {"--upstream-client-key", flag_id::upstream_client_key, "PATH"},
    {"--upstream-token-file", flag_id::upstream_token_file, "PATH"},
    {"--kubelet-config", flag_id::kubelet_config, "PATH"},
    {"--static-pod-manifest", flag_id::static_pod_manifest, "PATH"},
    {"--help", flag_id::help, ""},
    {"-h", flag_id::help, ""},
    {"--version", flag_id::version, ""},
}};

inline const flag_def* find_flag(std::string_view name) {
  for (const auto& def : kFlags) {
    if (def.name == name) return &def;
  }
  return nullptr;
}

}  // namespace shim
