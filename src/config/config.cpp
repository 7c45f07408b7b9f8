#include "config/config.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <string.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <set>

#include "config/flag_table.hpp"
#include "util/ascii_digits.hpp"
#include "util/duration_text.hpp"
#include "util/signal_names.hpp"

namespace shim {
namespace {

// Quotes a user-supplied value for an error message, escaping what would garble the terminal.
std::string quoted(std::string_view s) { return fmt::format("{:?}", s); }

[[noreturn]] void bad_value(std::string_view flag, std::string_view why) {
  throw usage_error(fmt::format("{}: {}", flag, why));
}

// Every duration flag goes through here, so that each has the same syntax and the same bound.
std::chrono::nanoseconds duration_flag(std::string_view flag, std::string_view value) {
  const std::string too_long = fmt::format("{} is longer than {}, the most a duration flag may be",
                                           quoted(value), format_duration(kMaxFlagDuration));
  try {
    const auto d = parse_duration(value);
    if (d > kMaxFlagDuration) bad_value(flag, too_long);
    return d;
  } catch (const duration_error& e) {
    switch (e.problem()) {
      case duration_problem::negative:
        bad_value(flag, fmt::format("{} is negative; a delay must be 0 or more", quoted(value)));
      case duration_problem::overflow:
        bad_value(flag, too_long);
      case duration_problem::syntax:
        break;
    }
    bad_value(flag,
              fmt::format("{} is not a duration (want e.g. 70s, 1m30s, 250ms)", quoted(value)));
  }
}

// A probe interval or timeout: 0 would probe without pause, or fail every probe.
std::chrono::nanoseconds positive_duration_flag(std::string_view flag, std::string_view value) {
  const auto d = duration_flag(flag, value);
  if (d.count() == 0) bad_value(flag, fmt::format("{} is zero; want more than 0", quoted(value)));
  return d;
}

// --upstream-fall and --upstream-rise: how many probes in a row. More than a thousand at the
// default interval is a quarter of an hour of a dead apiserver kept in the load balancer: a typo.
constexpr unsigned kMaxProbeCount = 1000;
unsigned count_flag(std::string_view flag, std::string_view value) {
  unsigned n = 0;
  if (!all_digits(value) ||
      std::from_chars(value.data(), value.data() + value.size(), n).ec != std::errc() || n == 0 ||
      n > kMaxProbeCount) {
    bad_value(flag, fmt::format("{} is not a count from 1 to {}", quoted(value), kMaxProbeCount));
  }
  return n;
}

std::string path_flag(std::string_view flag, std::string_view value) {
  if (value.empty()) bad_value(flag, "empty path");
  return std::string(value);
}

// What the --upstream-* flags need of each other. The files themselves are not read here: on a
// node being installed they may appear later (the check stays failed until then).
void check_upstream_flags(const upstream_settings& upstream, const std::set<flag_id>& seen) {
  if (!upstream.enabled()) {
    for (const auto& def : kFlags) {
      if (def.id != flag_id::upstream_readyz && def.name.starts_with("--upstream-") &&
          seen.count(def.id)) {
        throw usage_error(fmt::format("{} needs --upstream-readyz", def.name));
      }
    }
    return;
  }
  if (upstream.client_cert.empty() != upstream.client_key.empty()) {
    throw usage_error(upstream.client_cert.empty()
                          ? "--upstream-client-key needs --upstream-client-cert"
                          : "--upstream-client-cert needs --upstream-client-key");
  }
  if (!upstream.url.tls) {
    for (auto id : {flag_id::upstream_ca_file, flag_id::upstream_tls_server_name,
                    flag_id::upstream_insecure_skip_verify, flag_id::upstream_client_cert,
                    flag_id::upstream_client_key}) {
      if (!seen.count(id)) continue;
      const auto def = std::find_if(kFlags.begin(), kFlags.end(),
                                    [id](const flag_def& d) { return d.id == id; });
      throw usage_error(fmt::format("{} applies only to an https:// --upstream-readyz", def->name));
    }
  }
  if (upstream.insecure_skip_verify &&
      (seen.count(flag_id::upstream_ca_file) || seen.count(flag_id::upstream_tls_server_name))) {
    throw usage_error(
        "--upstream-insecure-skip-verify and --upstream-ca-file or --upstream-tls-server-name are "
        "mutually exclusive: verify, or do not");
  }
}

listen_address listen_flag(std::string_view flag, std::string_view value) {
  constexpr std::string_view kWant = "want HOST:PORT, e.g. 0.0.0.0:6080 or [::]:6080";
  std::string_view host;
  std::string_view port;
  bool v6 = false;
  if (value.starts_with('[')) {
    auto close = value.find(']');
    if (close == std::string_view::npos || value.substr(close + 1, 1) != ":") {
      bad_value(flag, fmt::format("{} is not an address ({})", quoted(value), kWant));
    }
    host = value.substr(1, close - 1);
    port = value.substr(close + 2);
    v6 = true;
  } else {
    auto colon = value.rfind(':');
    if (colon == std::string_view::npos) {
      bad_value(flag, fmt::format("{} has no port ({})", quoted(value), kWant));
    }
    host = value.substr(0, colon);
    port = value.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) {
      bad_value(flag,
                fmt::format("{}: put an IPv6 address in brackets, e.g. [::1]:6080", quoted(value)));
    }
  }
  if (host.empty()) {
    bad_value(flag, fmt::format("{} has no host ({})", quoted(value), kWant));
  }

