#include "http/process_metrics.hpp"

#include <filesystem>
#include <limits>
#include <vector>

#include "util/ascii_digits.hpp"
#include "util/small_file.hpp"
#include "util/take_until.hpp"

namespace shim {
namespace {

// The descriptors open now, as procfs counts them: the entries of /proc/self/fd, the one that
// lists them included.
std::optional<double> open_fds() {
  std::error_code ec;
  std::filesystem::directory_iterator it("/proc/self/fd", ec);
  if (ec) return std::nullopt;
  double n = 0;
  for (; it != std::filesystem::directory_iterator(); it.increment(ec)) {
    if (ec) return std::nullopt;
    ++n;
  }
  return n;
}

}  // namespace

std::optional<process_stat> parse_process_stat(std::string_view text) {
  const auto paren = text.rfind(')');
  if (paren == std::string_view::npos) return std::nullopt;
  // Field 3 (state) is the first after the command name; utime is 14, stime 15, starttime 22,
  // rss 24 (proc(5)).
  const auto fields = words(text.substr(paren + 1));
  constexpr std::size_t kFirst = 3;
  const auto field = [&](std::size_t n) -> std::optional<std::uint64_t> {
    if (n - kFirst >= fields.size()) return std::nullopt;
    return parse_decimal<std::uint64_t>(fields[n - kFirst]);
  };
  const auto utime = field(14), stime = field(15), start = field(22), rss = field(24);
  if (!utime || !stime || !start || !rss) return std::nullopt;
  return process_stat{
      .utime_ticks = *utime, .stime_ticks = *stime, .start_ticks = *start, .rss_pages = *rss};
}

std::optional<std::uint64_t> parse_boot_time(std::string_view proc_stat) {
  while (!proc_stat.empty()) {
    const std::string_view line = take_until(proc_stat, '\n');
    if (line.starts_with("btime ")) return parse_decimal<std::uint64_t>(line.substr(6));
  }
  return std::nullopt;
}

std::optional<std::uint64_t> parse_max_open_files(std::string_view limits) {
  constexpr std::string_view kName = "Max open files";
  const auto at = limits.find(kName);
  if (at == std::string_view::npos) return std::nullopt;
  const auto end = limits.find('\n', at);
  const auto fields = words(limits.substr(at + kName.size(), end - at - kName.size()));
  if (fields.empty()) return std::nullopt;
  if (fields[0] == "unlimited") return std::numeric_limits<std::uint64_t>::max();
  return parse_decimal<std::uint64_t>(fields[0]);
}

process_figures read_process_figures() {
  process_figures out;
  const long ticks = ::sysconf(_SC_CLK_TCK);
  const auto stat_text = read_small_file("/proc/self/stat", kMaxProcFileBytes);
  const auto stat = stat_text ? parse_process_stat(stat_text.value()) : std::nullopt;
  const auto proc_stat = read_small_file("/proc/stat", kMaxProcFileBytes);
  const auto boot = proc_stat ? parse_boot_time(proc_stat.value()) : std::nullopt;
  if (stat && ticks > 0) {
    const auto hz = static_cast<double>(ticks);
    out.cpu_seconds = static_cast<double>(stat->utime_ticks + stat->stime_ticks) / hz;
    if (boot)
      out.start_time = static_cast<double>(*boot) + static_cast<double>(stat->start_ticks) / hz;
  }
  if (stat) {
    out.resident_bytes =
        static_cast<double>(stat->rss_pages) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  }
  out.open_fds = open_fds();
  const auto limits = read_small_file("/proc/self/limits", kMaxProcFileBytes);
  if (const auto max = limits ? parse_max_open_files(limits.value()) : std::nullopt) {
    out.max_fds = static_cast<double>(*max);
  }
  return out;
}

}  // namespace shim
