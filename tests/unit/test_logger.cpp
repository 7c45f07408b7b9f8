#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "log/logger.hpp"
#include "log_test_support.hpp"

namespace shim {
namespace {

using namespace std::chrono_literals;
using test::captured_output;
using test::get;
using test::is_stamped;
using test::is_timestamp;
using test::json_object;
using test::json_reader;
using test::keys;
using test::parse_object;
using test::split_lines;
using testing::ElementsAre;
using testing::StartsWith;

TEST(Logger, TextLine) {
  captured_output out;
  logger log(log_format::text, out.fd(), false);
  log.info("message", {{"key", "value"}, {"key2", "quoted value"}});
  EXPECT_TRUE(is_stamped(out.text(), "INFO message key=value key2=\"quoted value\"\n"))
      << out.text();
}

TEST(Logger, TextLevelNames) {
  captured_output out;
  logger log(log_format::text, out.fd(), false);
  log.error("e");
  log.warning("w");
  log.notice("n");
  log.info("i");
  log.log(log_level::debug, "d");
  const auto lines = split_lines(out.text());
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_TRUE(is_stamped(lines[0], "ERROR e")) << lines[0];
  EXPECT_TRUE(is_stamped(lines[1], "WARNING w")) << lines[1];
  EXPECT_TRUE(is_stamped(lines[2], "NOTICE n")) << lines[2];
  EXPECT_TRUE(is_stamped(lines[3], "INFO i")) << lines[3];
  EXPECT_TRUE(is_stamped(lines[4], "DEBUG d")) << lines[4];
}

TEST(Logger, TextQuotesAmbiguousValues) {
  captured_output out;
  logger log(log_format::text, out.fd(), true);
  log.info("m", {{"empty", ""},
                 {"eq", "a=b"},
                 {"quote", R"(say "hi")"},
                 {"nl", "a\nb"},
                 {"path", "/run/x.pid"},
                 {"utf8", "\xc2\xb5s"}});
  EXPECT_EQ(out.text(),
            "<6>m empty=\"\" eq=\"a=b\" quote=\"say \\\"hi\\\"\" nl=\"a\\nb\" path=/run/x.pid "
            "utf8=\xc2\xb5s\n");
}

TEST(Logger, TextMessageStaysOnOneLine) {
  captured_output out;
  logger log(log_format::text, out.fd(), true);
  log.warning("first\nsecond\tthird \"q\"");
  EXPECT_EQ(out.text(), "<4>first\\nsecond\\tthird \"q\"\n");
}

TEST(Logger, JournalPrefixText) {
  captured_output out;
  logger log(log_format::text, out.fd(), true);
  log.info("message", {{"key", "value"}});
  log.error("bad");
  log.notice("note");
  log.log(log_level::debug, "dbg");
  EXPECT_EQ(out.text(), "<6>message key=value\n<3>bad\n<5>note\n<7>dbg\n");
}

TEST(Logger, JsonLine) {
  captured_output out;
  logger log(log_format::json, out.fd(), false);
  log.notice("shutdown \"now\"", {{"cause", "PrepareForShutdown(true)"}, {"n", "3"}});
  const auto lines = split_lines(out.text());
  ASSERT_EQ(lines.size(), 1u);
  const json_object o = parse_object(lines[0]);
  EXPECT_THAT(keys(o), ElementsAre("time", "level", "msg", "cause", "n"));
  EXPECT_TRUE(is_timestamp(get(o, "time").text));
  EXPECT_EQ(get(o, "level").text, "notice");
  EXPECT_EQ(get(o, "msg").text, "shutdown \"now\"");
  EXPECT_EQ(get(o, "cause").text, "PrepareForShutdown(true)");
  EXPECT_TRUE(get(o, "n").is_string);
  EXPECT_EQ(get(o, "n").text, "3");
}

TEST(Logger, JsonLevels) {
  captured_output out;
  logger log(log_format::json, out.fd(), false);
  log.error("e");
  log.warning("w");
  log.info("i");
  log.log(log_level::debug, "d");
  const auto lines = split_lines(out.text());
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(get(parse_object(lines[0]), "level").text, "error");
  EXPECT_EQ(get(parse_object(lines[1]), "level").text, "warning");
  EXPECT_EQ(get(parse_object(lines[2]), "level").text, "info");
  EXPECT_EQ(get(parse_object(lines[3]), "level").text, "debug");
}

TEST(Logger, JournalPrefixJson) {
  captured_output out;
  logger log(log_format::json, out.fd(), true);
  log.warning("bus lost", {{"k", "v"}});
  const std::string text = out.text();
  ASSERT_THAT(text, StartsWith("<4>{"));
  ASSERT_EQ(text.back(), '\n');
  const json_object o = parse_object(std::string_view(text).substr(3, text.size() - 4));
  EXPECT_THAT(keys(o), ElementsAre("time", "level", "msg", "k"));
  EXPECT_EQ(get(o, "level").text, "warning");
}

// stderr a pipe nobody reads: the logger returns at once, drops what its queue cannot hold, and
// says how many it dropped, as a log line of its own format, once stderr takes lines again.
TEST(Logger, FullStderrDropsAndSaysHowMany) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  unique_fd read_end(fds[0]);
  unique_fd write_end(fds[1]);
  ASSERT_EQ(::fcntl(read_end.get(), F_SETFL, O_NONBLOCK), 0);
  {
    // Fill the pipe through a description of our own (write_end stays blocking).
    unique_fd filler(::open(("/proc/self/fd/" + std::to_string(write_end.get())).c_str(),
                            O_WRONLY | O_NONBLOCK | O_CLOEXEC));
    ASSERT_TRUE(filler);
    const std::string block(4096, 'x');
    while (::write(filler.get(), block.data(), block.size()) > 0) {
    }
    while (::write(filler.get(), "x", 1) > 0) {
    }
  }
  boost::asio::io_context io;
  logger log(log_format::text, write_end.get(), true, 100);
  log.attach(io);
  for (int i = 0; i < 5; ++i) log.info("line " + std::to_string(i) + std::string(30, '.'));
  EXPECT_EQ(log.dropped_lines(), 3u) << "two 40-byte lines fit in 100 bytes";

