#pragma once

namespace shim {

// The values of the flags that pick a mode, for the rooms that act on one of them without the
// whole config.
enum class inhibit_mode { automatic, required, off };
enum class forward_policy { automatic, always, never };
// --ensure-inhibit-delay: off only reports a too-short InhibitDelayMaxSec; best_effort raises it
// and goes on with a warning if it cannot; required exits 1 if it cannot.
enum class ensure_mode { off, best_effort, required };

}  // namespace shim
