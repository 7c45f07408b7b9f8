#include "config/flag_spec.hpp"

#include <fmt/format.h>

#include "config/help_columns.hpp"

namespace shim {

std::string flag_spec::head() const {
  const std::string flag =
      alias.empty() ? fmt::format("  {}", name) : fmt::format("  {}, {}", alias, name);
  if (value_name.empty()) return flag;
  if (implied_value.empty()) return fmt::format("{}={}", flag, value_name);
  return fmt::format("{}[={}]", flag, value_name);
}

std::string flag_spec::help_row(std::size_t column) const {
  std::string text = help;
  if (!default_value.empty()) {
    text += help_tail(text, column, fmt::format("(default {})", default_value));
  }
  return shim::help_row(head(), text, column);
}

}  // namespace shim
