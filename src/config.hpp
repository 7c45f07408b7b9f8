#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "upstream_settings.hpp"

namespace shim {

enum class inhibit_mode { automatic, required, off };
enum class forward_policy { automatic, always, never };
enum class log_format { text, json };
// --ensure-inhibit-delay: off only reports a too-short InhibitDelayMaxSec; best_effort raises it
// and goes on with a warning if it cannot; required exits 1 if it cannot.
enum class ensure_mode { off, best_effort, required };

struct listen_address {
  std::string host;  // literal IPv4 or IPv6 address, without brackets
  std::uint16_t port = 0;
  friend bool operator==(const listen_address&, const listen_address&) = default;
};

// "0.0.0.0:6080", "[::]:6080"; a list joined with commas.
std::string format_listen_address(const listen_address& address);
std::string format_listen_addresses(const std::vector<listen_address>& addresses);

// How the shim finds the process it signals. At most one of these is set.
struct target_spec {
  std::optional<pid_t> pid;
  std::string pidfile;
  std::string name;  // matched against /proc/PID/comm
  // --target-name counts only processes whose real and effective uid are this (--target-user).
  uid_t name_uid = 0;
  std::vector<std::string> command;  // wrapper mode: the shim starts it as its child

  bool wrapper() const { return !command.empty(); }
  bool any() const { return pid || !pidfile.empty() || !name.empty() || wrapper(); }
};

struct config {
  enum class action { run, help, version };
  action what = action::run;

  std::vector<listen_address> listen{{"0.0.0.0", 6080}};
  std::chrono::nanoseconds drain_delay = std::chrono::seconds(70);
  std::chrono::nanoseconds signal_delay{0};
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
  // pod manifest, read to work out what kubelet does to kube-apiserver at a shutdown; empty: not
  // read (kubelet's lock is still looked for).
  std::string kubelet_config;
  std::string static_pod_manifest;
};

inline constexpr std::string_view kDefaultStateDir = "/run/shutdown-shim";

// The longest any duration flag may be. A hold of more than a day is a typo, not a plan, and the
// bound keeps every sum of flag durations far from overflow: --drain-delay=2562047h47m16s once
// wrapped around and ended the hold almost at once (issue 8, item 9; docs/benchmarks.md).
inline constexpr std::chrono::hours kMaxFlagDuration{24};

// A bad flag or value. The message is one line naming the flag and what is wrong.
class usage_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses argv (without argv[0]). Throws usage_error.
config parse_flags(std::span<const std::string_view> args);

// Go's time.ParseDuration syntax as Kubernetes users write it: "70s", "1m30s", "250ms", "0".
// Negative durations are refused. Throws std::invalid_argument with the reason.
std::chrono::nanoseconds parse_duration(std::string_view text);

// Go-style rendering for logs: "1m10s", "250ms", "0s".
std::string format_duration(std::chrono::nanoseconds d);

// The same rendering of unsigned microseconds (logind's unit), for every value up to UINT64_MAX,
// which nanoseconds cannot hold beyond about 292 years.
std::string format_usec(std::uint64_t usec);

// "TERM", "SIGTERM", "15", "sigterm" -> 15. Throws std::invalid_argument.
int parse_signal(std::string_view text);

// 15 -> "SIGTERM"; unknown numbers render as "signal N".
std::string signal_name(int signal);

std::string usage_text();

}  // namespace shim
