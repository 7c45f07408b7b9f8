#pragma once

#include <cstddef>
#include <string>
#include <string_view>

// The two columns of --help: a flag or a command, then what it does.
namespace shim {

// The widest line of any --help: the unit tests and help2man's man page keep to it.
inline constexpr std::size_t kHelpWidth = 100;

// One row: head, then text at column (on the next line when head reaches it); each '\n' in text
// continues it at column.
std::string help_row(std::string_view head, std::string_view text, std::size_t column);

// What appends tail to text: " tail" where the last line has room for it, else a line of its own.
std::string help_tail(std::string_view text, std::size_t column, std::string_view tail);

}  // namespace shim
