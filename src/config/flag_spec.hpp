#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace shim {

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