  // The listener binds a literal address; host names would need a resolver at startup.
  std::string host_str(host);
  std::array<unsigned char, sizeof(in6_addr)> binary{};
  const int family = v6 ? AF_INET6 : AF_INET;
  if (inet_pton(family, host_str.c_str(), binary.data()) != 1) {
    bad_value(flag, fmt::format("{} is not a literal IPv{} address", quoted(host), v6 ? 6 : 4));
  }
  // Canonical text, so that [::0]:80 and [::]:80 count as the same listener.
  std::array<char, INET6_ADDRSTRLEN> text{};
  if (inet_ntop(family, binary.data(), text.data(), text.size()) != nullptr) {
    host_str = text.data();
  }

  unsigned port_number = 0;
  if (!all_digits(port) ||
      std::from_chars(port.data(), port.data() + port.size(), port_number).ec != std::errc() ||
      port_number < 1 || port_number > 65535) {
    bad_value(flag, fmt::format("port {} is not in 1..65535", quoted(port)));
  }
  return {host_str, static_cast<std::uint16_t>(port_number)};
}

pid_t pid_flag(std::string_view flag, std::string_view value) {
  pid_t pid = 0;
  if (!all_digits(value) ||
      std::from_chars(value.data(), value.data() + value.size(), pid).ec != std::errc() ||
      pid <= 0) {
    bad_value(flag, fmt::format("{} is not a process ID (want a positive integer)", quoted(value)));
  }
  // SIGTERM to init reboots or kills the whole machine (or container): never the target.
  if (pid == 1) bad_value(flag, "PID 1 is init; the shim never signals it");
  return pid;
}

// A user name or a numeric UID, like systemd's User=: digits are a UID, anything else is looked up.
uid_t user_flag(std::string_view flag, std::string_view value) {
  if (value.empty()) bad_value(flag, "empty user");
  if (all_digits(value)) {
    uid_t uid = 0;
    // (uid_t)-1 is no user: the kernel's "unchanged" in setresuid().
    if (std::from_chars(value.data(), value.data() + value.size(), uid).ec != std::errc() ||
        uid == static_cast<uid_t>(-1)) {
      bad_value(flag, fmt::format("{} is not a valid UID", quoted(value)));
    }
    return uid;
  }
  const std::string name(value);
  passwd entry{};
  passwd* found = nullptr;
  std::array<char, 4096> buf{};
  const int error = ::getpwnam_r(name.c_str(), &entry, buf.data(), buf.size(), &found);
  if (found == nullptr) {
    bad_value(flag, error == 0 ? fmt::format("no user {}", quoted(value))
                               : fmt::format("cannot look up user {}: {}", quoted(value),
                                             std::strerror(error)));
  }
  return found->pw_uid;
}

template <typename Enum, std::size_t N>
Enum choice_flag(std::string_view flag, std::string_view value,
                 const std::array<std::pair<std::string_view, Enum>, N>& choices) {
  for (const auto& [name, e] : choices) {
    if (name == value) return e;
  }
  std::string names;
  for (const auto& [name, e] : choices) {
    if (!names.empty()) names += ", ";
    names += name;
  }
  bad_value(flag, fmt::format("{} is not one of {}", quoted(value), names));
}

}  // namespace