  // The reader wakes up.
  std::string text;
  char buffer[65536];
  for (int round = 0; round < 100 && text.find("dropped=") == std::string::npos; ++round) {
    ssize_t n;
    while ((n = ::read(read_end.get(), buffer, sizeof buffer)) > 0) {
      text.append(buffer, static_cast<std::size_t>(n));
    }
    io.restart();  // it stops whenever it runs out of work
    io.run_for(10ms);
    while ((n = ::read(read_end.get(), buffer, sizeof buffer)) > 0) {
      text.append(buffer, static_cast<std::size_t>(n));
    }
  }
  const std::string rest = text.substr(text.find_first_not_of('x'));
  EXPECT_EQ(rest, "<6>line 0" + std::string(30, '.') + "\n<6>line 1" + std::string(30, '.') +
                      "\n<4>log lines dropped: stderr was not writable dropped=3\n");
  EXPECT_EQ(log.dropped_lines(), 3u);
}

// Runs f with stderr redirected to a file and JOURNAL_STREAM set to value (or unset), and returns
// what it wrote. value may contain "{dev}" and "{ino}", replaced by the file's.
std::string with_stderr_file(const std::string& value, bool set, const std::function<void()>& f) {
  test::temp_dir dir;
  const std::string path = dir.path() + "/stderr";
  const int file = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  EXPECT_GE(file, 0);
  struct stat st {};
  EXPECT_EQ(::fstat(file, &st), 0);
  std::string env = value;
  auto replace = [&](const std::string& what, const std::string& with) {
    if (auto p = env.find(what); p != std::string::npos) env.replace(p, what.size(), with);
  };
  replace("{dev}", std::to_string(st.st_dev));
  replace("{ino}", std::to_string(st.st_ino));

  const char* old_env = std::getenv("JOURNAL_STREAM");
  const std::optional<std::string> saved_env =
      old_env ? std::optional<std::string>(old_env) : std::nullopt;
  std::fflush(stderr);
  const int saved_stderr = ::dup(STDERR_FILENO);
  ::dup2(file, STDERR_FILENO);
  ::close(file);
  if (set) {
    ::setenv("JOURNAL_STREAM", env.c_str(), 1);
  } else {
    ::unsetenv("JOURNAL_STREAM");
  }

  f();

  std::fflush(stderr);
  ::dup2(saved_stderr, STDERR_FILENO);
  ::close(saved_stderr);
  if (saved_env) {
    ::setenv("JOURNAL_STREAM", saved_env->c_str(), 1);
  } else {
    ::unsetenv("JOURNAL_STREAM");
  }
  return test::read_file(path);
}

TEST(Logger, ForStderrDetectsTheJournal) {
  auto log_once = [] { logger::for_stderr(log_format::text).info("hello", {{"k", "v"}}); };
  EXPECT_EQ(with_stderr_file("{dev}:{ino}", true, log_once), "<6>hello k=v\n");

  for (const std::string value :
       {"{dev}:1", "1:{ino}", "", "garbage", "{dev}:{ino}x", "{dev}:", ":{ino}", "{dev}-{ino}"}) {
    EXPECT_TRUE(is_stamped(with_stderr_file(value, true, log_once), "INFO hello k=v\n")) << value;
  }
  EXPECT_TRUE(is_stamped(with_stderr_file("", false, log_once), "INFO hello k=v\n"));
}

}  // namespace
}  // namespace shim
