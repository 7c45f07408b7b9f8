#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace shim {

// The widest line of any --help: the unit tests and help2man's man page keep to it.
inline constexpr std::size_t kHelpWidth = 100;

// The two columns of --help, a flag or a command and then what it does: head, then text at column
// (on the next line when head reaches it); each '\n' in text continues it at column.
std::string help_row(std::string_view head, std::string_view text, std::size_t column);

// What appends tail to text: " tail" where the last line has room for it, else a line of its own.
std::string help_tail(std::string_view text, std::size_t column, std::string_view tail);

// How one flag is read and how --help tells of it, whatever it sets (flag_table.hpp).
struct flag_spec {
  std::string_view name = {};        // "--boots"
  std::string_view value_name = {};  // "N", "auto|required|off"; empty: the flag takes no value
  std::string help = {};             // '\n' continues it on the next line, at the help's column
  // A default value --help shows as "(default X)"; empty where there is none, or where help says
  // in words what happens without the flag.
  std::string default_value = {};
  // The value may be left out; then it is only taken from "--flag=value", never from the next
  // argument, and this stands in for it.
  std::string_view implied_value = {};
  std::string_view alias = {};  // "-h", for --help
  bool repeatable = false;      // else a second use is an error
  bool ends_parsing = false;    // --help, --version: what follows is not read

  // The flag and what it takes, as --help heads its row: "--boots=N", "--ensure-inhibit-delay[=V]".
  std::string head() const;
  // Its --help row, with its description at column.
  std::string help_row(std::size_t column) const;
};

}  // namespace shim
