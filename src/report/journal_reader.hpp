#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "report/event_line_reader.hpp"
#include "util/result.hpp"

namespace shim {

// What `shutdown-shim report` reads from the journal. directory: empty: this machine's journal,
// else the journal files in it (journalctl -D).

// The shim's entries in the journal as event records, oldest first: the same records the event log
// holds (journal_entry.hpp writes them), so that `shutdown-shim report --journal` judges them by
// the same rules. Only entries with one of kEvents' MESSAGE_IDs from a process of root (_UID=0):
// any user may send journald an entry with those fields, as any user may not write the event log.
// Each entry's SHUTDOWN_SHIM_<KEY> is the record's key, its _BOOT_ID the boot_id, its _PID the pid.
// Returns how many entries were read; an error when the journal cannot be opened.
result<std::uint64_t> read_journal_records(const std::string& directory,
                                           const std::function<void(const event_record&)>& record);

// The record of one entry, given its fields "NAME=value" one by one.
void set_journal_member(event_record& r, std::string_view field);

// What the journal of one boot says about a hold the event log shows cut short: did logind give
// up waiting ("Delay lock is active (UID 0/root, PID 1234/shutdown-shim) but inhibitor timeout
// is reached.", systemd 252's src/login/logind-dbus.c, at notice level), or did the shim die
// under the lock (SIGKILL, a crash) while logind still waited?
struct cut_short_cause {
  enum class kind {
    no_journal,      // nothing of that boot in the journal (volatile, vacuumed, another node)
    logind_timeout,  // logind's InhibitDelayMaxSec ran out
    shim_died,       // the boot's journal is there and logind never timed out
  };
  kind what = kind::no_journal;
  std::string evidence;  // logind's line, when it timed out
};

// boot_id: 32 hex digits, as event records and the journal's _BOOT_ID write it. unready_us: when
// the hold began (CLOCK_MONOTONIC of that boot); logind's lines before it are not read, since a
// suspend's delay lock can time out the same way.
cut_short_cause find_cut_short_cause(const std::string& boot_id,
                                     std::optional<std::int64_t> unready_us,
                                     const std::string& directory);

}  // namespace shim
