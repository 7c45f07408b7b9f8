#include "cli/subcommand.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "config/config.hpp"
#include "config/flag_readers.hpp"
#include "config/flag_spec.hpp"
#include "config/usage_error.hpp"
#include "util/joined.hpp"

namespace shim {
namespace {

std::string_view command_name(const subcommand& command) { return command.name; }

bool ascii_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

char folded(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

// The optimal string alignment distance (Levenshtein's edits, and a swap of two neighbours as
// one: "reprot" is one edit from "report", as a typist sees it), ignoring ASCII case.
std::size_t typo_distance(std::string_view a, std::string_view b) {
  const std::size_t width = b.size() + 1;
  std::vector<std::size_t> d((a.size() + 1) * width);
  const auto at = [&](std::size_t i, std::size_t j) -> std::size_t& { return d[i * width + j]; };
  for (std::size_t i = 0; i <= a.size(); ++i) at(i, 0) = i;
  for (std::size_t j = 0; j <= b.size(); ++j) at(0, j) = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = folded(a[i - 1]) == folded(b[j - 1]) ? 0 : 1;
      at(i, j) = std::min({at(i - 1, j) + 1, at(i, j - 1) + 1, at(i - 1, j - 1) + cost});
      if (i > 1 && j > 1 && folded(a[i - 1]) == folded(b[j - 2]) &&
          folded(a[i - 2]) == folded(b[j - 1])) {
        at(i, j) = std::min(at(i, j), at(i - 2, j - 2) + 1);
      }
    }
  }
  return at(a.size(), b.size());
}

}  // namespace

bool is_command_word(std::string_view arg) {
  return !arg.empty() && ascii_letter(arg.front()) &&
         std::all_of(arg.begin(), arg.end(), [](char c) {
           return ascii_letter(c) || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
         });
}

const subcommand* nearest_subcommand(std::string_view word, std::span<const subcommand> commands) {
  const subcommand* nearest = nullptr;
  std::size_t best = kMaxTypoEdits + 1;
  for (const auto& command : commands) {
    const std::size_t distance = typo_distance(word, command.name);
    if (distance < best && 2 * distance < command.name.size()) {
      nearest = &command;
      best = distance;
    }
  }
  return nearest;
}

const subcommand& subcommand_named(std::string_view word, std::span<const subcommand> commands) {
  for (const auto& command : commands) {
    if (command.name == word) return command;
  }
  constexpr std::string_view kWrap = "a command to wrap goes after --";
  if (const auto* nearest = nearest_subcommand(word, commands)) {
    throw usage_error(fmt::format("unknown command {}; did you mean {}? ({})", quoted(word),
                                  quoted(nearest->name), kWrap));
  }
  throw usage_error(fmt::format("unknown command {}; the commands are {} ({})", quoted(word),
                                joined(commands, ", ", command_name), kWrap));
}

std::string commands_help(std::span<const subcommand> commands) {
  std::string out = "Commands:\n";
  for (const auto& command : commands) {
    std::string head = fmt::format("  {}", command.name);
    if (!command.synopsis.empty()) head += fmt::format(" {}", command.synopsis);
    out += help_row(head, command.summary, daemon_flags().help_column);
  }
  return out;
}

std::string usage_text(std::span<const subcommand> commands) {
  return fmt::format(
      "Usage: shutdown-shim [FLAGS] [-- COMMAND [ARG...]]\n"
      "  or:  shutdown-shim {} [ARG...]\n"
      "\n"
      "Holds node shutdown with a systemd-logind delay inhibitor, reports not-ready, then signals\n"
      "the target. Find the target with one --target-* flag, or run it as a child after --.\n"
      "\n"
      "{}"
      "\n"
      "{}",
      joined(commands, "|", command_name), commands_help(commands), daemon_flags_help());
}

}  // namespace shim
