#include "config/config.hpp"

#include <fmt/format.h>
#include <signal.h>

#include <algorithm>
#include <cstdint>
#include <set>

#include "config/flag_readers.hpp"
#include "config/flag_table.hpp"
#include "util/duration_text.hpp"
#include "util/signal_names.hpp"

namespace shim {
namespace {

// What the --upstream-* flags need of each other. The files themselves are not read here: on a
// node being installed they may appear later (the check stays failed until then).
void check_upstream_flags(const upstream_settings& upstream,
                          const std::set<std::string_view>& given) {
  if (!upstream.enabled()) {
    for (const auto& [f, set] : daemon_flags().flags) {
      if (f.name != "--upstream-readyz" && f.name.starts_with("--upstream-") &&
          given.count(f.name)) {
        throw usage_error(fmt::format("{} needs --upstream-readyz", f.name));
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
    for (std::string_view name :
         {"--upstream-ca-file", "--upstream-tls-server-name", "--upstream-insecure-skip-verify",
          "--upstream-client-cert", "--upstream-client-key"}) {
      if (given.count(name)) {
        throw usage_error(fmt::format("{} applies only to an https:// --upstream-readyz", name));
      }
    }
  }
  if (upstream.insecure_skip_verify &&
      (given.count("--upstream-ca-file") || given.count("--upstream-tls-server-name"))) {
    throw usage_error(
        "--upstream-insecure-skip-verify and --upstream-ca-file or --upstream-tls-server-name are "
        "mutually exclusive: verify, or do not");
  }
}

// The flag that chose the target; empty while none has.
std::string_view target_flag(const target_spec& target) {
  if (target.pid) return "--target-pid";
  if (!target.pidfile.empty()) return "--target-pidfile";
  return target.name.empty() ? "" : "--target-name";
}

// One way to find the target: a second flag for it is refused, naming the first.
void choose_target(const target_spec& target, std::string_view flag) {
  if (const auto chosen = target_flag(target); !chosen.empty()) {
    throw usage_error(fmt::format(
        "{} and {} are mutually exclusive; pick one way to find the target", chosen, flag));
  }
}

flag_table<config> make_daemon_flags() {
  const config d;
  using sv = std::string_view;
  return {
      .command = "",
      .help_column = 31,
      .flags = {
          {.spec = {.name = "--listen",
                    .value_name = "HOST:PORT",
                    .help = "HTTP listener, repeatable; IPv6 as [::]:6080",
                    .default_value = format_listen_addresses(d.listen),
                    .repeatable = true},
           .set =
               [](config& c, sv name, sv value) {
                 listen_address address = listen_flag(name, value);
                 if (std::find(c.listen.begin(), c.listen.end(), address) != c.listen.end()) {
                   bad_value(name, fmt::format("{} given twice", format_listen_address(address)));
                 }
                 c.listen.push_back(std::move(address));
               }},
          {.spec = {.name = "--drain-delay",
                    .value_name = "DURATION",
                    .help = "stay unready this long once shutdown starts",
                    .default_value = format_duration(d.drain_delay)},
           .set = [](config& c, sv name, sv value) { c.drain_delay = duration_flag(name, value); }},
          {.spec = {.name = "--signal-delay",
                    .value_name = "DURATION",
                    .help = "signal this long after going unready (default: the drain\n"
                            "minus kube-apiserver's --shutdown-delay-duration, or 0)"},
           .set = [](config& c, sv name,
                     sv value) { c.signal_delay = duration_flag(name, value); }},
          {.spec = {.name = "--exit-timeout",
                    .value_name = "DURATION",
                    .help = "hold at most this long after the drain for the exit",
                    .default_value = format_duration(d.exit_timeout)},
           .set = [](config& c, sv name,
                     sv value) { c.exit_timeout = duration_flag(name, value); }},
          {.spec = {.name = "--signal",
                    .value_name = "NAME",
                    .help = "signal for the target: TERM, SIGINT, 15...",
                    .default_value = std::string(signal_name(d.signal).substr(3))},
           .set =
               [](config& c, sv name, sv value) {
                 try {
                   c.signal = parse_signal(value);
                 } catch (const std::invalid_argument& e) {
                   bad_value(name, e.what());
                 }
               }},
          {.spec = {.name = "--target-pid",
                    .value_name = "PID",
                    .help = "signal this process (default: none)"},
           .set =
               [](config& c, sv name, sv value) {
                 choose_target(c.target, name);
                 c.target.pid = pid_flag(name, value);
               }},
          {.spec = {.name = "--target-pidfile",
                    .value_name = "PATH",
                    .help = "read the target's PID from this file when signalling (default: none)"},
           .set =
               [](config& c, sv name, sv value) {
                 choose_target(c.target, name);
                 c.target.pidfile = path_flag(name, value);
               }},
          {.spec = {.name = "--target-name",
                    .value_name = "NAME",
                    .help = "signal every root process whose /proc/PID/comm is NAME"},
           .set =
               [](config& c, sv name, sv value) {
                 choose_target(c.target, name);
                 // Longer names are fine: the resolver compares only the 15 bytes comm holds.
                 if (value.find('/') != std::string_view::npos) {
                   bad_value(name, fmt::format("{} contains '/'; want the process name as in "
                                               "/proc/PID/comm, not a path",
                                               quoted(value)));
                 }
                 c.target.name = name_flag(name, value);
               }},
          {.spec = {.name = "--target-user",
                    .value_name = "NAME|UID",
                    .help = "with --target-name: that user's processes instead of root's"},
           .set = [](config& c, sv name, sv value) { c.target.name_uid = user_flag(name, value); }},
          {.spec = {.name = "--inhibit",
                    .value_name = "auto|required|off",
                    .help = "logind delay lock: auto, required or off",
                    .default_value = "auto"},
           .set =
               [](config& c, sv name, sv value) {
                 c.inhibit = choice_flag<inhibit_mode, 3>(name, value,
                                                          {{{"auto", inhibit_mode::automatic},
                                                            {"required", inhibit_mode::required},
                                                            {"off", inhibit_mode::off}}});
               }},
          {.spec = {.name = "--forward-on-sigterm",
                    .value_name = "auto|always|never",
                    .help = "pass the shim's SIGTERM on: auto, always or never",
                    .default_value = "auto"},
           .set =
               [](config& c, sv name, sv value) {
                 c.forward_on_sigterm =
                     choice_flag<forward_policy, 3>(name, value,
                                                    {{{"auto", forward_policy::automatic},
                                                      {"always", forward_policy::always},
                                                      {"never", forward_policy::never}}});
               }},
          {.spec = {.name = "--event-log",
                    .value_name = "PATH",
                    .help = "append lifecycle events to PATH as JSON lines (default: none)"},
           .set = [](config& c, sv name, sv value) { c.event_log = path_flag(name, value); }},
          {.spec = {.name = "--log-format",
                    .value_name = "text|json",
                    .help = "stderr log lines",
                    .default_value = "text"},
           .set =
               [](config& c, sv name, sv value) {
                 c.format = choice_flag<log_format, 2>(
                     name, value, {{{"text", log_format::text}, {"json", log_format::json}}});
               }},
          {.spec = {.name = "--ensure-inhibit-delay",
                    .value_name = "try|required",
                    .help = "raise logind's InhibitDelayMaxSec with a drop-in if too short;\n"
                            "try warns on failure, required exits 1 (default: only report)",
                    .implied_value = "try"},
           .set =
               [](config& c, sv name, sv value) {
                 c.ensure_inhibit_delay = choice_flag<ensure_mode, 2>(
                     name, value,
                     {{{"try", ensure_mode::best_effort}, {"required", ensure_mode::required}}});
               }},
          {.spec = {.name = "--logind-conf-dir",
                    .value_name = "PATH",
                    .help = "where that drop-in goes",
                    .default_value = d.logind_conf_dir},
           .set =
               [](config& c, sv name, sv value) {
                 c.logind_conf_dir = absolute_path_flag(name, value);
                 while (c.logind_conf_dir.size() > 1 && c.logind_conf_dir.back() == '/') {
                   c.logind_conf_dir.pop_back();
                 }
               }},
          {.spec = {.name = "--state-dir",
                    .value_name = "PATH",
                    .help = fmt::format("what was signalled, for a restart mid-hold (default\n"
                                        "$RUNTIME_DIRECTORY, else {})",
                                        kDefaultStateDir)},
           .set = [](config& c, sv name,
                     sv value) { c.state_dir = absolute_path_flag(name, value); }},
          {.spec = {.name = "--upstream-readyz",
                    .value_name = "URL",
                    .help = "also require kube-apiserver's own /readyz, e.g.\n"
                            "https://localhost:6443/readyz (default: not checked)"},
           .set =
               [](config& c, sv name, sv value) {
                 auto url = parse_upstream_url(value);
                 if (!url) bad_value(name, fmt::format("{}: {}", quoted(value), url.error()));
                 c.upstream.url = url.value();
               }},
          {.spec = {.name = "--upstream-interval",
                    .value_name = "DURATION",
                    .help = "time between probe starts",
                    .default_value = format_duration(d.upstream.interval)},
           .set = [](config& c, sv name,
                     sv value) { c.upstream.interval = positive_duration_flag(name, value); }},
          {.spec = {.name = "--upstream-timeout",
                    .value_name = "DURATION",
                    .help = "a probe's limit: connect, TLS and answer",
                    .default_value = format_duration(d.upstream.timeout)},
           .set = [](config& c, sv name,
                     sv value) { c.upstream.timeout = positive_duration_flag(name, value); }},
          {.spec = {.name = "--upstream-fall",
                    .value_name = "N",
                    .help = "failures in a row that fail the check",
                    .default_value = std::to_string(d.upstream.fall)},
           .set = [](config& c, sv name, sv value) { c.upstream.fall = count_flag(name, value); }},
          {.spec = {.name = "--upstream-rise",
                    .value_name = "N",
                    .help = "passes in a row that pass it again",
                    .default_value = std::to_string(d.upstream.rise)},
           .set = [](config& c, sv name, sv value) { c.upstream.rise = count_flag(name, value); }},
          {.spec = {.name = "--upstream-ca-file",
                    .value_name = "PATH",
                    .help = "verify the server against this CA (default: the system's)"},
           .set = [](config& c, sv name,
                     sv value) { c.upstream.ca_file = path_flag(name, value); }},
          {.spec = {.name = "--upstream-tls-server-name",
                    .value_name = "NAME",
                    .help = "verify this name instead of the URL's host"},
           .set = [](config& c, sv name,
                     sv value) { c.upstream.server_name = name_flag(name, value); }},
          {.spec = {.name = "--upstream-insecure-skip-verify",
                    .help = "do not verify the server's certificate (WARNING)"},
           .set = [](config& c, sv, sv) { c.upstream.insecure_skip_verify = true; }},
          {.spec = {.name = "--upstream-client-cert",
                    .value_name = "PATH",
                    .help = "client certificate (mTLS), with --upstream-client-key"},
           .set = [](config& c, sv name,
                     sv value) { c.upstream.client_cert = path_flag(name, value); }},
          {.spec = {.name = "--upstream-client-key",
                    .value_name = "PATH",
                    .help = "the client certificate's key, with --upstream-client-cert"},
           .set = [](config& c, sv name,
                     sv value) { c.upstream.client_key = path_flag(name, value); }},
          {.spec = {.name = "--upstream-token-file",
                    .value_name = "PATH",
                    .help = "send Authorization: Bearer with this file's token"},
           .set = [](config& c, sv name,
                     sv value) { c.upstream.token_file = path_flag(name, value); }},
          {.spec = {.name = "--kubelet-config",
                    .value_name = "PATH",
                    .help = "kubelet's config file: when its graceful node shutdown\n"
                            "stops and kills kube-apiserver (default: not read)"},
           .set = [](config& c, sv name,
                     sv value) { c.kubelet_config = absolute_path_flag(name, value); }},
          {.spec = {.name = "--static-pod-manifest",
                    .value_name = "PATH",
                    .help = "kube-apiserver's static pod (its priority for kubelet), or\n"
                            "kubelet's static pod directory (etcd's too); with both,\n"
                            "the shim leaves the signal to kubelet when kubelet stops\n"
                            "it (default: not read)"},
           .set = [](config& c, sv name,
                     sv value) { c.static_pod_manifest = absolute_path_flag(name, value); }},
          {.spec = {.name = "--help",
                    .help = "show this help and exit",
                    .alias = "-h",
                    .ends_parsing = true},
           .set = [](config& c, sv, sv) { c.what = config::action::help; }},
          {.spec = {.name = "--version", .help = "show the version and exit", .ends_parsing = true},
           .set = [](config& c, sv, sv) { c.what = config::action::version; }},
      }};
}

// The command to wrap, after "--": the other way to find the target.
void take_command(config& cfg, std::span<const std::string_view> command) {
  choose_target(cfg.target, "a command after --");
  if (command.empty()) throw usage_error("nothing after --; give the command to run");
  if (command.front().empty()) throw usage_error("the command after -- is empty");
  cfg.target.command.assign(command.begin(), command.end());
}

}  // namespace

const flag_table<config>& daemon_flags() {
  static const flag_table<config> table = make_daemon_flags();
  return table;
}

// Single-valued flags may be given once; --listen may be repeated, its uses replacing the default.
config parse_flags(std::span<const std::string_view> args) {
  config cfg;
  cfg.listen.clear();
  const flags_read read = parse_flag_table(daemon_flags(), args, cfg);
  if (cfg.listen.empty()) cfg.listen = config{}.listen;
  if (cfg.what != config::action::run) return cfg;
  if (read.after_dashes) take_command(cfg, *read.after_dashes);
  if (read.given.count("--target-user") && cfg.target.name.empty()) {
    throw usage_error("--target-user applies only to --target-name");
  }
  if (cfg.ensure_inhibit_delay != ensure_mode::off && cfg.inhibit == inhibit_mode::off) {
    throw usage_error(
        "--ensure-inhibit-delay needs logind on the system bus, which --inhibit=off never uses");
  }
  check_upstream_flags(cfg.upstream, read.given);
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

std::string daemon_flags_help() {
  return fmt::format(
      "Flags:\n"
      "{}"
      "\n"
      "DURATION is Go syntax (70s, 1m30s, 250ms, 1.5h, 0), at most {}.\n"
      "Flags take --flag=value or --flag value.\n",
      flags_help(daemon_flags()), format_duration(kMaxFlagDuration));
}

}  // namespace shim
