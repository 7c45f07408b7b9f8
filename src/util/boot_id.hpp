#pragma once

#include <string>

#include "util/result.hpp"

namespace shim {

// This boot's id as 32 lowercase hex digits, read from /proc/sys/kernel/random/boot_id: the form
// the journal's _BOOT_ID uses; a failure when it cannot be read or is no id.
//
// There is deliberately no switch to override it: the tests give a process another boot by
// bind-mounting a file over /proc/sys/kernel/random/boot_id in a mount namespace of their own
// (as systemd-nspawn does for a container), so the shim that runs in production is the one
// under test, with no hidden flag or environment variable that could fake a reboot.
result<std::string> current_boot_id();

}  // namespace shim
