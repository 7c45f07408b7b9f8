#include "process/signal_record.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>
#include <system_error>

#include "util/ascii_digits.hpp"
#include "util/atomic_file.hpp"
#include "util/boot_id.hpp"
#include "util/small_file.hpp"
#include "util/take_until.hpp"
#include "util/trusted_file.hpp"

namespace shim {

namespace {

constexpr std::string_view kFileName = "signalled";
constexpr std::string_view kHeader = "shutdown-shim signal record 1";
constexpr std::string_view kLeftToKubelet = "left_to_kubelet";
// A record names a handful of processes; anything much larger is not ours.
constexpr std::size_t kMaxBytes = 64 * 1024;

// "PID START_TIME SIGNALLED_US SIGNAL"
std::optional<shutdown_record::signalled_process> parse_signalled(std::string_view text) {
  std::string_view fields[4];
  for (auto& field : fields) field = take_until(text, ' ');
  const auto pid = parse_decimal<pid_t>(fields[0]);
  const auto start_time = parse_decimal<std::uint64_t>(fields[1]);
  const auto signalled_us = parse_decimal<std::int64_t>(fields[2]);
  const auto signal = parse_decimal<int>(fields[3]);
  if (!text.empty() || !pid || *pid <= 0 || !start_time || !signalled_us || !signal) {
    return std::nullopt;
  }
  return shutdown_record::signalled_process{{*pid, *start_time}, *signalled_us, *signal};
}

}  // namespace

bool shutdown_record::was_signalled(const process_identity& p) const {
  return std::any_of(signalled.begin(), signalled.end(),
                     [&p](const signalled_process& s) { return s.process == p; });
}

shutdown_record::signalled_process* shutdown_record::find(const process_identity& p) {
  const auto it = std::find_if(signalled.begin(), signalled.end(),
                               [&p](const signalled_process& s) { return s.process == p; });
  return it == signalled.end() ? nullptr : &*it;
}

signal_record::signal_record(std::filesystem::path dir) : dir_(std::move(dir)) {
  if (!dir_.empty()) file_ = dir_ / kFileName;
}

result<shutdown_record> signal_record::load() const {
  using loaded = result<shutdown_record>;
  shutdown_record record;
  if (!enabled()) return loaded::success(record);
  const auto text = read_small_file_if_exists(file_, kMaxBytes);
  if (!text) return loaded::failure_from(text, "read ");
  if (!text.value()) return loaded::success(record);
  // Only a directory that nobody else may write to can say what root must not signal; the shim
  // claimed it at start (claimed_directory), and it is checked as it is read.
  if (auto dir = open_trusted_directory(dir_.string(), "record of signalled processes"); !dir) {
    return loaded::failure_from(dir, "not trusted: ");
  }

  std::string_view rest = *text.value();
  // An empty file is an empty record.
  if (!rest.empty() && take_until(rest, '\n') != kHeader) {
    return loaded::failure(file_.string() + ": not a signal record");
  }
  while (!rest.empty()) {
    const std::string_view line = take_until(rest, '\n');
    std::string_view value = line;
    const std::string_view key = take_until(value, '=');
    const auto number = parse_decimal<std::int64_t>(value);
    if (key == "boot_id") {
      record.boot_id = value;
    } else if (key == "unready_us" && number) {
      record.unready_us = number;
    } else if (key == "cause") {
      record.cause = value;
    } else if (auto p = key == "signalled" || key == kLeftToKubelet ? parse_signalled(value)
                                                                    : std::nullopt) {
      p->left_to_kubelet = key == kLeftToKubelet;
      record.signalled.push_back(*p);
    } else {
      return loaded::failure(fmt::format("{}: malformed line {:?}", file_.string(), line));
    }
  }
  // /run is gone at reboot, but a state directory in a container may outlive one.
  if (record.boot_id != current_boot_id().value_or("")) return loaded::success(shutdown_record{});
  return loaded::success(record);
}

result<> signal_record::save(const shutdown_record& record) const {
  if (!enabled()) return result<>::success();
  std::string text = fmt::format("{}\nboot_id={}\n", kHeader, current_boot_id().value_or(""));
  if (record.unready_us) {
    text += fmt::format("unready_us={}\n", *record.unready_us);
    std::string cause = record.cause;
    std::replace(cause.begin(), cause.end(), '\n', ' ');
    text += fmt::format("cause={}\n", cause);
  }
  for (const auto& s : record.signalled) {
    // A process that has exited (or whose PID now names another one) needs no protection.
    if (identify_process(s.process.pid) != s.process) continue;
    text += fmt::format("{}={} {} {} {}\n", s.left_to_kubelet ? kLeftToKubelet : "signalled",
                        s.process.pid, s.process.start_time, s.signalled_us, s.signal);
  }
  try {
    // No fsync: saved on the loop before the first 503, where fsyncs held /readyz's flip back
    // (docs/benchmarks.md). It guards against a restart of the shim, not of the machine: after a
    // reboot its boot_id no longer matches.
    write_file_atomically(file_, text, durability::process_crash);
  } catch (const std::system_error& e) {
    return result<>::failure(e.what());
  }
  return result<>::success();
}

}  // namespace shim
