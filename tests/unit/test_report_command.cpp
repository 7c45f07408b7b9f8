// shutdown-shim report's command line: its flags, their usage errors and its usage text.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "cli/report_command.hpp"
#include "config/usage_error.hpp"

namespace shim {
namespace {

using testing::HasSubstr;

report_command_line parse(std::vector<std::string_view> args) { return parse_report_flags(args); }

std::string usage_error_of(std::vector<std::string_view> args) {
  try {
    parse_report_flags(args);
  } catch (const usage_error& e) {
    return e.what();
  }
  return "";
}

TEST(ReportFlags, Defaults) {
  const auto o = parse({});
  EXPECT_EQ(o.options.event_log, "/var/log/shutdown-shim/events.jsonl");
  EXPECT_EQ(o.options.boots, 10u);
  EXPECT_FALSE(o.options.json);
  EXPECT_FALSE(o.help);
  EXPECT_THAT(report_usage_text(), HasSubstr("/var/log/shutdown-shim/events.jsonl"));
}

TEST(ReportFlags, BothSpellingsOfAValue) {
  EXPECT_EQ(parse({"--event-log=/tmp/a"}).options.event_log, "/tmp/a");
  EXPECT_EQ(parse({"--event-log", "/tmp/b"}).options.event_log, "/tmp/b");
  EXPECT_EQ(parse({"--boots=3", "--json"}).options.boots, 3u);
  EXPECT_TRUE(parse({"--boots", "3", "--json"}).options.json);
  EXPECT_TRUE(parse({"--journal", "--journal-dir=/x"}).options.journal);
  EXPECT_FALSE(parse({}).options.journal);
  EXPECT_EQ(usage_error_of({"--journal", "--journal"}), "--journal: given more than once");
  EXPECT_EQ(parse({"--journal-dir=/srv/j"}).options.journal_dir, "/srv/j");
  EXPECT_TRUE(parse({"--json", "--help", "--nonsense"}).help);
}

TEST(ReportFlags, UsageErrorsNameTheFlagOnOneLine) {
  EXPECT_EQ(usage_error_of({"--boots=0"}), R"(--boots: "0" is not a number from 1 to 10000)");
  EXPECT_EQ(usage_error_of({"--boots=x"}), R"(--boots: "x" is not a number from 1 to 10000)");
  EXPECT_EQ(usage_error_of({"--boots=10001"}),
            R"(--boots: "10001" is not a number from 1 to 10000)");
  EXPECT_EQ(usage_error_of({"--boots"}), "--boots: missing value");
  EXPECT_EQ(usage_error_of({"--event-log", "--json"}), "--event-log: missing value");
  EXPECT_EQ(usage_error_of({"--event-log="}), "--event-log: empty path");
  EXPECT_EQ(usage_error_of({"--json=1"}), R"(report: unknown argument "--json=1")");
  EXPECT_EQ(usage_error_of({"--bogus\nflag"}), R"(report: unknown argument "--bogus\nflag")");
  EXPECT_EQ(usage_error_of({"--boots=1", "--boots=2"}), "--boots: given more than once");
}

}  // namespace
}  // namespace shim
