#include "process/target.hpp"

#include <dirent.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <string_view>
#include <utility>

#include "util/ascii_digits.hpp"
#include "util/small_file.hpp"
#include "util/take_until.hpp"
#include "util/trusted_file.hpp"

namespace shim {
namespace {

// The kernel keeps TASK_COMM_LEN - 1 bytes of the executable name in /proc/PID/comm.
constexpr std::size_t comm_max = 15;

// A pidfile holds one PID line.
constexpr std::size_t kMaxPidfileBytes = 256;

// A small /proc file, or nullopt when it cannot be read (the process has exited meanwhile).
std::optional<std::string> read_proc_file(const std::string& path) {
  auto text = read_small_file(path, kMaxProcFileBytes);
  if (!text) return std::nullopt;
  return std::move(text.value());
}

std::string_view trim(std::string_view s) {
  constexpr std::string_view space = " \t\n\r\f\v";
  const auto first = s.find_first_not_of(space);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(space) - first + 1);
}

// A positive decimal PID and nothing else (no sign, no trailing garbage).
std::optional<pid_t> parse_pid(std::string_view text) {
  const auto pid = parse_decimal<pid_t>(text);
  return pid && *pid > 0 ? pid : std::nullopt;
}

std::string proc_path(const std::string& proc_root, pid_t pid, std::string_view entry) {
  return fmt::format("{}/{}/{}", proc_root, pid, entry);
}

// The state letter of /proc/PID/stat ('R', 'S', 'Z', ...), or nullopt when the process is gone.
// comm sits in parentheses and may itself contain ") ", so the state follows the last ')'.
std::optional<char> process_state(const std::string& proc_root, pid_t pid) {
  const auto stat = read_proc_file(proc_path(proc_root, pid, "stat"));
  if (!stat) return std::nullopt;
  const auto close = stat->rfind(')');
  if (close == std::string::npos || close + 2 >= stat->size()) return std::nullopt;
  return (*stat)[close + 2];
}

// The value of a "Key:\tvalue" line of /proc/PID/status, trimmed; empty if there is none.
std::string_view status_field(std::string_view status, std::string_view key) {
  while (!status.empty()) {
    const auto line = take_until(status, '\n');
    if (line.starts_with(key) && line.substr(key.size()).starts_with(':')) {
      return trim(line.substr(key.size() + 1));
    }
  }
  return {};
}

// Empty when PID names a live process; otherwise why not. A thread id also has a (hidden)
// /proc/TID directory, but pidfd_open refuses it, so it is reported here instead.
std::string check_pid(const std::string& proc_root, pid_t pid) {
  std::string dir = fmt::format("{}/{}", proc_root, pid);
  if (::access(dir.c_str(), F_OK) != 0) return fmt::format("no process with PID {}", pid);
  if (const auto status = read_proc_file(proc_path(proc_root, pid, "status"))) {
    const auto tgid = parse_pid(status_field(*status, "Tgid"));
    if (tgid && *tgid != pid) {
      return fmt::format("PID {} is a thread of process {}, not a process", pid, *tgid);
    }
  }
  return {};
}

// Why PID may never be a target, whatever named it; empty when it may. SIGTERM to init reboots or
// kills the machine (or the container); to the shim or its parent it would end the hold itself.
std::string forbidden_target(pid_t pid) {
  if (pid == 1) return "PID 1 is init; the shim never signals it";
  if (pid == ::getpid()) return fmt::format("PID {} is the shim itself; never signalled", pid);
  if (pid == ::getppid()) return fmt::format("PID {} is the shim's parent; never signalled", pid);
  return {};
}

// Whether the process's real and effective uid (/proc/PID/status "Uid:" line: real, effective,
// saved, filesystem) are both uid; false when that cannot be read (it has exited).
bool owned_by(const std::string& proc_root, pid_t pid, uid_t uid) {
  const auto status = read_proc_file(proc_path(proc_root, pid, "status"));
  if (!status) return false;
  const auto ids = words(status_field(*status, "Uid"));
  return ids.size() >= 2 && parse_decimal<uid_t>(ids[0]) == uid &&
         parse_decimal<uid_t>(ids[1]) == uid;
}

resolved_target resolve_pid(const std::string& proc_root, pid_t pid) {
  if (pid <= 0) return resolved_target::failure(fmt::format("PID {} is not valid", pid));
  if (auto why = forbidden_target(pid); !why.empty())
    return resolved_target::failure(std::move(why));
  if (auto why = check_pid(proc_root, pid); !why.empty())
    return resolved_target::failure(std::move(why));
  return resolved_target::success({pid});
}

resolved_target resolve_pidfile(const std::string& proc_root, const std::string& path) {
  auto file = open_trusted_file(path, "pidfile");
  if (!file && file.error_code() == 0) {
    return resolved_target::failure(
        fmt::format("pidfile {} is not trusted: {}", path, file.error()));
  }
  if (!file) return resolved_target::failure_from(file, "pidfile ");
  // More than a PID line is malformed anyway; the limit only keeps a wrong path from costing much.
  const auto content = read_bounded(file.value(), path, kMaxPidfileBytes);
  if (!content) return resolved_target::failure_from(content, "pidfile ");
  const auto text = trim(content.value());
  if (text.empty()) return resolved_target::failure(fmt::format("pidfile {}: empty", path));
  const auto pid = parse_pid(text);
  if (!pid) {
    constexpr std::size_t shown = 40;
    return resolved_target::failure(fmt::format("pidfile {}: {:?}{} is not a PID", path,
                                                text.substr(0, shown),
                                                text.size() > shown ? "..." : ""));
  }
  for (const auto& why : {forbidden_target(*pid), check_pid(proc_root, *pid)}) {
    if (!why.empty()) return resolved_target::failure(fmt::format("pidfile {}: {}", path, why));
  }
  return resolved_target::success({*pid});
}

resolved_target resolve_name(const std::string& proc_root, const std::string& name, uid_t uid) {
  const std::string_view comm_wanted = std::string_view(name).substr(0, comm_max);
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(proc_root.c_str()), &::closedir);
  if (!dir) return resolved_target::errno_failure(errno, proc_root);
  std::vector<pid_t> pids;
  // readdir only fails with EBADF, which cannot happen for a stream we opened.
  while (const dirent* entry = ::readdir(dir.get())) {
    const auto pid = parse_pid(entry->d_name);
    if (!pid || !forbidden_target(*pid).empty()) continue;
    // Any of these reads fails when the process exits meanwhile: it is simply not a match.
    if (process_name(*pid, proc_root) != comm_wanted) continue;
    // A zombie (or a dead task about to vanish) cannot react to a signal any more.
    const auto state = process_state(proc_root, *pid);
    if (!state || *state == 'Z' || *state == 'X') continue;
    // Anyone can name a process anything: another user's would let that user stretch the hold,
    // or turn /readyz ready again after a cancel (issue 8, item 7).
    if (!owned_by(proc_root, *pid, uid)) continue;
    pids.push_back(*pid);
  }
  if (pids.empty()) {
    return resolved_target::failure(fmt::format("no process named {} owned by uid {}", name, uid));
  }
  std::sort(pids.begin(), pids.end());
  return resolved_target::success(std::move(pids));
}

}  // namespace

