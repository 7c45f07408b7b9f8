#pragma once

#include <array>
#include <cstddef>
#include <string_view>

namespace shim {

// What the event log says became of a shutdown: `shutdown-shim report`'s last column. The rules
// that give each one are in shutdown_account.hpp.
enum class shutdown_verdict {
  clean,        // signal forwarded, the drain ran in full, then the lock was released
  cut_short,    // the records stop before the lock was released: logind's timeout, a SIGKILL
                // or a crash ended the shim
  no_signal,    // there was no target, or it had already exited
  restart,      // no system shutdown: the shim's own stop while none was under way (a Restart
                // record; an older shim's ShutdownInitiated whose SIGTERM was not passed on)
  cancelled,    // PrepareForShutdown(false): the system did not go down
  in_progress,  // this boot's shutdown, still without an end in the log
  untrusted,    // the log may be written by a user other than root (or the shim's own): its
                // records can say anything (trusted_file.hpp has the rules)
};

inline constexpr std::array<std::string_view, 7> kVerdictNames{
    "clean", "cut short", "no signal", "restart", "cancelled", "in progress", "untrusted"};

static_assert(kVerdictNames.size() == static_cast<std::size_t>(shutdown_verdict::untrusted) + 1,
              "one name per shutdown_verdict, in the same order");

constexpr std::string_view to_string(shutdown_verdict v) {
  return kVerdictNames[static_cast<std::size_t>(v)];
}

}  // namespace shim
