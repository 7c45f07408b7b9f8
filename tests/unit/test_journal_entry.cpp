// The journal entry of a lifecycle event: its field names and values, the native protocol's
// datagram, the MESSAGE_ID table, a send that never waits, and the record read back from the
// fields, which must be the event log's record.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "log/event_recorder.hpp"
#include "log/journal_entry.hpp"
#include "log/journal_socket.hpp"
#include "log_test_support.hpp"
#include "report/journal_reader.hpp"
#include "util/unique_fd.hpp"

namespace shim {
namespace {

using test::captured_output;
using test::split_lines;
using test::temp_dir;
using testing::Contains;
using testing::ElementsAre;
using testing::Not;

TEST(JournalEntry, FieldNamesAreUpperCaseUnderTheShimsPrefix) {
  EXPECT_EQ(journal_field_name("inhibit_delay_max_usec"), "SHUTDOWN_SHIM_INHIBIT_DELAY_MAX_USEC");
  EXPECT_EQ(journal_field_name("field_pid"), "SHUTDOWN_SHIM_FIELD_PID");
  // journald drops a field whose name has anything but [A-Z0-9_].
  EXPECT_EQ(journal_field_name("a-b.c d\xc3\xa9"), "SHUTDOWN_SHIM_A_B_C_D__");
  EXPECT_EQ(journal_field_name(std::string(80, 'x')).size(), 64u);
}

TEST(JournalEntry, EveryMessageIdIsWellFormedAndItsOwn) {
  std::set<std::string_view> seen;
  for (const event_info& e : kEvents) {
    EXPECT_TRUE(is_message_id(e.message_id)) << e.name;
    EXPECT_TRUE(seen.insert(e.message_id).second) << e.name << " shares its id";
  }
  EXPECT_FALSE(is_message_id("D39434BB22BC4A5B94099CB7C85CD06B"));  // one spelling only
  EXPECT_FALSE(is_message_id("d39434bb-22bc-4a5b-9409-9cb7c85cd06b"));
  EXPECT_FALSE(is_message_id("d39434bb22bc4a5b94099cb7c85cd06"));
  EXPECT_EQ(message_id_of(event_kind::ShutdownInitiated), "d7b27f19a1164069902fd88173d016be");
}

TEST(JournalEntry, FieldsOfAnEvent) {
  const log_fields extra{{"inhibit_delay_max_usec", "150000000"}, {"pid", "42"}};
  const auto fields = journal_fields({.kind = event_kind::ShutdownInitiated,
                                      .cause = "PrepareForShutdown(true)",
                                      .message = "draining",
                                      .line = "draining event=ShutdownInitiated",
                                      .fields = extra,
                                      .wall = "2026-11-29T16:36:07.123456Z",
                                      .monotonic_us = 5,
                                      .boottime_us = 7});
  EXPECT_THAT(
      fields,
      ElementsAre(
          "MESSAGE=draining event=ShutdownInitiated", "MESSAGE_ID=d7b27f19a1164069902fd88173d016be",
          "PRIORITY=5", std::string("SYSLOG_IDENTIFIER=") + program_invocation_short_name,
          "SHUTDOWN_SHIM_EVENT=ShutdownInitiated", "SHUTDOWN_SHIM_CAUSE=PrepareForShutdown(true)",
          "SHUTDOWN_SHIM_MESSAGE=draining", "SHUTDOWN_SHIM_WALL=2026-11-29T16:36:07.123456Z",
          "SHUTDOWN_SHIM_MONOTONIC_US=5", "SHUTDOWN_SHIM_BOOTTIME_US=7",
          "SHUTDOWN_SHIM_INHIBIT_DELAY_MAX_USEC=150000000", "SHUTDOWN_SHIM_FIELD_PID=42"));
}

TEST(JournalEntry, NoCauseFieldWithoutACause) {
  const auto fields = journal_fields({.kind = event_kind::BusLost,
                                      .cause = "",
                                      .message = "m",
                                      .line = "m",
                                      .fields = {},
                                      .wall = "w",
                                      .monotonic_us = 1,
                                      .boottime_us = 1});
  EXPECT_THAT(fields, Contains("PRIORITY=4"));
  for (const auto& f : fields) EXPECT_FALSE(f.starts_with("SHUTDOWN_SHIM_CAUSE=")) << f;
}

TEST(JournalEntry, DatagramHasTheBinaryFormOnlyForALineBreak) {
  const std::string datagram = native_datagram({"A=one", "B=two\nlines"});
  EXPECT_EQ(datagram, std::string("A=one\nB\n\x09\0\0\0\0\0\0\0two\nlines\n", 26));
}

// The same event as the event log's line and as the journal's fields gives the same record.
TEST(JournalEntry, ReadBackItIsTheEventLogsRecord) {
  const log_fields extra{{"inhibit_delay_max_usec", "150000000"}};
  const auto fields = journal_fields({.kind = event_kind::ShutdownInitiated,
                                      .cause = "PrepareForShutdown(true)",
                                      .message = "two\nlines",
                                      .line = "ignored",
                                      .fields = extra,
                                      .wall = "2026-11-29T16:36:07.123456Z",
                                      .monotonic_us = 5,
                                      .boottime_us = 7});
  event_record from_journal;
  for (const auto& f : fields) set_journal_member(from_journal, f);
  set_journal_member(from_journal, "_BOOT_ID=0123456789abcdef0123456789abcdef");
  set_journal_member(from_journal, "_PID=99");
  const auto from_log = parse_event_record(
      R"x({"event":"ShutdownInitiated","wall":"2026-11-29T16:36:07.123456Z","monotonic_us":5,)x"
      R"x("boottime_us":7,"boot_id":"0123456789abcdef0123456789abcdef","pid":99,)x"
      R"x("cause":"PrepareForShutdown(true)","message":"two\nlines",)x"
      R"x("inhibit_delay_max_usec":"150000000"})x");
  ASSERT_TRUE(from_log);
  EXPECT_EQ(from_journal.event, from_log->event);
  EXPECT_EQ(from_journal.wall, from_log->wall);
  EXPECT_EQ(from_journal.monotonic_us, from_log->monotonic_us);
  EXPECT_EQ(from_journal.boottime_us, from_log->boottime_us);
  EXPECT_EQ(from_journal.boot_id, from_log->boot_id);
  EXPECT_EQ(from_journal.pid, from_log->pid);
  EXPECT_EQ(from_journal.cause, from_log->cause);
  EXPECT_EQ(from_journal.message, from_log->message);
  EXPECT_EQ(from_journal.inhibit_delay_max_usec, from_log->inhibit_delay_max_usec);
}

// A datagram socket standing in for journald's, which nobody reads.
class JournalSocket : public ::testing::Test {
 protected:
  temp_dir dir;
  const std::string path = dir.path() + "/socket";
  unique_fd journald{::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)};

