#include "logind/logind_config.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <map>
#include <system_error>

#include "util/ascii_digits.hpp"
#include "util/duration_text.hpp"
#include "util/errno_error.hpp"
#include "util/saturating.hpp"
#include "util/small_file.hpp"
#include "util/unique_fd.hpp"

namespace shim {

namespace fs = std::filesystem;

namespace {

constexpr std::uint64_t kUsecPerSec = 1'000'000;

struct time_unit {
  std::string_view suffix;
  std::uint64_t usec;
};

// systemd's table (extract_multiplier in src/basic/time-util.c), in its order: the first suffix
// that matches wins, so "ms" is tried before "m" and "min" before "m".
constexpr std::array<time_unit, 30> kTimeUnits{{
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
    {"\xce\xbcs", 1},  // U+03BC GREEK SMALL LETTER MU
    // U+00B5 MICRO SIGN: Debian 12's systemd 252.39 accepts it too (`systemd-analyze timespan`).
    {"\xc2\xb5s", 1},
}};

// systemd's WHITESPACE, what parse_time skips between its parts.
bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
// What strtoll() skips before the number: isspace() in the C locale, a superset of the above.
bool is_c_space(char c) { return is_blank(c) || c == '\v' || c == '\f'; }
std::string_view trim(std::string_view s) {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
  return s;
}

std::size_t skip_blanks(std::string_view s, std::size_t i) {
  while (i < s.size() && is_blank(s[i])) ++i;
  return i;
}

// strtoll(s + i, &end, 10) as glibc does it: leading isspace(), an optional sign, decimal digits.
// Without any digit nothing is converted and end is i. nullopt where strtoll sets ERANGE.
struct c_integer {
  long long value = 0;
  std::size_t end = 0;
};
std::optional<c_integer> c_strtoll(std::string_view s, std::size_t i) {
  const std::size_t start = i;
  while (i < s.size() && is_c_space(s[i])) ++i;
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  if (i == s.size() || !is_digit(s[i])) return c_integer{0, start};
  // The magnitude, stopped just above what a long long holds (LLONG_MIN's magnitude included).
  constexpr std::uint64_t kCap = std::uint64_t{1} << 63;
  std::uint64_t magnitude = 0;
  for (; i < s.size() && is_digit(s[i]); ++i) {
    const auto digit = static_cast<std::uint64_t>(s[i] - '0');
    magnitude =
        std::min(kCap + 1, saturating_add(saturating_mul(magnitude, std::uint64_t{10}), digit));
  }
  if (magnitude > (negative ? kCap : kCap - 1)) return std::nullopt;
  const auto value = negative ? static_cast<long long>(~magnitude + 1)  // two's complement
                              : static_cast<long long>(magnitude);
  return c_integer{value, i};
}

// extract_multiplier: the unit at s[i] and where it ends; the default unit (seconds) and i itself
// when there is none.
std::size_t extract_multiplier(std::string_view s, std::size_t i, std::uint64_t& multiplier) {
  for (const auto& u : kTimeUnits) {
    if (s.substr(i).starts_with(u.suffix)) {
      multiplier = u.usec;
      return i + u.suffix.size();
    }
  }
  return i;
}

// The drop-in holds whole seconds, and logind must never wait less than the shim means: a value
// is rounded up. Beyond the most seconds parse_sec takes (it refuses N >= UINT64_MAX / 10^6) only
// "infinity" is long enough.
std::uint64_t dropin_usec(std::uint64_t usec) {
  constexpr std::uint64_t kMaxSeconds = kInfinityUsec / kUsecPerSec - 1;
  const std::uint64_t seconds = usec / kUsecPerSec + (usec % kUsecPerSec != 0 ? 1 : 0);
  return seconds > kMaxSeconds ? kInfinityUsec : seconds * kUsecPerSec;
}

// How the drop-in says a value dropin_usec() returned.
std::string dropin_text(std::uint64_t usec) {
  return usec == kInfinityUsec ? std::string("infinity") : std::to_string(usec / kUsecPerSec);
}

}  // namespace

// A port of systemd 252's parse_time(t, &usec, USEC_PER_SEC) (src/basic/time-util.c), which
// parse_sec() and so logind's InhibitDelayMaxSec= use: same acceptance, same value, integer
// arithmetic only.
std::optional<std::uint64_t> parse_logind_timespan(std::string_view text) {
  // systemd reads a C string.
  const std::string_view t = text.substr(0, text.find('\0'));

  std::size_t p = skip_blanks(t, 0);
  if (t.substr(p).starts_with("infinity")) {
    if (skip_blanks(t, p + 8) != t.size()) return std::nullopt;
    return kInfinityUsec;
  }

  std::uint64_t usec = 0;
  for (bool something = false;;) {
    std::uint64_t multiplier = kUsecPerSec;
    p = skip_blanks(t, p);
    if (p == t.size()) {
      if (!something) return std::nullopt;
      break;
    }
    if (t[p] == '-') return std::nullopt;  // not even "-0"

    const auto number = c_strtoll(t, p);
    if (!number || number->value < 0) return std::nullopt;
    const std::size_t e = number->end;
    const bool fraction = e < t.size() && t[e] == '.';
    if (fraction) {
      p = e + 1;
      while (p < t.size() && is_digit(t[p])) ++p;
    } else if (e == p) {
      return std::nullopt;
    } else {
      p = e;
    }

    const std::size_t s = extract_multiplier(t, skip_blanks(t, p), multiplier);
    // Refuses "12.34.56", accepts "12.34 .56" and "12.34s.56".
    if (s == p && s != t.size()) return std::nullopt;
    p = s;

    const auto whole = static_cast<std::uint64_t>(number->value);
    if (whole >= kInfinityUsec / multiplier) return std::nullopt;
    std::uint64_t k = whole * multiplier;
    if (k >= kInfinityUsec - usec) return std::nullopt;
    usec += k;
    something = true;

    if (fraction) {
      std::uint64_t m = multiplier / 10;
      std::size_t b = e + 1;
      for (; b < t.size() && is_digit(t[b]); ++b, m /= 10) {
        k = static_cast<std::uint64_t>(t[b] - '0') * m;
        if (k >= kInfinityUsec - usec) return std::nullopt;
        usec += k;
      }
      // Refuses "0.-0", "3.+1", "3. 1", "3.sec" and "3.hoge".
      if (b == e + 1) return std::nullopt;
    }
  }
  return usec;
}

std::string describe_usec(std::uint64_t usec) {
  if (usec == kInfinityUsec) return "infinity";
  return format_usec(usec);
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
  // systemd's read_line() ends a line at \n, \r or NUL ("\r\n" leaves an empty line between,
  // which counts for nothing).
  constexpr std::string_view kLineEnds("\n\r\0", 3);
  while (!text.empty()) {
    const auto end = text.find_first_of(kLineEnds);
    const std::string_view line = trim(text.substr(0, end));
    text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
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
    const auto text = read_small_file_if_exists(file, kMaxLogindConfBytes);
    if (!text) return scan.errors.push_back("read " + text.error());
    if (!text.value()) return;
    auto settings = inhibit_delay_settings(file, *text.value());
    scan.settings.insert(scan.settings.end(), settings.begin(), settings.end());
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
      const std::uint64_t usec = dropin_usec(*shim_usec);
      scan.settings.push_back({file, dropin_text(usec), usec});
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

result<inhibit_delay_plan> plan_inhibit_delay(const logind_conf_paths& paths,
                                              std::chrono::nanoseconds hold) {
  using R = result<inhibit_delay_plan>;
  inhibit_delay_plan plan;
  hold = std::max(hold, std::chrono::nanoseconds(0));
  const auto needed =
      saturating_add(std::chrono::ceil<std::chrono::seconds>(hold), inhibit_delay_margin(hold));
  plan.needed_usec = dropin_usec(
      saturating_mul(static_cast<std::uint64_t>(needed.count()), std::uint64_t{kUsecPerSec}));

  // What the others set, as logind would read the files once ours is in place (a vendor copy of
  // ours is masked by it then, and so does not count).
  const auto others = scan_logind_conf(paths, plan.needed_usec);
  if (!others.errors.empty()) return R::failure(others.errors.front());
  plan.write_usec = plan.needed_usec;
  std::uint64_t others_usec = 0;
  for (const auto& s : others.settings) {
    if (s.file == paths.shim_dropin) continue;
    if (!s.usec) {
      return R::failure(fmt::format(
          "cannot tell what {} means by InhibitDelayMaxSec={}; not writing (a guess could lower "
          "it)",
          s.file.string(), s.text));
    }
    others_usec = std::max(others_usec, *s.usec);
    plan.write_usec = std::max(plan.write_usec, *s.usec);
  }
  plan.write_usec = dropin_usec(plan.write_usec);

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
    return R::failure(fmt::format(
        "{} sets InhibitDelayMaxSec={} and sorts after {}, so logind would still cut the hold at "
        "{}; raise or rename it",
        last.file.string(), last.text, paths.shim_dropin.filename().string(),
        describe_usec(plan.effective_usec)));
  }

  plan.write_text = dropin_text(plan.write_usec);
  plan.file_text = fmt::format(
      "# Written by shutdown-shim --ensure-inhibit-delay: logind must wait for the shim's delay\n"
      "# lock at least drain-delay + exit-timeout ({}) plus a margin ({}), and never less than\n"
      "# any other logind.conf drop-in asks for. The shim rewrites this file when it is too "
      "short.\n"
      "[Login]\n"
      "InhibitDelayMaxSec={}\n",
      format_duration(hold), format_duration(inhibit_delay_margin(hold)), plan.write_text);
  return R::success(std::move(plan));
}

}  // namespace shim
