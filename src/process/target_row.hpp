#pragma once

#include <cstdint>
#include <string>

namespace shim {

// The target check's row of the readiness table, written by target_watch: whether a target is
// configured and runs without the shutdown's signal, and how many signals went.
struct target_row {
  bool configured = false;
  bool running = false;  // a target runs that has not had the shutdown's signal
  std::string detail;    // what runs ("pid 812"), or why none counts
  std::uint64_t signals_forwarded = 0;
};

}  // namespace shim
