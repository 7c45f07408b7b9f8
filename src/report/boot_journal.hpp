#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace shim {

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
// suspend's delay lock can time out the same way. directory: a journal directory to read instead
// of the local journal (journalctl -D).
cut_short_cause find_cut_short_cause(const std::string& boot_id,
                                     std::optional<std::int64_t> unready_us,
                                     const std::string& directory);

}  // namespace shim
