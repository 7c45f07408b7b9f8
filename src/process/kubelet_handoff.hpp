#pragma once

#include <string>

#include "log/log_line.hpp"

namespace shim {

// What the target's records say when kubelet sends the signal: kubelet's SIGTERM window in words
// ("+0s..+30s", "?" when not known) and as the record's fields.
struct kubelet_handoff {
  std::string window = "?";
  log_fields fields;
};

}  // namespace shim
