#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "process/target_spec.hpp"
#include "util/exit_watcher.hpp"
#include "util/process_handle.hpp"
#include "util/result.hpp"

namespace shim {

// Finds the attach-mode target now: the PID given, the PID in a trusted pidfile (see
// open_trusted_file), or every process whose /proc/PID/comm equals the name and whose real and
// effective uid are spec.name_uid. Never PID 1, the shim itself or its parent, whatever the kind
// of target. The PIDs found (sorted, at least one), or why there is none, for the log.
using resolved_target = result<std::vector<pid_t>>;
resolved_target resolve_target(const target_spec& spec, const std::string& proc_root = "/proc");

// A process's name, /proc/PID/comm without its newline ("kube-apiserver"); nullopt when it is gone.
std::optional<std::string> process_name(pid_t pid, const std::string& proc_root = "/proc");

// A process's command line, /proc/PID/cmdline's NUL-separated words; nullopt when it is gone (a
// zombie's is empty).
std::optional<std::vector<std::string>> read_command_line(pid_t pid,
                                                          const std::string& proc_root = "/proc");

// What main() checks before the shim starts: a pidfile that exists now and may not be trusted, a
// path to it that cannot be walked, or --target-pid naming the shim or its parent. A failure is
// one line naming the file or PID and the reason (main() logs it and exits 1).
result<> check_target_at_start(const target_spec& spec);

}  // namespace shim
