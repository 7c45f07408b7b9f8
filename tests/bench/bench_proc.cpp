#include "bench_proc.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <system_error>

#include "node_sandbox.hpp"

namespace bench {

std::string run_and_read(const std::string& command) {
  std::string out;
  if (FILE* f = popen(command.c_str(), "r")) {
    char buf[512];
    while (std::fgets(buf, sizeof buf, f)) out += buf;
    pclose(f);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

std::map<std::string, std::uint64_t> proc_status_kb(pid_t pid) {
  std::map<std::string, std::uint64_t> values;
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  for (std::string line; std::getline(in, line);) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::istringstream rest(line.substr(colon + 1));
    std::uint64_t v = 0;
    if (rest >> v) values[line.substr(0, colon)] = v;
  }
  return values;
}

std::map<std::string, std::uint64_t> smaps_rollup_kb(pid_t pid) {
  std::map<std::string, std::uint64_t> values;
  std::ifstream in(fmt::format("/proc/{}/smaps_rollup", pid));
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    std::string key;
    std::uint64_t kb = 0;
    if (f >> key >> kb && key.ends_with(':')) values[key.substr(0, key.size() - 1)] = kb;
  }
  return values;
}

wakeups count_wakeups(pid_t pid) {
  wakeups w;
  std::error_code ec;
  for (const auto& task :
       std::filesystem::directory_iterator(fmt::format("/proc/{}/task", pid), ec)) {
    auto v = proc_status_kb(std::stoi(task.path().filename().string()));
    w.voluntary += v["voluntary_ctxt_switches"];
    w.involuntary += v["nonvoluntary_ctxt_switches"];
    ++w.threads;
  }
  return w;
}

std::uint64_t cpu_ticks(pid_t pid) {
  const std::string stat = sandbox::read_text_file(fmt::format("/proc/{}/stat", pid));
  std::istringstream in(stat.substr(stat.rfind(')') + 2));
  std::string field;
  std::uint64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return utime + stime;
}

std::vector<mapping_use> rss_by_mapping(pid_t pid) {
  std::map<std::string, mapping_use> groups;
  std::ifstream in(fmt::format("/proc/{}/smaps", pid));
  std::string current;
  const std::regex header(R"(^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \S+\s*(.*)$)");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_match(line, m, header)) {
      current = m[1].str().empty() ? "[anonymous]" : m[1].str();
      if (current.find('/') != std::string::npos) {
        current = std::filesystem::path(current).filename().string();
      }
      groups[current].name = current;
      continue;
    }
    std::istringstream f(line);
    std::string key;
    std::uint64_t kb = 0;
    if (!(f >> key >> kb)) continue;
    auto& g = groups[current];
    if (key == "Rss:") g.rss_kb += kb;
    if (key == "Private_Clean:" || key == "Private_Dirty:") g.private_kb += kb;
    if (key == "Shared_Clean:" || key == "Shared_Dirty:") g.shared_kb += kb;
  }
  std::vector<mapping_use> result;
  for (auto& [name, g] : groups) {
    if (g.rss_kb > 0) result.push_back(g);
  }
  std::sort(result.begin(), result.end(),
            [](const mapping_use& a, const mapping_use& b) { return a.rss_kb > b.rss_kb; });
  return result;
}

std::string mib(std::uint64_t kb) {
  return fmt::format("{:.2f} MiB", static_cast<double>(kb) / 1024);
}

}  // namespace bench
