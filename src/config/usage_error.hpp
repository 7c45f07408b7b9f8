#pragma once

#include <stdexcept>

namespace shim {

// A bad flag or value, on the daemon's command line or report's. The message is one line naming
// the flag and what is wrong; main() prints it and exits 2.
class usage_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace shim
