#include "config/flag_spec.hpp"

#include <fmt/format.h>

#include "config/help_columns.hpp"

namespace shim {

std::string flag_spec::head() const {
  std::string out = alias.empty() ? "  " : fmt::format("  {}, ", alias);
  out += name;
  if (value_name.empty()) return out;
  return out + (implied_value.empty() ? "=" : "[=") + std::string(value_name) +
         (implied_value.empty() ? "" : "]");
}

std::string flag_spec::help_row(std::size_t column) const {
  std::string text = help;
  if (!default_value.empty()) {
    text += help_tail(text, column, fmt::format("(default {})", default_value));
  }
  return shim::help_row(head(), text, column);
}

}  // namespace shim
