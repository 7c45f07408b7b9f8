#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "event_log_builder.hpp"
#include "report/event_line_reader.hpp"

namespace shim {
namespace {

using test::event_log_builder;

struct collected {
  std::vector<event_record> records;
  std::uint64_t skipped = 0;
};

// Feeds text cut into pieces of `chunk` bytes.
collected read_in_chunks(const std::string& text, std::size_t chunk) {
  collected out;
  event_line_reader reader({.record = [&](const event_record& r) { out.records.push_back(r); }});
  for (std::size_t i = 0; i < text.size(); i += chunk) {
    reader.feed(std::string_view(text).substr(i, chunk));
  }
  reader.finish();
  out.skipped = reader.skipped_lines();
  return out;
}

TEST(EventLineReader, TakesTheKeysItNeedsFromARecord) {
  const auto r = parse_event_record(
      R"({"event":"ShutdownInitiated","wall":"2026-11-29T16:36:07.123456Z","monotonic_us":123,)"
      R"("boottime_us":456,"boot_id":"7476cf30dbe24e679ebb3140ce086a55","pid":77,)"
      R"j("cause":"PrepareForShutdown(true)","message":"m","inhibit_delay_max_usec":"90000000",)j"
      R"("unknown":"ignored"})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->event, "ShutdownInitiated");
  EXPECT_EQ(r->wall, "2026-11-29T16:36:07.123456Z");
  EXPECT_EQ(r->monotonic_us, 123);
  EXPECT_EQ(r->boottime_us, 456);
  EXPECT_EQ(r->boot_id, "7476cf30dbe24e679ebb3140ce086a55");
  EXPECT_EQ(r->pid, 77);
  EXPECT_EQ(r->cause, "PrepareForShutdown(true)");
  EXPECT_EQ(r->inhibit_delay_max_usec, 90'000'000u);
}

TEST(EventLineReader, RefusesWhatIsNotARecord) {
  EXPECT_FALSE(parse_event_record(""));
  EXPECT_FALSE(parse_event_record("{}"));
  EXPECT_FALSE(parse_event_record(R"({"event":"Started")"));
  EXPECT_FALSE(parse_event_record(R"({"event":"Started"} trailing)"));
  EXPECT_FALSE(parse_event_record(R"(["event"])"));
  // A clock that is not a number is left out, not guessed.
  const auto r = parse_event_record(R"({"event":"Started","monotonic_us":"12x"})");
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->monotonic_us);
}

TEST(EventLineReader, TheSameRecordsHoweverTheBytesAreCut) {
  event_log_builder log;
  log.start(1).clean_shutdown(100);
  const auto whole = read_in_chunks(log.text(), log.text().size());
  ASSERT_EQ(whole.records.size(), 7u);
  for (std::size_t chunk : {1u, 2u, 7u, 64u, 333u}) {
    const auto cut = read_in_chunks(log.text(), chunk);
    ASSERT_EQ(cut.records.size(), whole.records.size()) << "chunk " << chunk;
    for (std::size_t i = 0; i < cut.records.size(); ++i) {
      EXPECT_EQ(cut.records[i].event, whole.records[i].event);
      EXPECT_EQ(cut.records[i].monotonic_us, whole.records[i].monotonic_us);
    }
    EXPECT_EQ(cut.skipped, 0u);
  }
}

TEST(EventLineReader, ALastRecordWithoutItsNewlineCounts) {
  const auto c = read_in_chunks(R"({"event":"Started","pid":1})", 5);
  ASSERT_EQ(c.records.size(), 1u);
  EXPECT_EQ(c.skipped, 0u);
}

TEST(EventLineReader, AnOverlongLineIsSkippedAndTheNextOneRead) {
  std::string text = R"({"event":"Started","message":")" +
                     std::string(event_line_reader::kMaxLine, 'x') + "\"}\n" +
                     R"({"event":"InhibitorTaken"})" + "\n";
  for (std::size_t chunk : {4096u, 100'000u}) {
    const auto c = read_in_chunks(text, chunk);
    ASSERT_EQ(c.records.size(), 1u) << "chunk " << chunk;
    EXPECT_EQ(c.records[0].event, "InhibitorTaken");
    EXPECT_EQ(c.skipped, 1u);
  }
}

TEST(EventLineReader, EmptyLinesAreNotCounted) {
  const auto c = read_in_chunks("\n\n{\"event\":\"Started\"}\n\n", 3);
  EXPECT_EQ(c.records.size(), 1u);
  EXPECT_EQ(c.skipped, 0u);
}

}  // namespace
}  // namespace shim
