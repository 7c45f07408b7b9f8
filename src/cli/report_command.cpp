#include "cli/report_command.hpp"

#include <fmt/format.h>

#include <cstdio>

#include "cli/command_flags.hpp"
#include "config/flag_table.hpp"
#include "config/usage_error.hpp"
#include "util/ascii_digits.hpp"
#include "util/boot_id.hpp"

namespace shim {
namespace {

std::size_t parse_boots(std::string_view value) {
  const auto n = parse_decimal<std::size_t>(value);
  if (!n || *n == 0 || *n > report_options::kMaxBoots) {
    throw usage_error(fmt::format("--boots: {:?} is not a number from 1 to {}", value,
                                  report_options::kMaxBoots));
  }
  return *n;
}

const flag_table<report_command_line>& report_flags() {
  using sv = std::string_view;
  static const flag_table<report_command_line> table{
      .command = "report",
      .help_column = 21,
      .flags = {
          {.spec = {.name = "--event-log",
                    .value_name = "PATH",
                    .help = "the shim's --event-log; PATH.1 (rotated) is read first if it exists;\n"
                            "by default where the systemd unit and the Kubernetes manifests\n"
                            "write it",
                    .default_value = std::string(report_options::kDefaultEventLog)},
           .set =
               [](report_command_line& r, sv name, sv value) {
                 if (value.empty()) throw usage_error(fmt::format("{}: empty path", name));
                 r.options.event_log = value;
               }},
          {.spec = {.name = "--journal",
                    .help = fmt::format(
                        "the shim's entries in the journal instead of the event log (the\n"
                        "default when there is no event log and the journal is persistent:\n"
                        "{} or --journal-dir exists); only root's entries count",
                        report_options::kPersistentJournal)},
           .set = [](report_command_line& r, sv, sv) { r.options.journal = true; }},
          {.spec = {.name = "--boots",
                    .value_name = "N",
                    .help = "the last N boots that had a shutdown, with those of restarts only\n"
                            "among and after them",
                    .default_value = std::to_string(report_options::kDefaultBoots)},
           .set = [](report_command_line& r, sv,
                     sv value) { r.options.boots = parse_boots(value); }},
          {.spec = {.name = "--json",
                    .help = "one JSON object per boot and line instead of the table",
                    .repeatable = true},
           .set = [](report_command_line& r, sv, sv) { r.options.json = true; }},
          {.spec = {.name = "--journal-dir",
                    .value_name = "DIR",
                    .help = "read the journal from DIR (e.g. another node's /var/log/journal)\n"
                            "instead of the local one, for --journal and a hold cut short"},
           .set = [](report_command_line& r, sv, sv value) { r.options.journal_dir = value; }},
          {.spec =
               {.name = "--help", .help = "show this help", .alias = "-h", .ends_parsing = true},
           .set = [](report_command_line& r, sv, sv) { r.help = true; }},
      }};
  return table;
}

command_outcome outcome_of(report::outcome result) {
  switch (result) {
    case report::outcome::clean:
      return command_outcome::ok;
    case report::outcome::not_clean:
      return command_outcome::failed;
    case report::outcome::no_shutdown:
      return command_outcome::not_found;
    case report::outcome::unreadable:
      return command_outcome::unreadable;
  }
  return command_outcome::failed;
}

}  // namespace

report_command_line parse_report_flags(std::span<const std::string_view> args) {
  report_command_line line;
  parse_flag_table(report_flags(), args, line);
  return line;
}

std::string report_usage_text() {
  return fmt::format(
      "usage: shutdown-shim report [--event-log=PATH | --journal] [--boots=N] [--json]\n"
      "                            [--journal-dir=DIR]\n"
      "\n"
      "What became of the system shutdown of each of the last N boots that had one, from the\n"
      "event log: when and why it began, unready to signal, signal to the target's exit, how long\n"
      "the reboot was held, logind's InhibitDelayMaxSec as the shim saw it, and a verdict: clean,\n"
      "cut short, no signal, cancelled (or in progress, this boot). Restarts of the shim (a\n"
      "SIGTERM while no shutdown was under way) are no shutdowns: each boot's are counted on a\n"
      "line of their own, and a boot that had only restarts has the verdict restart. For a hold\n"
      "cut short, the journal of that boot says whether logind's timeout or a SIGKILL or crash\n"
      "ended it. A log that a user other than root may write (the file, its directory or one\n"
      "above) can say anything: then every verdict is untrusted.\n"
      "\n"
      "{}"
      "\n"
      "Exit status: 0 the most recent system shutdown was clean; 1 it was not (or is still under\n"
      "way, or the log is untrusted); 2 usage error; 3 no system shutdown on record; 4 the event\n"
      "log could not be read (or the journal opened).\n",
      flags_help(report_flags()));
}

command_outcome report_command(std::span<const std::string_view> args) {
  const auto line = read_command_flags(report_flags(), args, report_usage_text);
  if (!line) return command_outcome::ok;
  const auto report = make_report(line->options, current_boot_id().value_or(""));
  std::fputs(report.out.c_str(), stdout);
  if (!report.note.empty()) std::fprintf(stderr, "shutdown-shim report: %s\n", report.note.c_str());
  return outcome_of(report.result);
}

}  // namespace shim
