#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/flag_spec.hpp"
#include "config/usage_error.hpp"

// One table per command line (the daemon's, and each command's: report, status, drill), from
// which both the parsing and the --help text come: a flag added to a table is parsed and shown.
namespace shim {

// One flag of a table: how it is read and shown, and what sets its value in Options.
template <typename Options>
struct flag {
  flag_spec spec;
  void (*set)(Options&, std::string_view name, std::string_view value) = nullptr;
};

template <typename Options>
struct flag_table {
  // Empty for the daemon's flags, whose messages keep their own wording; else the command's name,
  // which its messages about an argument it does not know begin with.
  std::string_view command;
  std::size_t help_column;  // where the flags' descriptions start in --help
  std::vector<flag<Options>> flags;
};

// What parse_flag_table() read besides the values it set.
struct flags_read {
  std::set<std::string_view> given;  // the names of the flags given
  // The arguments after "--", where the table has no command (the daemon's command to wrap).
  std::optional<std::span<const std::string_view>> after_dashes;
};

// The table's rows for --help, one flag each, in the table's order.
template <typename Options>
std::string flags_help(const flag_table<Options>& table) {
  std::string out;
  for (const auto& f : table.flags) out += f.spec.help_row(table.help_column);
  return out;
}

// A flag's name for a message: quoted only when it must be, so that a newline in it cannot make
// the message two lines (found by the flags fuzz target).
inline std::string printable(std::string_view name) {
  const bool plain =
      std::all_of(name.begin(), name.end(), [](char c) { return c > ' ' && c < 0x7f; });
  return plain ? std::string(name) : fmt::format("{:?}", name);
}

// Reads args left to right into options. A flag that takes a value reads it from "--flag=value"
// or from the next argument, unless that starts with "--" (then the value is missing;
// "--flag=--odd" still works). A flag that ends parsing wins over what follows, while a bad flag
// before it is still an error. Throws usage_error, one line naming the flag.
template <typename Options>
flags_read parse_flag_table(const flag_table<Options>& table,
                            std::span<const std::string_view> args, Options& options) {
  const bool daemon = table.command.empty();
  const auto unknown = [&](std::string_view arg) {
    return usage_error(fmt::format("{}: unknown argument {:?}", table.command, arg));
  };
  flags_read read;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    if (arg == "--" && daemon) {
      read.after_dashes = args.subspan(i + 1);
      return read;
    }
    if (arg.size() < 2 || arg.front() != '-') {
      if (!daemon) throw unknown(arg);
      throw usage_error(fmt::format("unexpected argument {:?}; put the command after --", arg));
    }
    const auto eq = arg.find('=');
    const std::string_view name = arg.substr(0, eq);
    const bool has_value = eq != std::string_view::npos;
    const auto f = std::find_if(table.flags.begin(), table.flags.end(), [&](const auto& row) {
      return row.spec.name == name || (!row.spec.alias.empty() && row.spec.alias == name);
    });
    if (f == table.flags.end() || (!daemon && has_value && f->spec.value_name.empty())) {
      if (!daemon) throw unknown(arg);
      throw usage_error(fmt::format("unknown flag {}", printable(name)));
    }
    std::string_view value;
    if (f->spec.value_name.empty()) {
      if (has_value) throw usage_error(fmt::format("{} takes no value", name));
    } else if (has_value) {
      value = arg.substr(eq + 1);
    } else if (!f->spec.implied_value.empty()) {
      value = f->spec.implied_value;
    } else if (i + 1 == args.size() || args[i + 1].starts_with("--")) {
      throw usage_error(
          daemon ? fmt::format("{}: missing value (want {}={})", name, name, f->spec.value_name)
                 : fmt::format("{}: missing value", name));
    } else {
      value = args[++i];
    }
    if (!read.given.insert(f->spec.name).second && !f->spec.repeatable) {
      throw usage_error(fmt::format("{}: given more than once", f->spec.name));
    }
    f->set(options, f->spec.name, value);
    if (f->spec.ends_parsing) return read;
  }
  return read;
}

}  // namespace shim