// Flags are parsed left to right. --help/-h and --version stop parsing where they appear and win:
// a bad flag before them is still an error, anything after them is ignored. A flag that takes a
// value reads it from "--flag=value" or from the next argument, unless that argument starts with
// "--" (then the value is reported missing; "--flag=--odd" still works). A flag whose value is
// optional (--ensure-inhibit-delay) reads it only from "--flag=value". Single-valued flags may
// be given once; --listen may be repeated, its first use replacing the default.
config parse_flags(std::span<const std::string_view> args) {
  config cfg;
  std::set<flag_id> seen;
  bool listen_given = false;
  std::string_view target_flag;  // the flag that chose the target, for conflict messages

  auto choose_target = [&](std::string_view flag) {
    if (!target_flag.empty()) {
      throw usage_error(fmt::format(
          "{} and {} are mutually exclusive; pick one way to find the target", target_flag, flag));
    }
    target_flag = flag;
  };

  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view arg = args[i];

    if (arg == "--") {
      if (!target_flag.empty()) {
        throw usage_error(fmt::format(
            "{} and a command after -- are mutually exclusive; pick one way to find the target",
            target_flag));
      }
      if (i + 1 == args.size()) throw usage_error("nothing after --; give the command to run");
      if (args[i + 1].empty()) throw usage_error("the command after -- is empty");
      cfg.target.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
      break;
    }
    if (arg.size() < 2 || arg.front() != '-') {
      throw usage_error(
          fmt::format("unexpected argument {}; put the command after --", quoted(arg)));
    }

    std::string_view name = arg;
    std::string_view value;
    bool has_value = false;
    if (auto eq = arg.find('='); eq != std::string_view::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    const flag_def* def = find_flag(name);
    if (def == nullptr) {
      // Quoted only when needed: a newline in it would make the message two lines (found by the
      // flags fuzz target).
      const bool plain =
          std::all_of(name.begin(), name.end(), [](char c) { return c > ' ' && c < 0x7f; });
      throw usage_error(fmt::format("unknown flag {}", plain ? std::string(name) : quoted(name)));
    }

    if (def->value_name.empty()) {
      if (has_value) throw usage_error(fmt::format("{} takes no value", name));
      if (def->id == flag_id::upstream_insecure_skip_verify) {
        if (!seen.insert(def->id).second) {
          throw usage_error(fmt::format("{}: given more than once", name));
        }
        cfg.upstream.insecure_skip_verify = true;
        continue;
      }
      cfg.what = def->id == flag_id::help ? config::action::help : config::action::version;
      return cfg;
    }
    if (!has_value && !def->default_value.empty()) {
      value = def->default_value;
    } else if (!has_value) {
      if (i + 1 == args.size() || args[i + 1].starts_with("--")) {
        throw usage_error(
            fmt::format("{}: missing value (want {}={})", name, name, def->value_name));
      }
      value = args[++i];
    }
    if (def->id != flag_id::listen && !seen.insert(def->id).second) {
      throw usage_error(fmt::format("{}: given more than once", name));
    }

    switch (def->id) {
      case flag_id::listen: {
        listen_address address = listen_flag(name, value);
        if (!listen_given) {
          cfg.listen.clear();
          listen_given = true;
        }
        if (std::find(cfg.listen.begin(), cfg.listen.end(), address) != cfg.listen.end()) {
          bad_value(name, fmt::format("{} given twice", format_listen_address(address)));
        }
        cfg.listen.push_back(std::move(address));
        break;
      }
      case flag_id::drain_delay:
        cfg.drain_delay = duration_flag(name, value);
        break;
      case flag_id::signal_delay:
        cfg.signal_delay = duration_flag(name, value);
        break;
      case flag_id::exit_timeout:
        cfg.exit_timeout = duration_flag(name, value);
        break;
      case flag_id::signal:
        try {
          cfg.signal = parse_signal(value);
        } catch (const std::invalid_argument& e) {
          bad_value(name, e.what());
        }
        break;
      case flag_id::target_pid:
        choose_target(name);
        cfg.target.pid = pid_flag(name, value);
        break;
      case flag_id::target_pidfile:
        choose_target(name);
        if (value.empty()) bad_value(name, "empty path");
        cfg.target.pidfile = value;
        break;
      case flag_id::target_name:
        choose_target(name);
        if (value.empty()) bad_value(name, "empty name");
        // Longer names are fine: the resolver compares the first 15 bytes, as comm holds them.
        if (value.find('/') != std::string_view::npos) {
          bad_value(name, fmt::format("{} contains '/'; want the process name as in "
                                      "/proc/PID/comm, not a path",
                                      quoted(value)));
        }
        cfg.target.name = value;
        break;
      case flag_id::target_user:
        cfg.target.name_uid = user_flag(name, value);
        break;
      case flag_id::inhibit:
        cfg.inhibit = choice_flag<inhibit_mode, 3>(name, value,
                                                   {{{"auto", inhibit_mode::automatic},
                                                     {"required", inhibit_mode::required},
                                                     {"off", inhibit_mode::off}}});
        break;
      case flag_id::forward_on_sigterm:
        cfg.forward_on_sigterm =
            choice_flag<forward_policy, 3>(name, value,
                                           {{{"auto", forward_policy::automatic},
                                             {"always", forward_policy::always},
                                             {"never", forward_policy::never}}});
        break;
      case flag_id::event_log:
        if (value.empty()) bad_value(name, "empty path");
        cfg.event_log = value;
        break;
      case flag_id::log_format:
        cfg.format = choice_flag<log_format, 2>(
            name, value, {{{"text", log_format::text}, {"json", log_format::json}}});
        break;
      case flag_id::ensure_inhibit_delay:
        cfg.ensure_inhibit_delay = choice_flag<ensure_mode, 2>(
            name, value,
            {{{"try", ensure_mode::best_effort}, {"required", ensure_mode::required}}});
        break;
      case flag_id::logind_conf_dir:
        // logind reads fixed absolute paths; a relative one would depend on the working directory.
        if (!value.starts_with('/')) {
          bad_value(name, fmt::format("{} is not an absolute path", quoted(value)));
        }
        cfg.logind_conf_dir = value;
        while (cfg.logind_conf_dir.size() > 1 && cfg.logind_conf_dir.back() == '/') {
          cfg.logind_conf_dir.pop_back();
        }
        break;
      case flag_id::state_dir:
        if (!value.starts_with('/')) {
          bad_value(name, fmt::format("{} is not an absolute path", quoted(value)));
        }
        cfg.state_dir = value;
        break;
      // Read again whenever kubelet takes its lock anew (a restarted kubelet reads its files anew):
      // a relative path would depend on the working directory of that moment's process.
      case flag_id::kubelet_config:
      case flag_id::static_pod_manifest:
        if (!value.starts_with('/')) {
          bad_value(name, fmt::format("{} is not an absolute path", quoted(value)));
        }
        (def->id == flag_id::kubelet_config ? cfg.kubelet_config : cfg.static_pod_manifest) = value;
        break;
      case flag_id::upstream_readyz: {
        auto url = parse_upstream_url(value);
        if (!url) bad_value(name, fmt::format("{}: {}", quoted(value), url.error()));
        cfg.upstream.url = url.value();
        break;
      }
      case flag_id::upstream_interval:
        cfg.upstream.interval = positive_duration_flag(name, value);
        break;
      case flag_id::upstream_timeout:
        cfg.upstream.timeout = positive_duration_flag(name, value);
        break;
      case flag_id::upstream_fall:
        cfg.upstream.fall = count_flag(name, value);
        break;
      case flag_id::upstream_rise:
        cfg.upstream.rise = count_flag(name, value);
        break;
      case flag_id::upstream_ca_file:
        cfg.upstream.ca_file = path_flag(name, value);
        break;
      case flag_id::upstream_tls_server_name:
        if (value.empty()) bad_value(name, "empty name");
        cfg.upstream.server_name = value;
        break;
      case flag_id::upstream_client_cert:
        cfg.upstream.client_cert = path_flag(name, value);
        break;
      case flag_id::upstream_client_key:
        cfg.upstream.client_key = path_flag(name, value);
        break;
      case flag_id::upstream_token_file:
        cfg.upstream.token_file = path_flag(name, value);
        break;
      case flag_id::upstream_insecure_skip_verify:
      case flag_id::help:
      case flag_id::version:
        break;  // handled above
    }
  }
  if (seen.count(flag_id::target_user) && cfg.target.name.empty()) {
    throw usage_error("--target-user applies only to --target-name");
  }
  if (cfg.ensure_inhibit_delay != ensure_mode::off && cfg.inhibit == inhibit_mode::off) {
    throw usage_error(
        "--ensure-inhibit-delay needs logind on the system bus, which --inhibit=off never uses");
  }
  check_upstream_flags(cfg.upstream, seen);
  // Failing would leave the command running without its shim.
  if (cfg.ensure_inhibit_delay == ensure_mode::required && cfg.target.wrapper()) {
    throw usage_error(
        "--ensure-inhibit-delay=required cannot wrap a command (a failure would leave it running "
        "unwatched); use --ensure-inhibit-delay=try");
  }
  return cfg;
}

