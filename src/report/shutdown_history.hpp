#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "log/event_recorder.hpp"
#include "log/logger.hpp"
#include "report/event_line_reader.hpp"
#include "report/previous_shutdown.hpp"
#include "report/shutdown_account.hpp"
#include "util/result.hpp"

namespace shim {

// The last system shutdown of each boot in an event log, and the restarts of the shim in it:
// records in, in log order, one at a time; only the last `boots` boots that had a shutdown are
// kept (with the boots among and after them that had restarts only, `boots` of those at most), so
// memory does not grow with the log.
//
// A boot ends where the next record's boot_id differs. A record of an older shim has no boot_id:
// there a Started whose CLOCK_BOOTTIME is behind the previous record's begins a new boot (only a
// Started: a ShutdownResumed is stamped back to an earlier run's moment on purpose).
//
// A restart (issue 22) is a Restart record, or an older shim's ShutdownInitiated that its account
// judges `restart` (its SIGTERM not passed on, the lock released at once): it is counted, and the
// boot keeps the system shutdown before it, if any.
class shutdown_history {
 public:
  struct boot {
    std::string boot_id;                            // empty: the records do not say
    bool current = false;                           // the boot running now
    std::optional<shutdown_account> last_shutdown;  // none: the boot had restarts only
    std::uint64_t restarts = 0;
    std::string last_restart_wall;  // when the last of them began
    // "the event log PATH is not trusted: why"; empty when it may be
    std::string untrusted;
    shutdown_verdict verdict() const;
    std::string detail() const;
    // "2 restarts, the last at WALL"; empty when there was none.
    std::string restarts_text() const;
  };

  // current_boot_id: this boot's id (current_boot_id()); its shutdown may still be under way.
  shutdown_history(std::size_t boots, std::string current_boot_id);

  void add(const event_record& r);

  // Oldest first; the most recent shutdown last.
  std::vector<boot> boots() const;

  // Streams PATH.1 (logrotate's previous file, if there is one) then PATH through a new history.
  // An error names the file that could not be read; no file at all gives an empty history. A file
  // read that root may not trust (open_trusted_file's rules, as for a pidfile) makes every boot's
  // verdict `untrusted` (issue 18, item 5).
  struct read_result {
    std::vector<boot> boots;
    std::uint64_t skipped_lines = 0;  // torn or not records
    std::uint64_t files_read = 0;
    std::string untrusted;  // why not, naming the file; empty when every file read is trusted
  };
  static result<read_result> read(const std::string& path, std::size_t boots,
                                  const std::string& current_boot_id);
  // The same from the shim's entries in the journal (journal_reader.hpp); directory as there.
  static result<std::vector<boot>> read_journal(const std::string& directory, std::size_t boots,
                                                const std::string& current_boot_id);

 private:
  // No default member initializers: clang 14 (the fuzz build) cannot emplace a nested struct
  // that has them; add() sets every member.
  struct open_boot {
    std::string boot_id;
    std::optional<std::int64_t> last_clock;  // boottime_us, else monotonic_us
    std::optional<shutdown_account> shutdown;
    // The shutdown before `shutdown`: the boot's again if that one turns out a restart.
    std::optional<shutdown_account> earlier_shutdown;
    std::uint64_t restarts;
    std::string last_restart_wall;
    std::int64_t last_pid;
    bool last_was_target_exit;
  };

  bool starts_new_boot(const event_record& r) const;
  void close_boot();
  // Appends b's boot to kept, if it had a shutdown or restarts, and drops the oldest beyond what
  // the class comment keeps; with_shutdown: how many of kept have a shutdown.
  void keep(const open_boot& b, std::deque<boot>& kept, std::size_t& with_shutdown) const;

  std::size_t keep_;
  std::string current_boot_id_;
  std::optional<open_boot> open_;
  std::deque<boot> done_;
  std::size_t done_with_shutdown_ = 0;
};

// The shutdown of the latest of `boots` (oldest first, as shutdown_history gives them) that had
// one and is not the boot running now; nullopt when there is none.
std::optional<previous_shutdown> previous_shutdown_in(
    const std::vector<shutdown_history::boot>& boots);

// The daemon's read at start: streams the event log (and PATH.1) once. current_boot_id:
// current_boot_id(), never empty (a shim that cannot tell its boot cannot tell an earlier one).
// One streamed pass over the log, memory bounded (its cost: docs/benchmarks.md).
result<std::optional<previous_shutdown>> read_previous_shutdown(const std::string& event_log,
                                                                const std::string& current_boot_id);

// The daemon's start: the last shutdown of an earlier boot, read with read_previous_shutdown()
// and recorded as PreviousShutdown; none (and a warning saying why) when it cannot be read. Once,
// before the loop runs: a large log takes a noticeable part of a second, which on the loop would
// hold up probes as long.
std::optional<previous_shutdown> recall_previous_shutdown(const std::string& event_log, logger& log,
                                                          event_recorder& events);

}  // namespace shim
