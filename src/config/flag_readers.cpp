#include "config/flag_readers.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <pwd.h>
#include <string.h>

#include <cstdint>

#include "config/config.hpp"
#include "config/usage_error.hpp"
#include "util/ascii_digits.hpp"
#include "util/duration_text.hpp"

namespace shim {

std::string quoted(std::string_view s) { return fmt::format("{:?}", s); }

[[noreturn]] void bad_value(std::string_view flag, std::string_view why) {
  throw usage_error(fmt::format("{}: {}", flag, why));
}

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

std::chrono::nanoseconds positive_duration_flag(std::string_view flag, std::string_view value) {
  const auto d = duration_flag(flag, value);
  if (d.count() == 0) bad_value(flag, fmt::format("{} is zero; want more than 0", quoted(value)));
  return d;
}

// More than a thousand probes at the default interval is a quarter of an hour of a dead apiserver
// kept in the load balancer: a typo.
constexpr unsigned kMaxProbeCount = 1000;
unsigned count_flag(std::string_view flag, std::string_view value) {
  const auto n = parse_decimal<unsigned>(value);
  if (!n || *n == 0 || *n > kMaxProbeCount) {
    bad_value(flag, fmt::format("{} is not a count from 1 to {}", quoted(value), kMaxProbeCount));
  }
  return *n;
}

std::string path_flag(std::string_view flag, std::string_view value) {
  if (value.empty()) bad_value(flag, "empty path");
  return std::string(value);
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
  if (host.empty()) bad_value(flag, fmt::format("{} has no host ({})", quoted(value), kWant));

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

  const auto port_number = parse_decimal<std::uint16_t>(port);
  if (!port_number || *port_number == 0) {
    bad_value(flag, fmt::format("port {} is not in 1..65535", quoted(port)));
  }
  return {host_str, *port_number};
}

pid_t pid_flag(std::string_view flag, std::string_view value) {
  const auto pid = parse_decimal<pid_t>(value);
  if (!pid || *pid <= 0) {
    bad_value(flag, fmt::format("{} is not a process ID (want a positive integer)", quoted(value)));
  }
  // SIGTERM to init reboots or kills the whole machine (or container): never the target.
  if (*pid == 1) bad_value(flag, "PID 1 is init; the shim never signals it");
  return *pid;
}

uid_t user_flag(std::string_view flag, std::string_view value) {
  if (value.empty()) bad_value(flag, "empty user");
  if (all_digits(value)) {
    const auto uid = parse_decimal<uid_t>(value);
    // (uid_t)-1 is no user: the kernel's "unchanged" in setresuid().
    if (!uid || *uid == static_cast<uid_t>(-1)) {
      bad_value(flag, fmt::format("{} is not a valid UID", quoted(value)));
    }
    return *uid;
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

std::string absolute_path_flag(std::string_view flag, std::string_view value) {
  if (!value.starts_with('/')) {
    bad_value(flag, fmt::format("{} is not an absolute path", quoted(value)));
  }
  return std::string(value);
}

std::string name_flag(std::string_view flag, std::string_view value) {
  if (value.empty()) bad_value(flag, "empty name");
  return std::string(value);
}

}  // namespace shim
