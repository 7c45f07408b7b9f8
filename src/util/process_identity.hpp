#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace shim {

// A process as the kernel knows it for as long as it lives: the PID plus its start time (field 22
// of /proc/PID/stat, clock ticks since boot), so that a reused PID is never taken for the same
// process.
struct process_identity {
  pid_t pid = 0;
  std::uint64_t start_time = 0;
  friend bool operator==(const process_identity&, const process_identity&) = default;
};

// The identity of a running process; nullopt when it is gone (or /proc cannot say).
std::optional<process_identity> identify_process(pid_t pid, const std::string& proc_root = "/proc");

}  // namespace shim
