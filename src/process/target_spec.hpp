#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace shim {

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

}  // namespace shim