resolved_target resolve_target(const target_spec& spec, const std::string& proc_root) {
  if (spec.pid) return resolve_pid(proc_root, *spec.pid);
  if (!spec.pidfile.empty()) return resolve_pidfile(proc_root, spec.pidfile);
  if (!spec.name.empty()) return resolve_name(proc_root, spec.name, spec.name_uid);
  if (spec.wrapper())
    return resolved_target::failure("wrapper mode: the target is the shim's own child");
  return resolved_target::failure("no target configured");
}

std::optional<std::string> process_name(pid_t pid, const std::string& proc_root) {
  auto comm = read_proc_file(proc_path(proc_root, pid, "comm"));
  if (comm && !comm->empty() && comm->back() == '\n') comm->pop_back();
  return comm;
}

std::optional<std::vector<std::string>> read_command_line(pid_t pid, const std::string& proc_root) {
  const auto bytes = read_proc_file(proc_path(proc_root, pid, "cmdline"));
  if (!bytes || bytes->empty()) return std::nullopt;
  std::vector<std::string> words;
  std::string_view rest(*bytes);
  // Each word ends with a NUL; a process that rewrote its arguments may leave none at the end.
  while (!rest.empty()) {
    const auto nul = rest.find('\0');
    words.emplace_back(rest.substr(0, nul));
    if (nul == std::string_view::npos) break;
    rest.remove_prefix(nul + 1);
  }
  return words;
}

result<> check_target_at_start(const target_spec& spec) {
  if (spec.pid) {
    if (auto why = forbidden_target(*spec.pid); !why.empty()) {
      return result<>::failure(fmt::format("--target-pid={}: {}", *spec.pid, why));
    }
  }
  if (!spec.pidfile.empty()) {
    const auto file = open_trusted_file(spec.pidfile, "pidfile");
    if (!file && file.error_code() == 0) {
      return result<>::failure(
          fmt::format("--target-pidfile={} is not trusted: {}", spec.pidfile, file.error()));
    }
    // A pidfile that does not exist yet is normal: the target writes it once it runs.
    if (!file && file.error_code() != ENOENT)
      return result<>::failure_from(file, "--target-pidfile=");
  }
  return result<>::success();
}

}  // namespace shim
