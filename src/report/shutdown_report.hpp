#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace shim {

// `shutdown-shim report`: for each of the last boots that had a shutdown, what triggered it, how
// long each step took and what became of it (shutdown_account.hpp has the rules), read from the
// event log, or from the journal (--journal, and when there is no event log but a persistent
// journal). The log is streamed (shutdown_history), so its size does not matter.
struct report_options {
  // Where the systemd unit (unit-files/systemd), the DaemonSet and the sidecar write it.
  static constexpr std::string_view kDefaultEventLog = "/var/log/shutdown-shim/events.jsonl";
  static constexpr std::size_t kDefaultBoots = 10;
  static constexpr std::size_t kMaxBoots = 10000;
  // journald keeps its files across reboots only when this directory exists (Storage=auto, the
  // default; journald.conf(5)).
  static constexpr std::string_view kPersistentJournal = "/var/log/journal";

  std::string event_log{kDefaultEventLog};
  std::size_t boots = kDefaultBoots;
  bool json = false;
  bool journal = false;     // the records from the journal, not the event log
  std::string journal_dir;  // empty: the local journal
};

struct report {
  // What the exit status says (the report command's usage text lists them).
  enum class outcome {
    clean,        // the most recent shutdown on record was clean
    not_clean,    // it was not (or is still under way)
    no_shutdown,  // no shutdown on record (or no event log)
    unreadable,   // the event log (or the journal) could not be read
  };
  outcome result = outcome::no_shutdown;
  std::string out;   // for stdout: the table, or one JSON object per boot and line
  std::string note;  // for stderr, one line or empty: skipped lines, no log, the read error
};

// current_boot_id: current_boot_id(); that boot's shutdown may still be under way.
report make_report(const report_options& options, const std::string& current_boot_id);

}  // namespace shim
