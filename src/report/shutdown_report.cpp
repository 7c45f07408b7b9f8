#include "report/shutdown_report.hpp"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <optional>
#include <vector>

#include "log/log_line.hpp"
#include "report/journal_reader.hpp"
#include "report/shutdown_history.hpp"

namespace shim {
namespace {

constexpr std::size_t kShortBootId = 8;
constexpr std::size_t kMaxTrigger = 40;
constexpr std::size_t kMaxDetail = 200;
// The shim's KubeletShutdown words, the fix in them: at most 1233 bytes (shim_status.cpp).
constexpr std::size_t kMaxKubelet = 2048;

std::string seconds_text(std::optional<double> s) { return s ? fmt::format("{:.1f}s", *s) : "-"; }

std::string json_seconds(std::optional<double> s) { return s ? fmt::format("{:.3f}", *s) : "null"; }

std::string delay_text(std::optional<std::uint64_t> usec) {
  if (!usec) return "?";
  if (*usec % 1'000'000 == 0) return fmt::format("{}s", *usec / 1'000'000);
  return fmt::format("{:.1f}s", static_cast<double>(*usec) / 1e6);
}

// "2026-11-29T16:36:07.123456Z" -> "2026-11-29 16:36:07Z"; anything else as one short line.
std::string wall_text(const std::string& wall) {
  if (wall.size() >= 20 && wall[10] == 'T' && wall.back() == 'Z') {
    return wall.substr(0, 10) + ' ' + wall.substr(11, 8) + 'Z';
  }
  return one_line(wall, 20);
}

// One boot's row, with the journal's word on a hold cut short.
struct row {
  const shutdown_history::boot* boot;
  shutdown_verdict verdict;
  std::string cause;  // cut short: logind_timeout, shim_died, unknown
  std::string verdict_text;
  std::string detail;
};

row make_row(const shutdown_history::boot& b, const report_options& options) {
  row r{&b, b.verdict(), "", std::string(to_string(b.verdict())), b.detail()};
  if (r.verdict != shutdown_verdict::cut_short) return r;
  const auto found =
      find_cut_short_cause(b.boot_id, b.last_shutdown->unready_us(), options.journal_dir);
  switch (found.what) {
    case cut_short_cause::kind::no_journal:
      r.cause = "unknown";
      r.verdict_text += " (cause unknown: no journal for that boot)";
      break;
    case cut_short_cause::kind::logind_timeout:
      r.cause = "logind_timeout";
      r.verdict_text += " (logind's InhibitDelayMaxSec ran out)";
      r.detail += "; journal: " + found.evidence;
      break;
    case cut_short_cause::kind::shim_died:
      r.cause = "shim_died";
      r.verdict_text += " (SIGKILL or crash: logind did not time out)";
      break;
  }
  return r;
}

std::string short_boot(const shutdown_history::boot& b) {
  std::string id = b.boot_id.empty() ? "?" : b.boot_id.substr(0, kShortBootId);
  if (b.current) id += '*';
  return id;
}

std::string render_table(const std::vector<row>& rows) {
  std::vector<std::array<std::string, 8>> cells;
  cells.push_back({"BOOT", "SHUTDOWN AT (UTC)", "TRIGGER", "UNREADY>SIGNAL", "SIGNAL>EXIT", "HOLD",
                   "LOGIND MAX", "VERDICT"});
  bool any_current = false;
  for (const row& r : rows) {
    any_current = any_current || r.boot->current;
    if (!r.boot->last_shutdown) {
      // Restarts only: no shutdown to tell of.
      cells.push_back({short_boot(*r.boot), "-", "-", "-", "-", "-", "-", r.verdict_text});
      continue;
    }
    const shutdown_account& s = *r.boot->last_shutdown;
    // A hold that was never released lasted at least as long as its records go.
    const std::string hold = s.hold()           ? seconds_text(s.hold())
                             : s.records_span() ? ">=" + seconds_text(s.records_span())
                                                : "-";
    cells.push_back({short_boot(*r.boot), wall_text(s.wall()), one_line(s.trigger(), kMaxTrigger),
                     seconds_text(s.unready_to_signal()), seconds_text(s.signal_to_target_exit()),
                     hold, delay_text(s.inhibit_delay_max_usec()), r.verdict_text});
  }
  std::array<std::size_t, 8> width{};
  for (const auto& line : cells) {
    for (std::size_t c = 0; c < line.size(); ++c) width[c] = std::max(width[c], line[c].size());
  }
  std::string out;
  for (const auto& line : cells) {
    std::string text;
    for (std::size_t c = 0; c < line.size(); ++c) {
      text += line[c];
      if (c + 1 < line.size()) text.append(width[c] - line[c].size() + 2, ' ');
    }
    out += text + '\n';
  }
  for (const row& r : rows) {
    const std::string id = short_boot(*r.boot);
    // An untrusted log is said once, in the note; restarts on a line of their own.
    if (r.verdict != shutdown_verdict::clean && r.verdict != shutdown_verdict::untrusted &&
        r.verdict != shutdown_verdict::restart) {
      out += fmt::format("{}: {}\n", id, one_line(r.detail, kMaxDetail));
    }
    if (r.boot->restarts > 0) {
      out += fmt::format("{}: restarts of the shim (no shutdowns): {}, the last at {}\n", id,
                         r.boot->restarts, wall_text(r.boot->last_restart_wall));
    }
    if (!r.boot->last_shutdown) continue;
    const shutdown_account& s = *r.boot->last_shutdown;
    // What kubelet was expected to do, in full: its fix is in it.
    const auto say = [&out, &id](std::string_view what, const std::string& text) {
      if (!text.empty()) out += fmt::format("{}: {}{}\n", id, what, one_line(text, kMaxKubelet));
    };
    say("kubelet: ", s.kubelet());
    say("load balancer: ", s.load_balancer());
    if (const int n = s.targets_restarted(); n > 0) {
      out += fmt::format(
          "{}: kube-apiserver ran again {} time{} during the hold (kubelet restarted it); each got "
          "its own one signal\n",
          id, n, n == 1 ? "" : "s");
    }
    say("", s.kubelet_gone());
  }
  if (any_current) out += "* this boot\n";
  return out;
}

std::string render_json(const std::vector<row>& rows) {
  std::string out;
  for (const row& r : rows) {
    std::string line;
    // A member after the '{' or a ',': `raw` as it is (numbers, null, true), `text` quoted.
    const auto raw = [&line](std::string_view key, std::string_view value) {
      line += line.empty() ? '{' : ',';
      line += fmt::format("\"{}\":{}", key, value);
    };
    const auto text = [&line](std::string_view key, std::string_view value) {
      line += line.empty() ? '{' : ',';
      append_json_string(line, key, value);
    };
    text("boot_id", r.boot->boot_id);
    raw("current_boot", r.boot->current ? "true" : "false");
    raw("restarts", std::to_string(r.boot->restarts));
    if (r.boot->restarts > 0) text("last_restart_wall", r.boot->last_restart_wall);
    const auto& s = r.boot->last_shutdown;
    if (s) {
      text("wall", s->wall());
      text("trigger", s->trigger());
      raw("unready_to_signal_seconds", json_seconds(s->unready_to_signal()));
      raw("signal_to_target_exit_seconds", json_seconds(s->signal_to_target_exit()));
      raw("hold_seconds", json_seconds(s->hold()));
      raw("records_span_seconds", json_seconds(s->records_span()));
      const auto delay = s->inhibit_delay_max_usec();
      raw("inhibit_delay_max_seconds",
          delay ? json_seconds(static_cast<double>(*delay) / 1e6) : "null");
    }
    text("verdict", to_string(r.verdict));
    if (s) {
      if (!r.cause.empty()) text("cut_short_cause", r.cause);
      raw("signal_by", !s->unready_to_signal()  ? "null"
                       : s->signal_by_kubelet() ? "\"kubelet\""
                                                : "\"shim\"");
      if (!s->kubelet().empty()) text("kubelet", s->kubelet());
      if (!s->load_balancer().empty()) text("load_balancer", s->load_balancer());
      if (s->targets_restarted() > 0)
        raw("targets_restarted", std::to_string(s->targets_restarted()));
      if (!s->kubelet_gone().empty()) text("kubelet_gone", s->kubelet_gone());
    }
    text("detail", r.detail);
    out += line + "}\n";
  }
  return out;
}

// The verdicts of boots read from source (the event log's path, or the journal).
report judge(const std::vector<shutdown_history::boot>& boots, const report_options& options,
             std::string note, std::string_view source) {
  report out;
  out.note = std::move(note);
  if (boots.empty()) {
    out.result = report::outcome::no_shutdown;
    if (out.note.empty()) out.note = fmt::format("no shutdown on record in {}", source);
    return out;
  }
  std::vector<row> rows;
  rows.reserve(boots.size());
  for (const auto& b : boots) rows.push_back(make_row(b, options));
  out.out = options.json ? render_json(rows) : render_table(rows);
  // The last system shutdown decides; restarts never do (issue 22).
  const auto last = std::find_if(rows.rbegin(), rows.rend(),
                                 [](const row& r) { return r.boot->last_shutdown.has_value(); });
  if (last == rows.rend()) {
    out.result = report::outcome::no_shutdown;
    if (out.note.empty()) out.note = fmt::format("no system shutdown on record in {}", source);
  } else {
    out.result = last->verdict == shutdown_verdict::clean ? report::outcome::clean
                                                          : report::outcome::not_clean;
  }
  return out;
}

report judge_journal(const report_options& options, const std::string& current_boot_id,
                     std::string note) {
  auto boots = shutdown_history::read_journal(options.journal_dir, options.boots, current_boot_id);
  if (!boots) return {.result = report::outcome::unreadable, .out = {}, .note = boots.error()};
  return judge(
      boots.value(), options, std::move(note),
      options.journal_dir.empty() ? "the journal" : "the journal in " + options.journal_dir);
}

bool journal_is_persistent(const report_options& options) {
  struct stat st {};
  const std::string dir = options.journal_dir.empty()
                              ? std::string(report_options::kPersistentJournal)
                              : options.journal_dir;
  return ::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

report make_report(const report_options& options, const std::string& current_boot_id) {
  if (options.journal) return judge_journal(options, current_boot_id, "");
  auto read = shutdown_history::read(options.event_log, options.boots, current_boot_id);
  if (!read) {
    return {.result = report::outcome::unreadable,
            .out = {},
            .note = "cannot read the event log: " + read.error()};
  }
  const auto& history = read.value();
  const std::string absent =
      fmt::format("no event log at {} (nor {}.1)", options.event_log, options.event_log);
  if (history.files_read == 0 && journal_is_persistent(options)) {
    return judge_journal(options, current_boot_id, absent + ": read the journal");
  }
  std::string note;
  if (history.skipped_lines > 0) {
    note = fmt::format("skipped {} line(s) of {} that are not event records (torn or not JSON)",
                       history.skipped_lines, options.event_log);
  }
  if (history.files_read == 0) note = absent;
  if (!history.untrusted.empty()) {
    note = history.untrusted + "; every verdict below is untrusted" +
           (note.empty() ? "" : "; " + note);
  }
  return judge(history.boots, options, std::move(note), options.event_log);
}

}  // namespace shim
