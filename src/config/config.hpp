#pragma once

#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/flag_table.hpp"
#include "config/usage_error.hpp"
#include "http/listen_address.hpp"
#include "log/log_level.hpp"
#include "logind/logind_settings.hpp"
#include "process/target_spec.hpp"
#include "upstream/upstream_settings.hpp"

namespace shim {

// The values of the flags that pick a mode.
enum class inhibit_mode { automatic, required, off };
enum class forward_policy { automatic, always, never };

struct config {
  enum class action { run, help, version };
  action what = action::run;

  std::vector<listen_address> listen{{"0.0.0.0", 6080}};
  std::chrono::nanoseconds drain_delay = std::chrono::seconds(70);
  // --signal-delay, when given; else the shim plans the signal from kube-apiserver's own shutdown
  // delay (apiserver/signal_plan.hpp).
  std::optional<std::chrono::nanoseconds> signal_delay;
  std::chrono::nanoseconds exit_timeout = std::chrono::seconds(65);
  int signal = 15;  // SIGTERM
  target_spec target;
  inhibit_mode inhibit = inhibit_mode::automatic;
  forward_policy forward_on_sigterm = forward_policy::automatic;
  std::string event_log;
  log_format format = log_format::text;
  ensure_mode ensure_inhibit_delay = ensure_mode::off;
  // Where --ensure-inhibit-delay writes its drop-in; its parent holds logind.conf (tests point it
  // into a sandbox's /etc/systemd).
  std::string logind_conf_dir = "/etc/systemd/logind.conf.d";
  // Where the record of signalled processes is kept (see signal_record.hpp); empty: systemd's
  // $RUNTIME_DIRECTORY, else kDefaultStateDir.
  std::string state_dir;
  // --upstream-*: kube-apiserver's own /readyz as a readiness check; off without
  // --upstream-readyz.
  upstream_settings upstream;
  // kubelet's graceful node shutdown (issue 13): kubelet's config file and kube-apiserver's static
  // pod manifest (or kubelet's static pod directory, for etcd's too), read to work out what kubelet
  // does to kube-apiserver at a shutdown; empty: not read (kubelet's lock is still looked for).
  std::string kubelet_config;
  std::string static_pod_manifest;
};

inline constexpr std::string_view kDefaultStateDir = "/run/shutdown-shim";

// The longest any duration flag may be. A hold of more than a day is a typo, not a plan, and the
// bound keeps every sum of flag durations far from overflow (issue 8, item 9).
inline constexpr std::chrono::hours kMaxFlagDuration{24};

// Where the record of signalled processes and the control socket are: --state-dir, else systemd's
// RuntimeDirectory= (the first, if it lists several), else kDefaultStateDir.
std::string state_directory(const config& cfg);

// The daemon's flags: what parse_flags() reads and --help shows.
const flag_table<config>& daemon_flags();

// Parses argv (without argv[0]). Throws usage_error.
config parse_flags(std::span<const std::string_view> args);

// --help's "Flags:" section: every flag of daemon_flags(), and the syntax of their values.
std::string daemon_flags_help();

}  // namespace shim
