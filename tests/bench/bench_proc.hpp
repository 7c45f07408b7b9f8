// What /proc and a few commands say about a process and the machine: memory, CPU time, wake-ups.

#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace bench {

std::string run_and_read(const std::string& command);

std::string first_line(const std::string& text);

std::map<std::string, std::uint64_t> proc_status_kb(pid_t pid);

// /proc/PID/smaps_rollup's totals, in kB, by field name without the colon.
std::map<std::string, std::uint64_t> smaps_rollup_kb(pid_t pid);

// Context switches of every thread of pid, and its thread count.
struct wakeups {
  std::uint64_t voluntary = 0, involuntary = 0;
  std::size_t threads = 0;
};

wakeups count_wakeups(pid_t pid);

// utime + stime of pid, in clock ticks.
std::uint64_t cpu_ticks(pid_t pid);

// Resident memory of pid grouped by what is mapped (a library, [heap], [stack], anonymous).
struct mapping_use {
  std::string name;
  std::uint64_t rss_kb = 0, private_kb = 0, shared_kb = 0;
};

std::vector<mapping_use> rss_by_mapping(pid_t pid);

std::string mib(std::uint64_t kb);

}  // namespace bench
