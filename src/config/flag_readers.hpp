#pragma once

#include <fmt/format.h>
#include <sys/types.h>

#include <array>
#include <chrono>
#include <string>
#include <string_view>
#include <utility>

#include "http/listen_address.hpp"
#include "util/joined.hpp"

namespace shim {

// The readers of the daemon's flag values: each returns the value checked, or throws usage_error
// naming the flag (bad_value).

// Quotes a user-supplied value for an error message, escaping what would garble the terminal.
std::string quoted(std::string_view s);

// Refuses a flag's value: usage_error("FLAG: WHY").
[[noreturn]] void bad_value(std::string_view flag, std::string_view why);

// Every duration flag goes through here, so that each has the same syntax and the same bound.
std::chrono::nanoseconds duration_flag(std::string_view flag, std::string_view value);

// A probe interval or timeout: 0 would probe without pause, or fail every probe.
std::chrono::nanoseconds positive_duration_flag(std::string_view flag, std::string_view value);

// --upstream-fall and --upstream-rise: how many probes in a row, 1 to kMaxProbeCount.
unsigned count_flag(std::string_view flag, std::string_view value);

// A path, not empty.
std::string path_flag(std::string_view flag, std::string_view value);

// HOST:PORT or [HOST]:PORT, a literal address in its canonical text.
listen_address listen_flag(std::string_view flag, std::string_view value);

// A positive PID, never 1.
pid_t pid_flag(std::string_view flag, std::string_view value);

// A user name or a numeric UID, like systemd's User=: digits are a UID, anything else is looked up.
uid_t user_flag(std::string_view flag, std::string_view value);

// logind, kubelet and a restarted shim read these paths afresh: a relative one would depend on the
// working directory of that moment's process.
std::string absolute_path_flag(std::string_view flag, std::string_view value);

// A name, not empty.
std::string name_flag(std::string_view flag, std::string_view value);

// One of a fixed set of words.
template <typename Enum, std::size_t N>
Enum choice_flag(std::string_view flag, std::string_view value,
                 const std::array<std::pair<std::string_view, Enum>, N>& choices) {
  for (const auto& [name, e] : choices) {
    if (name == value) return e;
  }
  bad_value(flag,
            fmt::format("{} is not one of {}", quoted(value),
                        joined(choices, ", ", [](const auto& choice) { return choice.first; })));
}

}  // namespace shim
