#pragma once

namespace shim {

// What a command came to; main() alone turns it into the exit status (a usage_error is 2).
enum class command_outcome {
  ok,          // 0: ready; every checker saw the drill; the last shutdown was clean; help shown
  failed,      // 1: not ready; refused, or not every checker saw the drill; not clean
  not_found,   // 3: no shim listens; no shutdown on record
  unreadable,  // 4: the control socket failed the request; the event log or journal unreadable
};

}  // namespace shim
