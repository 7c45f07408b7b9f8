#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.hpp"

namespace shim {

// systemd-logind's configuration files as far as InhibitDelayMaxSec= goes: which files logind
// reads, in which order, what they say, and the drop-in that --ensure-inhibit-delay writes. No bus
// and no event loop here: the reload lives in inhibit_delay_ensurer.

// logind's "infinity" (systemd's USEC_INFINITY).
inline constexpr std::uint64_t kInfinityUsec = std::numeric_limits<std::uint64_t>::max();

// The drop-in's name, the same as the vendor copy in /usr/lib/systemd/logind.conf.d that ships
// with the unit, so that the /etc copy masks it; "zz-" sorts it after kubelet's 99-kubelet.conf.
inline constexpr std::string_view kShimDropinName = "zz-shutdown-shim.conf";

// systemd's time span syntax as logind parses InhibitDelayMaxSec=: "30" (seconds), "30s", "5min",
// "1min 30s", "1.5h", "500ms", "infinity". Accepts exactly what systemd 252's parse_sec() accepts
// and gives the same value: microseconds (kInfinityUsec for "infinity"), or nullopt.
std::optional<std::uint64_t> parse_logind_timespan(std::string_view text);

// "1m30s"-style rendering of microseconds for logs, "infinity" for kInfinityUsec.
std::string describe_usec(std::uint64_t usec);

// Where logind 252 reads its configuration: the main file, then every *.conf in the drop-in
// directories, sorted by file name together; a file masks those of the same name in directories
// of lower precedence.
struct logind_conf_paths {
  std::filesystem::path main_file;
  std::vector<std::filesystem::path> dropin_dirs;  // highest precedence first
  std::filesystem::path shim_dropin;               // the file --ensure-inhibit-delay writes

  // conf_dir takes the place of /etc/systemd/logind.conf.d and its parent that of /etc/systemd;
  // /run, /usr/local/lib and /usr/lib stay the machine's (logind in the test sandbox sees those
  // too, apart from /run, where neither it nor the machine has logind drop-ins).
  static logind_conf_paths for_conf_dir(const std::filesystem::path& conf_dir);
};

// One InhibitDelayMaxSec= assignment in a [Login] section.
struct inhibit_delay_setting {
  std::filesystem::path file;
  std::string text;                   // as written, trimmed
  std::optional<std::uint64_t> usec;  // nullopt: logind's syntax, but not a value we understand
};

// Every InhibitDelayMaxSec= logind would apply, in the order it applies them (the last one wins),
// as if the shim's drop-in held shim_usec, rounded up to the whole seconds the drop-in can say
// (nullopt: as the files are now). A file that exists but cannot be read is an error: guessing its
// content could lower someone's value.
struct logind_conf_scan {
  std::vector<inhibit_delay_setting> settings;
  std::vector<std::string> errors;
};
logind_conf_scan scan_logind_conf(const logind_conf_paths& paths,
                                  std::optional<std::uint64_t> shim_usec = std::nullopt);

// The settings of one file's text (for the scan, and for tests).
std::vector<inhibit_delay_setting> inhibit_delay_settings(const std::filesystem::path& file,
                                                          std::string_view text);

// Whether logind, waiting at most delay_usec (kInfinityUsec: forever) for delay locks, would end a
// hold of `hold` before the shim is done.
bool inhibit_delay_too_short(std::uint64_t delay_usec, std::chrono::nanoseconds hold);

// On top of drain-delay + exit-timeout: logind's timer starts when it emits PrepareForShutdown,
// the shim's hold a little later (bus dispatch on a node busy shutting down), and the lock's close
// must reach logind before its timer fires. 10 % of the hold, at least 5 s, in whole seconds.
std::chrono::seconds inhibit_delay_margin(std::chrono::nanoseconds hold);

// What --ensure-inhibit-delay would write, and what logind would then use.
struct inhibit_delay_plan {
  std::uint64_t needed_usec = 0;  // hold + margin
  // max(needed, every value other files set), rounded up to whole seconds: never lower.
  std::uint64_t write_usec = 0;
  std::uint64_t effective_usec = 0;  // what logind applies once the drop-in is in place
  std::string write_text;            // write_usec as the drop-in says it: "149", "infinity"
  std::string file_text;             // the drop-in's content
  // With the files as they are, a file of our drop-in's name (the vendor copy, or an earlier /etc
  // one) has the last word and says less than another file: the shim itself lowers someone's
  // value (kubelet's 99-kubelet.conf sorts before zz-shutdown-shim.conf).
  bool shim_dropin_lowers = false;
};
// A failure: do not write, and why.
result<inhibit_delay_plan> plan_inhibit_delay(const logind_conf_paths& paths,
                                              std::chrono::nanoseconds hold);

}  // namespace shim
