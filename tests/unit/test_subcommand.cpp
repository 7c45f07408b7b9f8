// The subcommands' table as main() reads it: which first arguments are subcommands, the nearest
// name to a mistyped one, the messages, and --help's Commands section.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <sstream>
#include <string>
#include <string_view>

#include "cli/subcommand.hpp"
#include "config/usage_error.hpp"

namespace shim {
namespace {

using testing::HasSubstr;

command_outcome no_run(std::span<const std::string_view>) { return command_outcome::ok; }

// The table main() has, and the two the lead adds next (issue 23): names close to each other.
constexpr std::array<subcommand, 4> kTable{{
    {.name = "report", .synopsis = "[--json]", .summary = "what the shutdowns did", .run = no_run},
    {.name = "status",
     .synopsis = "[--json] [--state-dir=PATH]",
     .summary = "what the daemon is doing",
     .run = no_run},
    {.name = "drill", .synopsis = "[--duration=D]", .summary = "rehearse a drain", .run = no_run},
    {.name = "help", .synopsis = "[COMMAND]", .summary = "this help", .run = no_run},
}};

std::string_view nearest(std::string_view word) {
  const auto* found = nearest_subcommand(word, kTable);
  return found == nullptr ? "(none)" : found->name;
}

std::string message(std::string_view word, std::span<const subcommand> table = kTable) {
  try {
    const auto& found = subcommand_named(word, table);
    ADD_FAILURE() << word << " names " << found.name;
  } catch (const usage_error& e) {
    return e.what();
  }
  return {};
}

TEST(IsCommandWord, BareWordsOnly) {
  for (const auto word : {"report", "reprot", "sleep", "kube-apiserver", "Report", "a", "x_y.z9"}) {
    EXPECT_TRUE(is_command_word(word)) << word;
  }
  // Flags, paths and what is not a word stay the daemon's (parse_flags' messages).
  for (const auto word : {"", "-", "--", "--help", "-h", "/usr/bin/kube-apiserver", "./run", "10",
                          "a b", "a\n", "rép", "=x", "report=1"}) {
    EXPECT_FALSE(is_command_word(word)) << word;
  }
}

TEST(NearestSubcommand, OneTypoAway) {
  EXPECT_EQ(nearest("report"), "report");
  EXPECT_EQ(nearest("reprot"), "report");  // two neighbours swapped: one edit
  EXPECT_EQ(nearest("repotr"), "report");
  EXPECT_EQ(nearest("repor"), "report");
  EXPECT_EQ(nearest("reports"), "report");
  EXPECT_EQ(nearest("raport"), "report");
  EXPECT_EQ(nearest("REPORT"), "report");  // case ignored
  EXPECT_EQ(nearest("stauts"), "status");
  EXPECT_EQ(nearest("state"), "status");   // two edits
  EXPECT_EQ(nearest("reboot"), "report");  // two edits too: a hint, never acted on
  EXPECT_EQ(nearest("dril"), "drill");
  EXPECT_EQ(nearest("drills"), "drill");
  EXPECT_EQ(nearest("hlep"), "help");
}

TEST(NearestSubcommand, NothingNearIsNone) {
  for (const auto word : {"sleep", "kube-apiserver", "x", "rep", "start", "stop", "rebooted", "he",
                          "reportreport", "etcd"}) {
    EXPECT_EQ(nearest(word), "(none)") << word;
  }
}

TEST(NearestSubcommand, TheNearestWinsThenTheFirst) {
  constexpr std::array<subcommand, 3> table{{
      {.name = "stats", .synopsis = "", .summary = "", .run = no_run},
      {.name = "status", .synopsis = "", .summary = "", .run = no_run},
      {.name = "statuses", .synopsis = "", .summary = "", .run = no_run},
  }};
  // "statu": one edit from both stats and status; stats comes first.
  EXPECT_EQ(nearest_subcommand("statu", table)->name, "stats");
  // "statuse": one from status, two from statuses, three from stats.
  EXPECT_EQ(nearest_subcommand("statuse", table)->name, "status");
  EXPECT_EQ(nearest_subcommand("statusess", table)->name, "statuses");
  EXPECT_EQ(nearest_subcommand("anything", std::span<const subcommand>{}), nullptr);
}

TEST(SubcommandNamed, FindsTheRow) {
  EXPECT_EQ(&subcommand_named("status", kTable), &kTable[1]);
  EXPECT_EQ(&subcommand_named("help", kTable), &kTable[3]);
}

TEST(SubcommandNamed, UnknownNamesTheNearestAndTheWrapper) {
  EXPECT_EQ(message("reprot"),
            "unknown command \"reprot\"; did you mean \"report\"? (a command to wrap goes after "
            "--)");
  EXPECT_EQ(message("Status"),
            "unknown command \"Status\"; did you mean \"status\"? (a command to wrap goes after "
            "--)");
  // Before issue 23 the shim said: unexpected argument "sleep"; put the command after --.
  EXPECT_EQ(message("sleep"),
            "unknown command \"sleep\"; the commands are report, status, drill, help (a command "
            "to wrap goes after --)");
  const std::array<subcommand, 1> one{kTable[0]};
  EXPECT_EQ(message("kube-apiserver", one),
            "unknown command \"kube-apiserver\"; the commands are report (a command to wrap goes "
            "after --)");
  // One line, whatever the word holds.
  EXPECT_EQ(message("rep\nort"),
            "unknown command \"rep\\nort\"; did you mean \"report\"? (a command to wrap goes "
            "after --)");
}

TEST(CommandsHelp, OneRowALine) {
  EXPECT_EQ(commands_help(kTable),
            "Commands:\n"
            "  report [--json]              what the shutdowns did\n"
            "  status [--json] [--state-dir=PATH]\n"
            "                               what the daemon is doing\n"
            "  drill [--duration=D]         rehearse a drain\n"
            "  help [COMMAND]               this help\n");
}

TEST(UsageText, ListsTheCommands) {
  const std::string text = usage_text(kTable);
  EXPECT_THAT(text, HasSubstr("Usage: shutdown-shim [FLAGS] [-- COMMAND [ARG...]]\n"
                              "  or:  shutdown-shim report|status|drill|help [ARG...]\n"));
  EXPECT_THAT(text, HasSubstr("\n\n" + commands_help(kTable) + "\nFlags:\n"));
}

}  // namespace
}  // namespace shim
