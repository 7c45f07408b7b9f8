#include "report/shutdown_history.hpp"

#include <fmt/format.h>

#include <utility>

#include "report/journal_reader.hpp"
#include "util/boot_id.hpp"
#include "util/trusted_file.hpp"

namespace shim {
namespace {

// The two last boots that had a shutdown: the running boot's, if it has one yet (a cancelled
// shutdown, a restart mid-hold), and the one before it.
constexpr std::size_t kBootsRead = 2;

std::optional<std::int64_t> clock_of(const event_record& r) {
  return r.boottime_us ? r.boottime_us : r.monotonic_us;
}

}  // namespace

shutdown_verdict shutdown_history::boot::verdict() const {
  if (!untrusted.empty()) return shutdown_verdict::untrusted;
  return last_shutdown ? last_shutdown->verdict(!current) : shutdown_verdict::restart;
}

std::string shutdown_history::boot::detail() const {
  if (!untrusted.empty()) return untrusted;
  if (last_shutdown) return last_shutdown->detail(!current);
  return "no system shutdown on record in this boot; the shim was restarted (" + restarts_text() +
         ")";
}

std::string shutdown_history::boot::restarts_text() const {
  if (restarts == 0) return {};
  return fmt::format("{} restart{}, the last at {}", restarts, restarts == 1 ? "" : "s",
                     last_restart_wall);
}

shutdown_history::shutdown_history(std::size_t boots, std::string current_boot_id)
    : keep_(boots), current_boot_id_(std::move(current_boot_id)) {}

bool shutdown_history::starts_new_boot(const event_record& r) const {
  if (!open_) return true;
  if (!r.boot_id.empty() && !open_->boot_id.empty()) return r.boot_id != open_->boot_id;
  const auto clock = clock_of(r);
  return r.event == "Started" && clock && open_->last_clock && *clock < *open_->last_clock;
}

void shutdown_history::add(const event_record& r) {
  if (starts_new_boot(r)) {
    close_boot();
    open_.emplace(open_boot{.boot_id = r.boot_id,
                            .last_clock = std::nullopt,
                            .shutdown = std::nullopt,
                            .earlier_shutdown = std::nullopt,
                            .restarts = 0,
                            .last_restart_wall = {},
                            .last_pid = 0,
                            .last_was_target_exit = false});
  }
  open_boot& b = *open_;
  if (b.boot_id.empty()) b.boot_id = r.boot_id;  // an upgrade within the boot names it
  if (const auto clock = clock_of(r); clock && (!b.last_clock || *clock > *b.last_clock)) {
    b.last_clock = clock;
  }

  const auto count_restart = [&b](const std::string& wall) {
    ++b.restarts;
    b.last_restart_wall = wall;
  };
  if (r.event == "ShutdownInitiated") {
    // A later shutdown of the same boot (after a cancel, or a restart of the shim) is the one
    // that ended the boot.
    b.earlier_shutdown = std::move(b.shutdown);
    b.shutdown.emplace(r, b.last_pid == r.pid && b.last_was_target_exit);
  } else if (r.event == "Restart") {
    count_restart(r.wall);
  } else if (b.shutdown) {
    b.shutdown->add(r);
    // An older shim's record of a restart: the boot's shutdown is the one before it again.
    if (b.shutdown->verdict(false) == shutdown_verdict::restart) {
      count_restart(b.shutdown->wall());
      b.shutdown = std::move(b.earlier_shutdown);
      b.earlier_shutdown.reset();
    }
  }
  b.last_pid = r.pid;
  b.last_was_target_exit = r.event == "TargetExited";
}

void shutdown_history::keep(const open_boot& b, std::deque<boot>& kept,
                            std::size_t& with_shutdown) const {
  if (!b.shutdown && b.restarts == 0) return;
  kept.push_back(boot{.boot_id = b.boot_id,
                      .current = !b.boot_id.empty() && b.boot_id == current_boot_id_,
                      .last_shutdown = b.shutdown,
                      .restarts = b.restarts,
                      .last_restart_wall = b.last_restart_wall,
                      .untrusted = {}});
  if (b.shutdown) ++with_shutdown;
  // Oldest first: beyond `keep_` shutdowns, beyond 2 * `keep_` boots, or a boot of restarts only
  // before the oldest of `keep_` shutdowns.
  while (!kept.empty() && (with_shutdown > keep_ || kept.size() > 2 * keep_ ||
                           (!kept.front().last_shutdown && with_shutdown == keep_))) {
    if (kept.front().last_shutdown) --with_shutdown;
    kept.pop_front();
  }
}

void shutdown_history::close_boot() {
  if (open_) keep(*open_, done_, done_with_shutdown_);
  open_.reset();
}

std::vector<shutdown_history::boot> shutdown_history::boots() const {
  std::deque<boot> kept = done_;
  std::size_t with_shutdown = done_with_shutdown_;
  if (open_) keep(*open_, kept, with_shutdown);
  return {kept.begin(), kept.end()};
}

result<shutdown_history::read_result> shutdown_history::read(const std::string& path,
                                                             std::size_t boots,
                                                             const std::string& current_boot_id) {
  shutdown_history history(boots, current_boot_id);
  event_line_reader reader({.record = [&history](const event_record& r) { history.add(r); }});
  read_result out;
  // logrotate renames PATH to PATH.1 and the shim reopens PATH on SIGHUP: PATH.1 is older.
  for (const std::string& file : {path + ".1", path}) {
    auto read = reader.read_file(file);
    if (!read) return result<read_result>::failure_from(read);
    if (!read.value()) continue;
    ++out.files_read;
    if (!out.untrusted.empty()) continue;
    // Checked apart from the read: an untrusted log is still shown, for what it is worth.
    if (const auto trust = open_trusted_file(file, "event log"); !trust)
      out.untrusted = trust.error();
  }
  out.boots = history.boots();
  if (!out.untrusted.empty()) {
    out.untrusted = fmt::format("the event log {} is not trusted: {}", path, out.untrusted);
    for (auto& b : out.boots) b.untrusted = out.untrusted;
  }
  out.skipped_lines = reader.skipped_lines();
  return result<read_result>::success(std::move(out));
}

result<std::vector<shutdown_history::boot>> shutdown_history::read_journal(
    const std::string& directory, std::size_t boots, const std::string& current_boot_id) {
  shutdown_history history(boots, current_boot_id);
  auto read =
      read_journal_records(directory, [&history](const event_record& r) { history.add(r); });
  if (!read) return result<std::vector<boot>>::failure_from(read);
  return result<std::vector<boot>>::success(history.boots());
}

std::optional<previous_shutdown> previous_shutdown_in(
    const std::vector<shutdown_history::boot>& boots) {
  for (auto it = boots.rbegin(); it != boots.rend(); ++it) {
    // Only a system shutdown: a boot of restarts only never tells what the last reboot was.
    if (it->current || !it->last_shutdown) continue;
    const shutdown_account& s = *it->last_shutdown;
    return previous_shutdown{.boot_id = it->boot_id,
                             .wall = s.wall(),
                             .trigger = s.trigger(),
                             .verdict = it->verdict(),
                             .detail = it->detail(),
                             .hold = s.hold(),
                             .records_span = s.records_span(),
                             .unready_to_signal = s.unready_to_signal(),
                             .signal_to_target_exit = s.signal_to_target_exit(),
                             .restarts = it->restarts};
  }
  return std::nullopt;
}

result<std::optional<previous_shutdown>> read_previous_shutdown(
    const std::string& event_log, const std::string& current_boot_id) {
  auto history = shutdown_history::read(event_log, kBootsRead, current_boot_id);
  if (!history) return result<std::optional<previous_shutdown>>::failure_from(history);
  return result<std::optional<previous_shutdown>>::success(
      previous_shutdown_in(history.value().boots));
}

std::optional<previous_shutdown> recall_previous_shutdown(const std::string& event_log, logger& log,
                                                          event_recorder& events) {
  if (event_log.empty()) return std::nullopt;
  const auto boot = current_boot_id();
  if (!boot) {
    log.warning("this boot's id is unreadable: the previous shutdown is not looked for",
                {{"error", boot.error()}});
    return std::nullopt;
  }
  auto read = read_previous_shutdown(event_log, boot.value());
  if (!read) {
    log.warning("cannot read the event log for the previous shutdown", {{"error", read.error()}});
    return std::nullopt;
  }
  if (const auto& previous = read.value()) {
    events.record(event_kind::PreviousShutdown, to_string(previous->verdict),
                  "the last shutdown of an earlier boot: " + previous->summary(),
                  previous->fields());
  }
  return read.value();
}

}  // namespace shim
