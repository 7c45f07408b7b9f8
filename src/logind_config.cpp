#include "logind_config.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <fstream>
#include <map>
#include <sstream>
#include <system_error>

#include "config.hpp"
#include "errno_error.hpp"
#include "unique_fd.hpp"

namespace shim {

namespace fs = std::filesystem;

namespace {

constexpr std::uint64_t kUsecPerSec = 1'000'000;

struct time_unit {
  std::string_view suffix;
  std::uint64_t usec;
};

// systemd's table (time-util.c), in its order: the first suffix that matches wins, so "ms" is
// tried before "m" and "min" before "m".
constexpr std::array<time_unit, 29> kTimeUnits{{
    {"seconds", kUsecPerSec},
    {"second", kUsecPerSec},
    {"sec", kUsecPerSec},
    {"s", kUsecPerSec},
    {"minutes", 60 * kUsecPerSec},
    {"minute", 60 * kUsecPerSec},
    {"min", 60 * kUsecPerSec},
    {"months", 2'629'800 * kUsecPerSec},
    {"month", 2'629'800 * kUsecPerSec},
    {"M", 2'629'800 * kUsecPerSec},
    {"msec", 1'000},
    {"ms", 1'000},
    {"m", 60 * kUsecPerSec},
    {"hours", 3'600 * kUsecPerSec},
    {"hour", 3'600 * kUsecPerSec},
    {"hr", 3'600 * kUsecPerSec},
    {"h", 3'600 * kUsecPerSec},
    {"days", 86'400 * kUsecPerSec},
    {"day", 86'400 * kUsecPerSec},
    {"d", 86'400 * kUsecPerSec},
    {"weeks", 604'800 * kUsecPerSec},
    {"week", 604'800 * kUsecPerSec},
    {"w", 604'800 * kUsecPerSec},
    {"years", 31'557'600 * kUsecPerSec},
    {"year", 31'557'600 * kUsecPerSec},
    {"y", 31'557'600 * kUsecPerSec},
    {"usec", 1},
    {"us", 1},
    {"\xce\xbcs", 1},  // μs
}};

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
  return s;
}

// Returns the file's text; nullopt if it does not exist. Throws std::system_error otherwise.
std::optional<std::string> read_if_exists(const fs::path& path) {
  unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT || errno == ENOTDIR) return std::nullopt;
    throw_errno(errno, "read " + path.string());
  }
  std::string text;
  std::array<char, 4096> buf{};
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno(errno, "read " + path.string());
    }
    if (n == 0) break;
    text.append(buf.data(), static_cast<std::size_t>(n));
  }
  return text;
}

}  // namespace

std::optional<std::uint64_t> parse_logind_timespan(std::string_view text) {
  std::string_view s = trim(text);
  if (s == "infinity") return kInfinityUsec;
  if (s.empty()) return std::nullopt;

  std::uint64_t total = 0;
  while (!s.empty()) {
    std::uint64_t whole = 0;
    bool digits = false;
    std::size_t i = 0;
    for (; i < s.size() && is_digit(s[i]); ++i) {
      digits = true;
      const unsigned d = static_cast<unsigned>(s[i] - '0');
      if (whole > (kInfinityUsec - d) / 10) return std::nullopt;
      whole = whole * 10 + d;
    }
    double fraction = 0;
    if (i < s.size() && s[i] == '.') {
      double scale = 0.1;
      for (++i; i < s.size() && is_digit(s[i]); ++i) {
        digits = true;
        fraction += scale * (s[i] - '0');
        scale /= 10;
      }
    }
    if (!digits) return std::nullopt;
    while (i < s.size() && is_blank(s[i])) ++i;
    s.remove_prefix(i);

    std::uint64_t unit = kUsecPerSec;  // a bare number is seconds
    for (const auto& u : kTimeUnits) {
      if (s.starts_with(u.suffix)) {
        unit = u.usec;
        s.remove_prefix(u.suffix.size());
        break;
      }
    }
    if (whole > (kInfinityUsec - 1) / unit) return std::nullopt;
    const std::uint64_t value =
        whole * unit + static_cast<std::uint64_t>(fraction * static_cast<double>(unit));
    if (value >= kInfinityUsec - total) return std::nullopt;
    total += value;
    s = trim(s);
  }
  return total;
}

std::string describe_usec(std::uint64_t usec) {
  if (usec == kInfinityUsec) return "infinity";
  return format_duration(std::chrono::microseconds(usec));
}

logind_conf_paths logind_conf_paths::for_conf_dir(const fs::path& conf_dir) {
  logind_conf_paths p;
  p.main_file = conf_dir.parent_path() / "logind.conf";
  p.dropin_dirs = {conf_dir, "/run/systemd/logind.conf.d", "/usr/local/lib/systemd/logind.conf.d",
                   "/usr/lib/systemd/logind.conf.d"};
  p.shim_dropin = conf_dir / kShimDropinName;
  return p;
}

std::vector<inhibit_delay_setting> inhibit_delay_settings(const fs::path& file,
                                                          std::string_view text) {
  std::vector<inhibit_delay_setting> out;
  bool in_login = false;
  std::istringstream lines{std::string(text)};
  std::string raw;
  while (std::getline(lines, raw)) {
    const std::string_view line = trim(raw);
    if (line.empty() || line.front() == '#' || line.front() == ';') continue;
    if (line.front() == '[') {
      in_login = line == "[Login]";
      continue;
    }
    const auto eq = line.find('=');
    if (!in_login || eq == std::string_view::npos) continue;
    if (trim(line.substr(0, eq)) != "InhibitDelayMaxSec") continue;
    const std::string_view value = trim(line.substr(eq + 1));
    out.push_back({file, std::string(value), parse_logind_timespan(value)});
  }
  return out;
}

logind_conf_scan scan_logind_conf(const logind_conf_paths& paths,
                                  std::optional<std::uint64_t> shim_usec) {
  logind_conf_scan scan;
  auto add_file = [&](const fs::path& file) {
    try {
      if (auto text = read_if_exists(file)) {
        auto settings = inhibit_delay_settings(file, *text);
        scan.settings.insert(scan.settings.end(), settings.begin(), settings.end());
      }
    } catch (const std::system_error& e) {
      scan.errors.push_back(e.what());
    }
  };

  add_file(paths.main_file);

  // File name -> the file logind reads under that name: the first directory that has it wins.
  std::map<std::string, fs::path> dropins;
  for (const auto& dir : paths.dropin_dirs) {
    std::error_code ec;
    fs::directory_iterator it(dir, ec);
    if (ec) {
      if (ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory) {
        scan.errors.push_back(fmt::format("list {}: {}", dir.string(), ec.message()));
      }
      continue;
    }
    for (; it != fs::directory_iterator(); it.increment(ec)) {
      const auto name = it->path().filename().string();
      if (!name.ends_with(".conf") || name.starts_with('.')) continue;
      dropins.emplace(name, it->path());
    }
    if (ec) scan.errors.push_back(fmt::format("list {}: {}", dir.string(), ec.message()));
  }
  if (shim_usec) dropins[paths.shim_dropin.filename().string()] = paths.shim_dropin;

  for (const auto& [name, file] : dropins) {
    if (shim_usec && file == paths.shim_dropin) {
      const std::string text =
          *shim_usec == kInfinityUsec ? "infinity" : std::to_string(*shim_usec / kUsecPerSec);
      scan.settings.push_back({file, text, *shim_usec});
    } else {
      add_file(file);
    }
  }
  return scan;
}

bool inhibit_delay_too_short(std::uint64_t delay_usec, std::chrono::nanoseconds hold) {
  // Unsigned: "infinity" is UINT64_MAX, which chrono's signed microseconds would make negative.
  const auto needed = std::chrono::ceil<std::chrono::microseconds>(hold).count();
  return needed > 0 && delay_usec < static_cast<std::uint64_t>(needed);
}

std::chrono::seconds inhibit_delay_margin(std::chrono::nanoseconds hold) {
  const auto tenth = std::chrono::ceil<std::chrono::seconds>(hold / 10);
  return std::max<std::chrono::seconds>(std::chrono::seconds(5), tenth);
}

inhibit_delay_plan plan_inhibit_delay(const logind_conf_paths& paths,
                                      std::chrono::nanoseconds hold) {
  inhibit_delay_plan plan;
  const auto needed = std::chrono::ceil<std::chrono::seconds>(hold) + inhibit_delay_margin(hold);
  plan.needed_usec = static_cast<std::uint64_t>(needed.count()) * kUsecPerSec;

  // What the others set, as logind would read the files once ours is in place (a vendor copy of
  // ours is masked by it then, and so does not count).
  const auto others = scan_logind_conf(paths, plan.needed_usec);
  if (!others.errors.empty()) {
    plan.error = others.errors.front();
    return plan;
  }
  plan.write_usec = plan.needed_usec;
  std::uint64_t others_usec = 0;
  for (const auto& s : others.settings) {
    if (s.file == paths.shim_dropin) continue;
    if (!s.usec) {
      plan.error = fmt::format(
          "cannot tell what {} means by InhibitDelayMaxSec={}; not writing (a guess could lower "
          "it)",
          s.file.string(), s.text);
      return plan;
    }
    others_usec = std::max(others_usec, *s.usec);
    plan.write_usec = std::max(plan.write_usec, *s.usec);
  }

  const auto now = scan_logind_conf(paths);
  if (now.errors.empty() && !now.settings.empty()) {
    const auto& in_effect = now.settings.back();
    plan.shim_dropin_lowers = in_effect.file.filename() == kShimDropinName &&
                              in_effect.usec.value_or(kInfinityUsec) < others_usec;
  }

  const auto after = scan_logind_conf(paths, plan.write_usec);
  plan.effective_usec = after.settings.back().usec.value_or(0);
  const auto& last = after.settings.back();
  const auto hold_usec = std::chrono::ceil<std::chrono::microseconds>(hold).count();
  if (last.file != paths.shim_dropin &&
      plan.effective_usec < static_cast<std::uint64_t>(hold_usec)) {
    plan.error = fmt::format(
        "{} sets InhibitDelayMaxSec={} and sorts after {}, so logind would still cut the hold at "
        "{}; raise or rename it",
        last.file.string(), last.text, paths.shim_dropin.filename().string(),
        describe_usec(plan.effective_usec));
    return plan;
  }

  plan.write_text = plan.write_usec == kInfinityUsec
                        ? std::string("infinity")
                        : std::to_string(plan.write_usec / kUsecPerSec);
  plan.file_text = fmt::format(
      "# Written by shutdown-shim --ensure-inhibit-delay: logind must wait for the shim's delay\n"
      "# lock at least drain-delay + exit-timeout ({}) plus a margin ({}), and never less than\n"
      "# any other logind.conf drop-in asks for. The shim rewrites this file when it is too "
      "short.\n"
      "[Login]\n"
      "InhibitDelayMaxSec={}\n",
      format_duration(hold), format_duration(inhibit_delay_margin(hold)), plan.write_text);
  return plan;
}

void write_file_atomically(const fs::path& file, std::string_view content) {
  const fs::path dir = file.parent_path();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::system_error(ec, "create " + dir.string());

  std::string temp = (dir / ("." + file.filename().string() + ".XXXXXX")).string();
  unique_fd fd(::mkostemp(temp.data(), O_CLOEXEC));
  if (!fd) throw_errno(errno, "create a temporary file in " + dir.string());
  try {
    std::string_view rest = content;
    while (!rest.empty()) {
      const ssize_t n = ::write(fd.get(), rest.data(), rest.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw_errno(n < 0 ? errno : EIO, "write " + temp);
      rest.remove_prefix(static_cast<std::size_t>(n));
    }
    check_libc(::fchmod(fd.get(), 0644), "chmod " + temp);
    check_libc(::fsync(fd.get()), "fsync " + temp);
    fd.reset();
    check_libc(::rename(temp.c_str(), file.c_str()), "rename " + temp + " to " + file.string());
  } catch (...) {
    ::unlink(temp.c_str());
    throw;
  }
  // The rename itself must survive a crash, or logind could read the old file after the reboot.
  unique_fd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir_fd) throw_errno(errno, "open " + dir.string());
  check_libc(::fsync(dir_fd.get()), "fsync " + dir.string());
}

}  // namespace shim
