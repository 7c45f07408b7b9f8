#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace shim {

// The standard process_* metrics that node_exporter, kube-apiserver and every client_golang
// program expose, computed as its process collector does (prometheus/procfs): read from /proc at
// each scrape, never cached.

// What /proc/PID/stat gives: the fields after the command name, which may itself hold spaces and
// parentheses (hence the last ')').
struct process_stat {
  std::uint64_t utime_ticks = 0;
  std::uint64_t stime_ticks = 0;
  std::uint64_t start_ticks = 0;  // since boot
  std::uint64_t rss_pages = 0;
};
std::optional<process_stat> parse_process_stat(std::string_view text);

// /proc/stat's "btime": the boot's wall time in Unix seconds.
std::optional<std::uint64_t> parse_boot_time(std::string_view proc_stat);

// /proc/PID/limits' soft "Max open files" ("unlimited" is UINT64_MAX, as procfs reads it).
std::optional<std::uint64_t> parse_max_open_files(std::string_view limits);

// This process's figures now, as client_golang's process collector computes them; each nullopt
// when it cannot be read.
struct process_figures {
  std::optional<double> cpu_seconds;     // process_cpu_seconds_total: (utime + stime) / USER_HZ
  std::optional<double> open_fds;        // process_open_fds: entries of /proc/self/fd
  std::optional<double> max_fds;         // process_max_fds: the soft RLIMIT_NOFILE
  std::optional<double> resident_bytes;  // process_resident_memory_bytes: rss * page size
  std::optional<double> start_time;      // process_start_time_seconds: btime + starttime / USER_HZ
};
process_figures read_process_figures();

}  // namespace shim
