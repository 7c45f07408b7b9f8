#pragma once

#include <filesystem>
#include <string>

namespace sandbox {

// The policy of a sandbox's dbus-daemon.
enum class bus_policy {
  // Everything is allowed: everything on the bus is the test's own.
  allow_all,
  // The machine's real default system-bus policy (Debian: /usr/share/dbus-1/system.conf and every
  // file it includes), for tests in which an unprivileged user attacks the bus.
  debian_system,
};

// A configuration that listens on socket only, with an allow-all policy (type system, EXTERNAL).
std::string allow_all_bus_config(const std::filesystem::path& socket);

// system_conf (Debian's system.conf) rewritten by code for a sandbox, so that it is the policy the
// machine really ships, whatever version is installed: comments dropped, the one <listen> replaced
// by socket, relative includes made absolute, and what cannot work in a sandbox (or would touch
// the machine) removed: <fork/>, <pidfile>, <syslog/>, <user>, <servicehelper> and the service
// directories (activation would start the machine's own services as root). Throws
// std::runtime_error if the file, or a file it includes, has a shape this does not know (a second
// <listen>, a <servicedir>,
// ...), rather than run a bus that could listen or activate outside the sandbox.
std::string debian_system_bus_config(
    const std::filesystem::path& socket,
    const std::filesystem::path& system_conf = "/usr/share/dbus-1/system.conf");

}  // namespace sandbox
