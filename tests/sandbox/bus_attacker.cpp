// An unprivileged local user attacking the shim over a sandbox's system bus, with only what
// Debian's default bus policy lets anyone do: call the bus driver, and send signals, unicast or
// broadcast. It tells the shim's connection that org.freedesktop.login1 has moved to the attacker
// (a NameOwnerChanged that the bus driver never sent), then optionally sends
// PrepareForShutdown(true) to it and to everyone.
//
// bus_attacker --address=unix:path=PRIVATE --shim-pid=PID [--prepare-for-shutdown]
//
// Exit codes: 0 sent; 1 usage or bus error; 2 run as root; 3 the bus let it own
// org.freedesktop.login1 (so not Debian's policy: the test would prove nothing); 4 no connection of
// the shim's PID on the bus; 5 logind is not on the bus.

#include <fmt/core.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "bus_names.hpp"
#include "node_sandbox.hpp"
#include "private_bus.hpp"

namespace {

using sandbox::kBusDriver;
using sandbox::kBusDriverPath;
using sandbox::kLogin1;

struct options {
  std::string address;
  pid_t shim_pid = 0;
  bool prepare_for_shutdown = false;
};

std::optional<options> parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a(argv[i]);
    if (a.starts_with("--address=")) {
      o.address = a.substr(10);
    } else if (a.starts_with("--shim-pid=")) {
      o.shim_pid = static_cast<pid_t>(std::atoi(a.substr(11).data()));
    } else if (a == "--prepare-for-shutdown") {
      o.prepare_for_shutdown = true;
    } else {
      return std::nullopt;
    }
  }
  if (o.address.empty() || o.shim_pid <= 0) return std::nullopt;
  return o;
}

// The unique name of the connection that PID opened, found the way any user can: ListNames, then
// GetConnectionUnixProcessID of each unique name.
std::string connection_of(sandbox::private_bus& bus, pid_t pid) {
  auto reply = bus.call(kBusDriver, kBusDriverPath, kBusDriver, "ListNames", "");
  std::vector<std::string> names;
  sd_bus_message_enter_container(reply.get(), 'a', "s");
  const char* name = nullptr;
  while (sd_bus_message_read(reply.get(), "s", &name) > 0) {
    if (name[0] == ':') names.emplace_back(name);
  }
  for (const auto& n : names) {
    try {
      auto r = bus.call(kBusDriver, kBusDriverPath, kBusDriver, "GetConnectionUnixProcessID", "s",
                        n.c_str());
      std::uint32_t p = 0;
      if (sd_bus_message_read(r.get(), "u", &p) >= 0 && static_cast<pid_t>(p) == pid) return n;
    } catch (const sandbox::bus_error&) {
      // It left in between.
    }
  }
  return {};
}

void send_signal(sandbox::private_bus& bus, const char* destination, const char* path,
                 const char* interface, const char* member, const char* types, auto... args) {
  sd_bus_message* raw = nullptr;
  int r = sd_bus_message_new_signal(bus.get(), &raw, path, interface, member);
  sandbox::message_ptr m(raw);
  if (r >= 0 && destination) r = sd_bus_message_set_destination(raw, destination);
  if (r >= 0) r = sd_bus_message_append(raw, types, args...);
  if (r >= 0) r = sd_bus_send(bus.get(), raw, nullptr);
  if (r < 0) {
    throw std::runtime_error(fmt::format("sending {}.{}: {}", interface, member, strerror(-r)));
  }
  fmt::print("sent {}.{} {}\n", interface, member,
             destination ? fmt::format("to {}", destination) : std::string("as a broadcast"));
}

}  // namespace

int main(int argc, char** argv) {
  sandbox::point_system_bus_nowhere();
  auto opts = parse(argc, argv);
  if (!opts) {
    fmt::print(stderr,
               "usage: bus_attacker --address=unix:path=PRIVATE --shim-pid=PID "
               "[--prepare-for-shutdown]\n");
    return 1;
  }
  if (geteuid() == 0 || getuid() == 0) {
    fmt::print(stderr, "bus_attacker: refusing to run as root: it plays an unprivileged user\n");
    return 2;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    sandbox::private_bus bus(opts->address);  // refuses anything but a private socket
    const std::string me = bus.unique_name();
    fmt::print("attacker {} uid {} gid {}\n", me, getuid(), getgid());

    // The policy in force must be a real one: owning login1 is root's privilege there.
    try {
      bus.call(kBusDriver, kBusDriverPath, kBusDriver, "RequestName", "su", kLogin1, 0u);
      fmt::print(stderr, "bus_attacker: the bus let an unprivileged user own {}\n", kLogin1);
      return 3;
    } catch (const sandbox::bus_error& e) {
      fmt::print("RequestName({}) refused as expected: {}\n", kLogin1, e.name());
    }

    const std::string logind = bus.name_owner(kLogin1);
    if (logind.empty()) {
      fmt::print(stderr, "bus_attacker: {} has no owner\n", kLogin1);
      return 5;
    }
    const std::string shim = connection_of(bus, opts->shim_pid);
    if (shim.empty()) {
      fmt::print(stderr, "bus_attacker: no connection of PID {} on the bus\n", opts->shim_pid);
      return 4;
    }
    fmt::print("logind is {}, the shim (pid {}) is {}\n", logind, opts->shim_pid, shim);

    send_signal(bus, shim.c_str(), kBusDriverPath, kBusDriver, "NameOwnerChanged", "sss", kLogin1,
                logind.c_str(), me.c_str());
    if (opts->prepare_for_shutdown) {
      for (const char* destination : {shim.c_str(), static_cast<const char*>(nullptr)}) {
        send_signal(bus, destination, "/org/freedesktop/login1", "org.freedesktop.login1.Manager",
                    "PrepareForShutdown", "b", 1);
      }
    }
    // The bus driver answers in order: once this returns, every signal above has been routed.
    bus.call(kBusDriver, kBusDriverPath, kBusDriver, "GetId", "");
    fmt::print("done\n");
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "bus_attacker: {}\n", e.what());
    return 1;
  }
}
