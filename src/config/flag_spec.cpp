#include "config/flag_spec.hpp"

#include <fmt/format.h>

namespace shim {

std::string help_row(std::string_view head, std::string_view text, std::size_t column) {
  std::string out = head.size() < column ? fmt::format("{:<{}}", head, column)
                                         : fmt::format("{}\n{:<{}}", head, "", column);
  for (std::size_t start = 0;;) {
    const std::size_t end = text.find('\n', start);
    out += text.substr(start, end - start);
    out += '\n';
    if (end == std::string_view::npos) return out;
    out.append(column, ' ');
    start = end + 1;
  }
}

std::string help_tail(std::string_view text, std::size_t column, std::string_view tail) {
  const std::size_t last_line = text.rfind('\n');
  const std::size_t used =
      last_line == std::string_view::npos ? text.size() : text.size() - last_line - 1;
  return fmt::format("{}{}", column + used + 1 + tail.size() <= kHelpWidth ? " " : "\n", tail);
}

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
