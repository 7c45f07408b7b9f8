#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "log/event_kind.hpp"
#include "log/log_level.hpp"
#include "log/log_line.hpp"
#include "log_test_support.hpp"

namespace shim {
namespace {

using namespace std::chrono_literals;
using test::is_timestamp;
using test::json_reader;

// --- json_escape ---------------------------------------------------------------------------------

TEST(JsonEscape, EscapesWhatJsonRequires) {
  EXPECT_EQ(json_escape(""), "");
  EXPECT_EQ(json_escape("plain text"), "plain text");
  EXPECT_EQ(json_escape(R"(say "hi")"), R"(say \"hi\")");
  EXPECT_EQ(json_escape(R"(C:\dir)"), R"(C:\\dir)");
  EXPECT_EQ(json_escape("a\nb\tc\rd\be\ff"), R"(a\nb\tc\rd\be\ff)");
  EXPECT_EQ(json_escape(std::string_view("\x00\x01\x1f", 3)), R"(\u0000\u0001\u001f)");
  EXPECT_EQ(json_escape("/ \x7f"), "/ \x7f");  // JSON needs neither escaped
}

TEST(JsonEscape, PassesUtf8Through) {
  EXPECT_EQ(json_escape("\xc2\xb5s"), "\xc2\xb5s");                                // µs
  EXPECT_EQ(json_escape("\xe6\x97\xa5\xe6\x9c\xac"), "\xe6\x97\xa5\xe6\x9c\xac");  // 日本
  EXPECT_EQ(json_escape("\xf0\x9f\x98\x80!"), "\xf0\x9f\x98\x80!");                // U+1F600
  EXPECT_EQ(json_escape("\xef\xbf\xbf"), "\xef\xbf\xbf");                          // U+FFFF
  EXPECT_EQ(json_escape("\xf4\x8f\xbf\xbf"), "\xf4\x8f\xbf\xbf");                  // U+10FFFF
}

TEST(JsonEscape, ReplacesBytesThatAreNotUtf8) {
  EXPECT_EQ(json_escape("a\xff"
                        "b"),
            R"(a\ufffdb)");
  EXPECT_EQ(json_escape("\x80"), R"(\ufffd)");                                // stray continuation
  EXPECT_EQ(json_escape("\xc3"), R"(\ufffd)");                                // truncated
  EXPECT_EQ(json_escape("\xc3("), R"(\ufffd()");                              // bad continuation
  EXPECT_EQ(json_escape("\xc0\xaf"), R"(\ufffd\ufffd)");                      // overlong '/'
  EXPECT_EQ(json_escape("\xe0\x80\xaf"), R"(\ufffd\ufffd\ufffd)");            // overlong
  EXPECT_EQ(json_escape("\xed\xa0\x80"), R"(\ufffd\ufffd\ufffd)");            // surrogate
  EXPECT_EQ(json_escape("\xf4\x90\x80\x80"), R"(\ufffd\ufffd\ufffd\ufffd)");  // > U+10FFFF
  EXPECT_EQ(json_escape("\xe6\x97"), R"(\ufffd\ufffd)");  // truncated at the end
  // Whatever the input, the result reads back as a JSON string.
  std::string all;
  for (int c = 0; c < 256; ++c) all += static_cast<char>(c);
  const std::string line = R"({"k":")" + json_escape(all) + R"("})";
  EXPECT_TRUE(json_reader(line).object().has_value());
}

// --- the text format's escapes -------------------------------------------------------------------

TEST(EscapeControls, EscapesControlsAndNothingElse) {
  EXPECT_EQ(escape_controls("plain \"quoted\" a=b \xff"), "plain \"quoted\" a=b \xff");
  EXPECT_EQ(escape_controls("a\nb\tc\rd"), R"(a\nb\tc\rd)");
  EXPECT_EQ(escape_controls(std::string_view("\x00\x1b\x7f", 3)), R"(\u0000\u001b\u007f)");
}

TEST(AppendTextValue, BareOnlyWhenUnambiguous) {
  auto value = [](std::string_view v) {
    std::string out;
    append_text_value(out, v);
    return out;
  };
  EXPECT_EQ(value("/run/x.pid"), "/run/x.pid");
  EXPECT_EQ(value(""), "\"\"");
  EXPECT_EQ(value("a b"), "\"a b\"");
  EXPECT_EQ(value("a=b"), "\"a=b\"");
  EXPECT_EQ(value("say \"hi\""), R"("say \"hi\"")");
  EXPECT_EQ(value("a\nb"), R"("a\nb")");
  EXPECT_EQ(value("\x7f"), "\"\x7f\"");  // quoted, and JSON leaves DEL as it is
}

// --- tables --------------------------------------------------------------------------------------

TEST(EventKind, Names) {
  EXPECT_EQ(to_string(event_kind::Started), "Started");
  EXPECT_EQ(to_string(event_kind::InhibitorTaken), "InhibitorTaken");
  EXPECT_EQ(to_string(event_kind::ShutdownInitiated), "ShutdownInitiated");
  EXPECT_EQ(to_string(event_kind::SignalForwarded), "SignalForwarded");
  EXPECT_EQ(to_string(event_kind::TargetExited), "TargetExited");
  EXPECT_EQ(to_string(event_kind::DrainElapsed), "DrainElapsed");
  EXPECT_EQ(to_string(event_kind::InhibitorReleased), "InhibitorReleased");
  EXPECT_EQ(to_string(event_kind::ShutdownCancelled), "ShutdownCancelled");
  EXPECT_EQ(to_string(event_kind::BusLost), "BusLost");
  EXPECT_EQ(to_string(event_kind::BusRestored), "BusRestored");
  EXPECT_EQ(to_string(event_kind::InhibitDelayEnsured), "InhibitDelayEnsured");
}

TEST(LogLevel, Names) {
  EXPECT_EQ(name_of(log_level::error).upper, "ERROR");
  EXPECT_EQ(name_of(log_level::warning).upper, "WARNING");
  EXPECT_EQ(name_of(log_level::notice).upper, "NOTICE");
  EXPECT_EQ(name_of(log_level::info).upper, "INFO");
  EXPECT_EQ(name_of(log_level::debug).upper, "DEBUG");
  EXPECT_EQ(name_of(log_level::error).lower, "error");
  EXPECT_EQ(name_of(log_level::warning).lower, "warning");
  EXPECT_EQ(name_of(log_level::notice).lower, "notice");
  EXPECT_EQ(name_of(log_level::info).lower, "info");
  EXPECT_EQ(name_of(log_level::debug).lower, "debug");
}

TEST(FormatWallTime, Rfc3339UtcWithMicroseconds) {
  using namespace std::chrono;
  const sys_days day = year{2026} / November / 29;
  EXPECT_EQ(format_wall_time(day + 16h + 36min + 7s + 123456us), "2026-11-29T16:36:07.123456Z");
  EXPECT_EQ(format_wall_time(day + 16h + 36min + 7s + 123456789ns), "2026-11-29T16:36:07.123456Z");
  EXPECT_EQ(format_wall_time(system_clock::time_point{}), "1970-01-01T00:00:00.000000Z");
  EXPECT_EQ(format_wall_time(system_clock::time_point{} - 1us), "1969-12-31T23:59:59.999999Z");
  EXPECT_TRUE(is_timestamp(format_wall_time(system_clock::now())));
  EXPECT_FALSE(is_timestamp("2026-11-29T16:36:07.12345Z"));
}

// --- format_log_line -----------------------------------------------------------------------------

TEST(FormatLogLine, TextAtAGivenTime) {
  using namespace std::chrono;
  const auto at = sys_days{year{2026} / November / 29} + 16h + 36min + 7s + 5us;
  EXPECT_EQ(format_log_line(log_format::text, false, log_level::notice, "m", {{"k", "v"}}, at),
            "2026-11-29T16:36:07.000005Z NOTICE m k=v\n");
  EXPECT_EQ(format_log_line(log_format::json, false, log_level::notice, "m", {{"k", "v"}}, at),
            R"({"time":"2026-11-29T16:36:07.000005Z","level":"notice","msg":"m","k":"v"})"
            "\n");
}

TEST(FormatLogLine, AlwaysOneLine) {
  const auto now = std::chrono::system_clock::now();
  for (const auto format : {log_format::text, log_format::json}) {
    for (const bool journal : {false, true}) {
      const std::string line =
          format_log_line(format, journal, log_level::info, "a\nb\r", {{"k\ney", "v\na\x0b"}}, now);
      ASSERT_EQ(line.back(), '\n');
      EXPECT_EQ(line.find('\n'), line.size() - 1) << line;
      EXPECT_EQ(line.find('\r'), std::string::npos) << line;
      EXPECT_EQ(line.find('\x0b'), std::string::npos) << line;
    }
  }
}

// --- one_line ------------------------------------------------------------------------------------

TEST(OneLine, JoinsLinesAndWhitespaceIntoSingleSpaces) {
  EXPECT_EQ(one_line("", 80), "");
  EXPECT_EQ(one_line("plain", 80), "plain");
  // A D-Bus error as sd-bus hands it over, several lines with indentation.
  EXPECT_EQ(one_line("Connection terminated\n  at step 2:\r\n\tno reply\n", 80),
            "Connection terminated at step 2: no reply");
  EXPECT_EQ(one_line("  \n lead and trail \t\n", 80), "lead and trail");
  EXPECT_EQ(one_line(std::string_view("a\x00\x01\x7f"
                                      "b",
                                      5),
                     80),
            "a b");
}

TEST(OneLine, CapsTheLengthWithAnEllipsis) {
  EXPECT_EQ(one_line("0123456789", 10), "0123456789");
  EXPECT_EQ(one_line("0123456789A", 10), "0123456...");
  EXPECT_EQ(one_line(std::string(100'000, 'x'), 64).size(), 64u);
  // No space left before the ellipsis.
  EXPECT_EQ(one_line("abcdef ghij", 10), "abcdef...");
  // Too short for an ellipsis: cut only.
  EXPECT_EQ(one_line("abcdef", 2), "ab");
  EXPECT_EQ(one_line("abcdef", 0), "");
}

TEST(OneLine, NeverCutsACharacterInHalf) {
  // "é" is two bytes: cutting after 7 bytes would leave half of the fourth one.
  const std::string text = "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9";
  EXPECT_EQ(one_line(text, 10), "\xc3\xa9\xc3\xa9\xc3\xa9...");
  EXPECT_EQ(json_escape(one_line(text, 10)).find("\\ufffd"), std::string::npos);
  // Bytes that are not UTF-8 stay as they are (found by the event_log fuzz target, whose check
  // was too strict: 0xFF looks like a lead byte and is none).
  EXPECT_EQ(one_line("ab\xff\xff\xff", 4), "a...");
  EXPECT_EQ(one_line("a\xff", 4), "a\xff");
}

}  // namespace
}  // namespace shim
