#pragma once

#include <string>
#include <string_view>

namespace shim {

// "TERM", "SIGTERM", "15", "sigterm" -> 15. Throws std::invalid_argument.
int parse_signal(std::string_view text);

// 15 -> "SIGTERM"; unknown numbers render as "signal N".
std::string signal_name(int signal);

}  // namespace shim
