#pragma once

#include "logind/logind_settings.hpp"

namespace shim {

// The values of the flags that pick a mode, for the rooms that act on one of them without the
// whole config.
enum class inhibit_mode { automatic, required, off };
enum class forward_policy { automatic, always, never };

}  // namespace shim
