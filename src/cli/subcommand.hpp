#pragma once

#include <span>
#include <string>
#include <string_view>

#include "cli/command_outcome.hpp"

namespace shim {

// One row of main()'s table of subcommands (`shutdown-shim report ...`): a new subcommand is one
// row there, and --help, `help NAME`, the unknown-command message and the bash completion's test
// (tests/unit/test_command_line.cpp) all read the table.
struct subcommand {
  std::string_view name;
  std::string_view synopsis;  // its arguments, for --help: "[--json] [--boots=N]"
  std::string_view summary;   // one line for --help's Commands section
  // The arguments after the name; throws usage_error. Answers --help with its usage
  // (`shutdown-shim help NAME` runs NAME --help).
  command_outcome (*run)(std::span<const std::string_view> args);
};

// Whether the first argument is a bare word, which names a subcommand (or mistypes one), rather
// than a flag of the daemon's: a letter, then letters, digits, '-', '_' or '.'. Anything else
// ("/usr/bin/kube-apiserver", "-", "") is left to parse_flags(), which says to put a command to
// wrap after --.
bool is_command_word(std::string_view arg);

// The row named word, else the one it most likely mistypes: at most kMaxTypoEdits edits away
// (insertions, deletions, substitutions, swaps of two neighbours; case ignored) and fewer than
// half its name's letters changed; the first in the table of those nearest. nullptr if none.
inline constexpr std::size_t kMaxTypoEdits = 2;
const subcommand* nearest_subcommand(std::string_view word, std::span<const subcommand> commands);

// The row named word; else throws usage_error naming the nearest one, or listing them all, and
// saying that a command to wrap goes after --.
const subcommand& subcommand_named(std::string_view word, std::span<const subcommand> commands);

// --help's "Commands:" section, one row a line (two when the name and synopsis are long).
std::string commands_help(std::span<const subcommand> commands);

// --help: the daemon's flags, and the subcommands of main()'s table.
std::string usage_text(std::span<const subcommand> commands);

}  // namespace shim