  void SetUp() override {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
    ASSERT_EQ(::bind(journald.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  }

  std::string receive() {
    std::string buffer(65536, '\0');
    const ssize_t n = ::recv(journald.get(), buffer.data(), buffer.size(), MSG_DONTWAIT);
    buffer.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
    return buffer;
  }
};

TEST_F(JournalSocket, SendsOneDatagram) {
  journal_socket s(path);
  EXPECT_EQ(s.send({"MESSAGE=hi", "PRIORITY=6"}), 0);
  EXPECT_EQ(receive(), "MESSAGE=hi\nPRIORITY=6\n");
}

// A journald that does not read: the queue fills (net.unix.max_dgram_qlen) and a send fails at
// once with EAGAIN; a blocking send would hang here until the test's timeout.
TEST_F(JournalSocket, AFullQueueFailsAtOnce) {
  journal_socket s(path);
  int error = 0;
  int sent = 0;
  for (; sent < 100000 && error == 0; ++sent) error = s.send({"MESSAGE=filler"});
  EXPECT_EQ(error, EAGAIN) << "after " << sent << " datagrams";
}

TEST_F(JournalSocket, NoJournaldIsAnError) {
  journal_socket s(dir.path() + "/absent");
  EXPECT_EQ(s.send({"MESSAGE=hi"}), ENOENT);
}

TEST_F(JournalSocket, RecorderSendsTheEventAndNoLine) {
  captured_output out;
  logger log{log_format::text, out.fd(), true};
  event_recorder events(log, "", path);
  events.record(event_kind::SignalForwarded, "c", "m", {{"signal", "SIGTERM"}});
  const std::string datagram = receive();
  EXPECT_NE(datagram.find("MESSAGE=m event=SignalForwarded cause=c signal=SIGTERM\n"),
            std::string::npos);
  EXPECT_NE(datagram.find("SHUTDOWN_SHIM_SIGNAL=SIGTERM\n"), std::string::npos);
  EXPECT_EQ(out.text(), "");
}

// What journald cannot take at once goes to stderr, as without a journal.
TEST_F(JournalSocket, RecorderFallsBackToTheLineWhenTheQueueIsFull) {
  journal_socket filler(path);
  while (filler.send({"MESSAGE=filler"}) == 0) {
  }
  captured_output out;
  logger log{log_format::text, out.fd(), true};
  event_recorder events(log, "", path);
  events.record(event_kind::BusLost, "c", "m");
  EXPECT_THAT(split_lines(out.text()), ElementsAre("<4>m event=BusLost cause=c"));
}

}  // namespace
}  // namespace shim