std::string state_directory(const config& cfg) {
  if (!cfg.state_dir.empty()) return cfg.state_dir;
  if (const char* runtime = std::getenv("RUNTIME_DIRECTORY"); runtime && *runtime == '/') {
    const std::string_view dirs(runtime);
    return std::string(dirs.substr(0, dirs.find(':')));
  }
  return std::string(kDefaultStateDir);
}

std::string usage_text(std::span<const subcommand> commands) {
  const config d;
  const std::string listen_default = format_listen_addresses(d.listen);
  std::string names;
  for (const auto& command : commands) {
    if (!names.empty()) names += '|';
    names += command.name;
  }
  // One line per flag; the unit test keeps every line within 100 columns.
  return fmt::format(
      "Usage: shutdown-shim [FLAGS] [-- COMMAND [ARG...]]\n"
      "  or:  shutdown-shim {} [ARG...]\n"
      "\n"
      "Holds node shutdown with a systemd-logind delay inhibitor, reports not-ready, then signals\n"
      "the target. Find the target with one --target-* flag, or run it as a child after --.\n"
      "\n"
      "{}"
      "\n"
      "Flags:\n"
      "  --listen=HOST:PORT           HTTP listener, repeatable; IPv6 as [::]:6080 (default {})\n"
      "  --drain-delay=DURATION       stay unready this long once shutdown starts (default {})\n"
      "  --signal-delay=DURATION      signal this long after going unready (default: the drain\n"
      "                               minus kube-apiserver's --shutdown-delay-duration, or 0)\n"
      "  --exit-timeout=DURATION      hold at most this long after the drain for the exit (default "
      "{})\n"
      "  --signal=NAME                signal for the target: TERM, SIGINT, 15... (default {})\n"
      "  --target-pid=PID             signal this process (default: none)\n"
      "  --target-pidfile=PATH        read the target's PID from this file when signalling "
      "(default: none)\n"
      "  --target-name=NAME           signal every root process whose /proc/PID/comm is NAME\n"
      "  --target-user=NAME|UID       with --target-name: that user's processes instead of root's\n"
      "  --inhibit=MODE               logind delay lock: auto, required or off (default auto)\n"
      "  --forward-on-sigterm=WHEN    pass the shim's SIGTERM on: auto, always or never (default "
      "auto)\n"
      "  --event-log=PATH             append lifecycle events to PATH as JSON lines (default: "
      "none)\n"
      "  --log-format=FORMAT          stderr log lines: text or json (default text)\n"
      "  --ensure-inhibit-delay[=try|required]\n"
      "                               raise logind's InhibitDelayMaxSec with a drop-in if too "
      "short;\n"
      "                               try warns on failure, required exits 1 (default: only "
      "report)\n"
      "  --logind-conf-dir=PATH       where that drop-in goes (default {})\n"
      "  --state-dir=PATH             what was signalled, for a restart mid-hold (default\n"
      "                               $RUNTIME_DIRECTORY, else {})\n"
      "  --upstream-readyz=URL        also require kube-apiserver's own /readyz, e.g.\n"
      "                               https://localhost:6443/readyz (default: not checked)\n"
      "  --upstream-interval=DURATION time between probe starts (default {})\n"
      "  --upstream-timeout=DURATION  a probe's limit: connect, TLS and answer (default {})\n"
      "  --upstream-fall=N            failures in a row that fail the check (default {})\n"
      "  --upstream-rise=N            passes in a row that pass it again (default {})\n"
      "  --upstream-ca-file=PATH      verify the server against this CA (default: system's)\n"
      "  --upstream-tls-server-name=NAME  verify this name instead of the URL's host\n"
      "  --upstream-insecure-skip-verify  do not verify the server's certificate (WARNING)\n"
      "  --upstream-client-cert=PATH  client certificate (mTLS), with --upstream-client-key=PATH\n"
      "  --upstream-token-file=PATH   send Authorization: Bearer with this file's token\n"
      "  --kubelet-config=PATH        kubelet's config file: when its graceful node shutdown\n"
      "                               stops and kills kube-apiserver (default: not read)\n"
      "  --static-pod-manifest=PATH   kube-apiserver's static pod (its priority for kubelet), or\n"
      "                               kubelet's static pod directory (etcd's too); with both,\n"
      "                               the shim leaves the signal to kubelet when kubelet stops\n"
      "                               it (default: not read)\n"
      "  -h, --help                   show this help and exit\n"
      "  --version                    show the version and exit\n"
      "\n"
      "DURATION is Go syntax (70s, 1m30s, 250ms, 1.5h, 0), at most {}.\n"
      "Flags take --flag=value or --flag value.\n",
      names, commands_help(commands), listen_default, format_duration(d.drain_delay),
      format_duration(d.exit_timeout), signal_name(d.signal).substr(3), d.logind_conf_dir,
      kDefaultStateDir, format_duration(d.upstream.interval), format_duration(d.upstream.timeout),
      d.upstream.fall, d.upstream.rise, format_duration(kMaxFlagDuration));
}

}  // namespace shim
