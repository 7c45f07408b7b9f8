#pragma once

#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "config/flag_table.hpp"

namespace shim {

// A command's flags read with its table (report, status, drill); nullopt once its --help has
// printed usage(). Throws usage_error.
template <typename Options>
std::optional<Options> read_command_flags(const flag_table<Options>& table,
                                          std::span<const std::string_view> args,
                                          std::string (*usage)()) {
  Options options;
  parse_flag_table(table, args, options);
  if (!options.help) return options;
  std::fputs(usage().c_str(), stdout);
  return std::nullopt;
}

}  // namespace shim
