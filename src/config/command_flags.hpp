#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <span>
#include <string_view>

#include "config/usage_error.hpp"

namespace shim {

// The commands' flags (report, status, drill): "--flag=value" or "--flag value", as the daemon's
// own flags. i is the index of the argument being read; value_of() may move it past a value.
struct command_flag_reader {
  std::span<const std::string_view> args;
  std::size_t i = 0;

  std::string_view value_of(std::string_view name, std::string_view arg) {
    if (arg.size() > name.size() && arg[name.size()] == '=') return arg.substr(name.size() + 1);
    if (i + 1 == args.size() || args[i + 1].starts_with("--")) {
      throw usage_error(fmt::format("{}: missing value", name));
    }
    return args[++i];
  }
};

// arg is the flag `name`, bare or with "=value".
inline bool is_flag(std::string_view arg, std::string_view name) {
  return arg == name ||
         (arg.starts_with(name) && arg.size() > name.size() && arg[name.size()] == '=');
}

}  // namespace shim
