#include "config.hpp"

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
#include <limits>
#include <set>

namespace shim {
namespace {

// --- durations ---------------------------------------------------------------------------------

enum class duration_problem { syntax, negative, overflow };

// Lets parse_flags word each kind of bad duration for the flag while parse_duration keeps its
// documented std::invalid_argument contract.
class duration_error : public std::invalid_argument {
 public:
  duration_error(duration_problem problem, const std::string& what)
      : std::invalid_argument(what), problem_(problem) {}
  duration_problem problem() const { return problem_; }

 private:
  duration_problem problem_;
};

// Negative durations are refused, so the largest accepted one is int64's maximum (Go allows one
// more nanosecond, but only as -1<<63).
constexpr std::uint64_t kMaxNanos = std::numeric_limits<std::int64_t>::max();

struct duration_unit {
  std::string_view name;
  std::uint64_t nanos;
};

constexpr std::array<duration_unit, 8> kDurationUnits{{
    {"ns", 1},
    {"us", 1'000},
    {"\xc2\xb5s", 1'000},  // U+00B5 MICRO SIGN, what Go prints
    {"\xce\xbcs", 1'000},  // U+03BC GREEK SMALL LETTER MU, which Go also accepts
    {"ms", 1'000'000},
    {"s", 1'000'000'000},
    {"m", 60'000'000'000},
    {"h", 3'600'000'000'000},
}};

bool is_digit(char c) { return c >= '0' && c <= '9'; }

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), is_digit);
}

// --- signals -----------------------------------------------------------------------------------

constexpr int kMaxSignal = 64;  // the kernel's _NSIG

// Names glibc's sigabbrev_np() does not return because another name owns the number.
struct signal_alias {
  std::string_view name;
  int signal;
};
constexpr std::array<signal_alias, 3> kSignalAliases{{
    {"IOT", SIGABRT},
    {"POLL", SIGIO},
    {"CLD", SIGCHLD},
}};

// --- flags -------------------------------------------------------------------------------------

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

constexpr std::array<flag_def, 32> kFlags{{
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

const flag_def* find_flag(std::string_view name) {
  for (const auto& def : kFlags) {
    if (def.name == name) return &def;
  }
  return nullptr;
}

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

std::string format_listen_address(const listen_address& address) {
  return address.host.find(':') == std::string::npos
             ? fmt::format("{}:{}", address.host, address.port)
             : fmt::format("[{}]:{}", address.host, address.port);
}

std::string format_listen_addresses(const std::vector<listen_address>& addresses) {
  std::string out;
  for (const auto& a : addresses) {
    if (!out.empty()) out += ",";
    out += format_listen_address(a);
  }
  return out;
}

std::chrono::nanoseconds parse_duration(std::string_view text) {
  auto syntax = [&](std::string_view why) -> duration_error {
    return duration_error(duration_problem::syntax,
                          fmt::format("invalid duration {}: {}", quoted(text), why));
  };
  auto overflow = [&] {
    return duration_error(duration_problem::overflow,
                          fmt::format("duration {} is out of range", quoted(text)));
  };

  std::string_view s = text;
  bool negative = false;
  if (!s.empty() && (s.front() == '-' || s.front() == '+')) {
    negative = s.front() == '-';
    s.remove_prefix(1);
  }
  // Like Go, a bare zero is the one number that needs no unit.
  if (s == "0") return std::chrono::nanoseconds(0);
  if (s.empty()) throw syntax("empty");

  std::uint64_t total = 0;
  while (!s.empty()) {
    std::size_t i = 0;

    // Integer part.
    std::uint64_t whole = 0;
    bool have_whole = false;
    for (; i < s.size() && is_digit(s[i]); ++i) {
      have_whole = true;
      const unsigned digit = static_cast<unsigned>(s[i] - '0');
      if (whole > (kMaxNanos - digit) / 10) throw overflow();
      whole = whole * 10 + digit;
    }

    // Fraction: digits that would overflow are dropped, as Go does; they are below a nanosecond.
    std::uint64_t fraction = 0;
    double scale = 1;
    bool have_fraction = false;
    if (i < s.size() && s[i] == '.') {
      bool dropping = false;
      for (++i; i < s.size() && is_digit(s[i]); ++i) {
        have_fraction = true;
        const unsigned digit = static_cast<unsigned>(s[i] - '0');
        if (dropping || fraction > (kMaxNanos - digit) / 10) {
          dropping = true;
          continue;
        }
        fraction = fraction * 10 + digit;
        scale *= 10;
      }
    }
    if (!have_whole && !have_fraction) throw syntax("expected a number");

    // Unit: everything up to the next number.
    std::size_t end = i;
    while (end < s.size() && s[end] != '.' && !is_digit(s[end])) ++end;
    const std::string_view unit_text = s.substr(i, end - i);
    if (unit_text.empty()) throw syntax("missing unit (ns, us, ms, s, m or h)");
    const auto unit = std::find_if(kDurationUnits.begin(), kDurationUnits.end(),
                                   [&](const duration_unit& u) { return u.name == unit_text; });
    if (unit == kDurationUnits.end()) {
      throw syntax(fmt::format("unknown unit {} (want ns, us, ms, s, m or h)", quoted(unit_text)));
    }

    if (whole > kMaxNanos / unit->nanos) throw overflow();
    std::uint64_t value = whole * unit->nanos;
    if (fraction > 0) {
      value += static_cast<std::uint64_t>(static_cast<double>(fraction) *
                                          (static_cast<double>(unit->nanos) / scale));
      if (value > kMaxNanos) throw overflow();
    }
    total += value;  // both operands are at most 2^63-1, so this cannot wrap
    if (total > kMaxNanos) throw overflow();
    s.remove_prefix(end);
  }

  if (negative && total != 0) {
    throw duration_error(duration_problem::negative,
                         fmt::format("negative duration {} is not allowed", quoted(text)));
  }
  return std::chrono::nanoseconds(static_cast<std::int64_t>(total));
}

namespace {

// A port of Go's Duration.String, so that logs read like the flags users wrote, for a magnitude u
// in units of 10^-decimals seconds (9: nanoseconds, 6: microseconds).
std::string format_go_duration(std::uint64_t u, bool negative, int decimals) {
  std::array<char, 32> buf{};
  std::size_t w = buf.size();
  auto put = [&](char c) { buf[--w] = c; };
  auto put_int = [&](std::uint64_t v) {
    do {
      put(static_cast<char>('0' + v % 10));
      v /= 10;
    } while (v > 0);
  };
  auto pow10 = [](int n) {
    std::uint64_t p = 1;
    while (n-- > 0) p *= 10;
    return p;
  };

  // Writes the prec lowest decimal digits of u as a fraction without trailing zeros (and without
  // the point when they are all zero), and drops them from u.
  auto put_fraction = [&](int prec) {
    bool print = false;
    for (int i = 0; i < prec; ++i) {
      const auto digit = static_cast<char>(u % 10);
      print = print || digit != 0;
      if (print) put(static_cast<char>('0' + digit));
      u /= 10;
    }
    if (print) put('.');
  };

  put('s');
  if (u < pow10(decimals)) {
    if (u == 0) {
      put('0');
    } else {
      // The largest of ns, µs and ms (10^-9, -6, -3 s) that keeps u at 1 or more.
      int unit = decimals;
      while (unit > 3 && u >= pow10(decimals - unit + 3)) unit -= 3;
      if (unit == 9) {
        put('n');
      } else if (unit == 6) {
        put('\xb5');  // U+00B5 in UTF-8, written backwards
        put('\xc2');
      } else {
        put('m');
      }
      put_fraction(decimals - unit);
      put_int(u);
    }
  } else {
    put_fraction(decimals);
    put_int(u % 60);
    u /= 60;
    if (u > 0) {
      put('m');
      put_int(u % 60);
      u /= 60;
      if (u > 0) {
        put('h');
        put_int(u);
      }
    }
  }
  if (negative) put('-');
  return std::string(buf.data() + w, buf.size() - w);
}

}  // namespace

std::string format_duration(std::chrono::nanoseconds d) {
  // Unsigned arithmetic so that the most negative value has a magnitude too.
  std::uint64_t u = static_cast<std::uint64_t>(d.count());
  if (d.count() < 0) u = ~u + 1;
  return format_go_duration(u, d.count() < 0, 9);
}

std::string format_usec(std::uint64_t usec) { return format_go_duration(usec, false, 6); }

int parse_signal(std::string_view text) {
  if (text.empty()) throw std::invalid_argument("empty signal name");
  if (all_digits(text)) {
    int number = 0;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
    if (ec != std::errc() || number < 1 || number > kMaxSignal) {
      throw std::invalid_argument(
          fmt::format("signal number {} is not in 1..{}", text, kMaxSignal));
    }
    return number;
  }

  std::string name(text);
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  std::string_view bare = name;
  if (bare.starts_with("SIG")) bare.remove_prefix(3);
  if (!bare.empty()) {
    for (int sig = 1; sig < NSIG; ++sig) {
      const char* abbrev = sigabbrev_np(sig);
      if (abbrev != nullptr && bare == abbrev) return sig;
    }
    for (const auto& alias : kSignalAliases) {
      if (bare == alias.name) return alias.signal;
    }
  }
  throw std::invalid_argument(
      fmt::format("unknown signal {} (want e.g. TERM, SIGINT or 15)", quoted(text)));
}

std::string signal_name(int signal) {
  const char* abbrev = signal > 0 && signal < NSIG ? sigabbrev_np(signal) : nullptr;
  if (abbrev == nullptr) return fmt::format("signal {}", signal);
  return fmt::format("SIG{}", abbrev);
}

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

std::string usage_text() {
  const config d;
  const std::string listen_default = format_listen_addresses(d.listen);
  // One line per flag; the unit test keeps every line within 100 columns.
  return fmt::format(
      "Usage: shutdown-shim [FLAGS] [-- COMMAND [ARG...]]\n"
      "\n"
      "Holds node shutdown with a systemd-logind delay inhibitor, reports not-ready, then signals\n"
      "the target. Find the target with one --target-* flag, or run it as a child after --.\n"
      "\n"
      "Flags:\n"
      "  --listen=HOST:PORT           HTTP listener, repeatable; IPv6 as [::]:6080 (default {})\n"
      "  --drain-delay=DURATION       stay unready this long once shutdown starts (default {})\n"
      "  --signal-delay=DURATION      wait this long after going unready to signal (default {})\n"
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
      "  --static-pod-manifest=PATH   kube-apiserver's static pod: its priority for kubelet;\n"
      "                               with both, the shim leaves the signal to kubelet when\n"
      "                               kubelet stops it first (default: not read)\n"
      "  -h, --help                   show this help and exit\n"
      "  --version                    show the version and exit\n"
      "\n"
      "DURATION is Go syntax (70s, 1m30s, 250ms, 1.5h, 0), at most {}.\n"
      "Flags take --flag=value or --flag value.\n",
      listen_default, format_duration(d.drain_delay), format_duration(d.signal_delay),
      format_duration(d.exit_timeout), signal_name(d.signal).substr(3), d.logind_conf_dir,
      kDefaultStateDir, format_duration(d.upstream.interval), format_duration(d.upstream.timeout),
      d.upstream.fall, d.upstream.rise, format_duration(kMaxFlagDuration));
}

}  // namespace shim
