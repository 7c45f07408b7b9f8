// The flag tables' machinery, shared by the daemon's flags and the commands': how a table reads a
// command line, its usage errors in both wordings, and the --help rows it makes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "config/flag_table.hpp"

namespace shim {
namespace {

using testing::ElementsAre;

struct options {
  std::vector<std::string> seen;  // "name=value", in the order set
  bool help = false;
};

void record(options& o, std::string_view name, std::string_view value) {
  o.seen.push_back(std::string(name) + "=" + std::string(value));
}

flag_table<options> table(std::string_view command) {
  return {
      .command = command,
      .help_column = 16,
      .flags = {
          {.spec = {.name = "--count", .value_name = "N", .help = "how many", .default_value = "3"},
           .set = record},
          {.spec = {.name = "--mode",
                    .value_name = "a|b",
                    .help = "which mode;\nsaid on two lines",
                    .implied_value = "a"},
           .set = record},
          {.spec = {.name = "--tag", .value_name = "T", .help = "a tag", .repeatable = true},
           .set = record},
          {.spec = {.name = "--quiet", .help = "say less"}, .set = record},
          {.spec =
               {.name = "--help", .help = "show this help", .alias = "-h", .ends_parsing = true},
           .set = [](options& o, std::string_view, std::string_view) { o.help = true; }},
      }};
}

struct parsed {
  options values;
  flags_read read;
};

parsed parse(std::string_view command, std::vector<std::string_view> args) {
  parsed p;
  p.read = parse_flag_table(table(command), args, p.values);
  return p;
}

std::string error_of(std::string_view command, std::vector<std::string_view> args) {
  try {
    parse(command, args);
  } catch (const usage_error& e) {
    return e.what();
  }
  return "(none)";
}

TEST(FlagTable, ValuesFromEitherSpelling) {
  const auto p = parse("", {"--count=1", "--tag", "x", "--tag=y", "--quiet", "--mode"});
  EXPECT_THAT(p.values.seen,
              ElementsAre("--count=1", "--tag=x", "--tag=y", "--quiet=", "--mode=a"));
  EXPECT_THAT(p.read.given, ElementsAre("--count", "--mode", "--quiet", "--tag"));
  EXPECT_FALSE(p.read.after_dashes);
  // An optional value comes only after '='.
  EXPECT_THAT(parse("", {"--mode=b"}).values.seen, ElementsAre("--mode=b"));
  EXPECT_EQ(error_of("", {"--mode", "b"}), "unexpected argument \"b\"; put the command after --");
}

TEST(FlagTable, HelpEndsTheParsingButNotWhatCameBefore) {
  EXPECT_TRUE(parse("cmd", {"--count=1", "-h", "--bogus"}).values.help);
  EXPECT_EQ(error_of("cmd", {"--bogus", "--help"}), "cmd: unknown argument \"--bogus\"");
}

TEST(FlagTable, TheDaemonsWording) {
  EXPECT_EQ(error_of("", {"--bogus=1"}), "unknown flag --bogus");
  EXPECT_EQ(error_of("", {"--bo\ngus"}), "unknown flag \"--bo\\ngus\"");
  EXPECT_EQ(error_of("", {"--quiet=1"}), "--quiet takes no value");
  EXPECT_EQ(error_of("", {"--count"}), "--count: missing value (want --count=N)");
  EXPECT_EQ(error_of("", {"--count", "--quiet"}), "--count: missing value (want --count=N)");
  EXPECT_EQ(error_of("", {"--count=1", "--count=2"}), "--count: given more than once");
  EXPECT_EQ(error_of("", {"stray"}), "unexpected argument \"stray\"; put the command after --");
  // The rest is the daemon's command to wrap: a view into args.
  const std::vector<std::string_view> args{"--quiet", "--", "prog", "--count"};
  options values;
  const auto read = parse_flag_table(table(""), args, values);
  ASSERT_TRUE(read.after_dashes);
  EXPECT_THAT(*read.after_dashes, ElementsAre("prog", "--count"));
}

TEST(FlagTable, ACommandsWording) {
  EXPECT_EQ(error_of("cmd", {"--bogus=1"}), "cmd: unknown argument \"--bogus=1\"");
  EXPECT_EQ(error_of("cmd", {"--quiet=1"}), "cmd: unknown argument \"--quiet=1\"");
  EXPECT_EQ(error_of("cmd", {"--count"}), "--count: missing value");
  EXPECT_EQ(error_of("cmd", {"--quiet", "--quiet"}), "--quiet: given more than once");
  EXPECT_EQ(error_of("cmd", {"stray"}), "cmd: unknown argument \"stray\"");
  EXPECT_EQ(error_of("cmd", {"--", "prog"}), "cmd: unknown argument \"--\"");
}

TEST(FlagTable, HelpRowsFromTheTable) {
  EXPECT_EQ(flags_help(table("cmd")),
            "  --count=N     how many (default 3)\n"
            "  --mode[=a|b]  which mode;\n"
            "                said on two lines\n"
            "  --tag=T       a tag\n"
            "  --quiet       say less\n"
            "  -h, --help    show this help\n");
}

TEST(HelpColumns, LongHeadsAndDefaultsTakeALineOfTheirOwn) {
  EXPECT_EQ(help_row("  --a-long-flag=VALUE", "what it does", 8),
            "  --a-long-flag=VALUE\n        what it does\n");
  EXPECT_EQ(help_tail("short", 31, "(default 1)"), " (default 1)");
  const std::string long_line(kHelpWidth - 31 - 5, 'x');
  EXPECT_EQ(help_tail("first\n" + long_line, 31, "(default 1)"), "\n(default 1)");
}

}  // namespace
}  // namespace shim
