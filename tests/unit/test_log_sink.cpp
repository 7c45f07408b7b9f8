#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <limits.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "log/log_sink.hpp"
#include "log_test_support.hpp"

namespace shim {
namespace {

using namespace std::chrono_literals;
using test::split_lines;
using testing::ElementsAre;

struct fd_pair {
  unique_fd read;
  unique_fd write;
};

fd_pair make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category());
  return {unique_fd(fds[0]), unique_fd(fds[1])};
}

fd_pair make_socketpair() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    throw std::system_error(errno, std::generic_category());
  }
  return {unique_fd(fds[0]), unique_fd(fds[1])};
}

bool nonblocking(int fd) { return (::fcntl(fd, F_GETFL) & O_NONBLOCK) != 0; }

// Writes into fd until it is full, through a non-blocking description of the test's own (a pipe)
// or MSG_DONTWAIT (a socket), so that fd's own flags stay as they are. Returns the bytes written.
std::size_t fill(int fd, bool socket = false) {
  unique_fd own;
  if (!socket) {
    own.reset(
        ::open(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC));
    if (!own) throw std::system_error(errno, std::generic_category(), "reopen");
  }
  auto put = [&](const char* data, std::size_t size) {
    return socket ? ::send(fd, data, size, MSG_DONTWAIT) : ::write(own.get(), data, size);
  };
  std::size_t total = 0;
  const std::string block(4096, 'x');
  for (std::size_t size : {block.size(), std::size_t{1}}) {
    ssize_t n;
    while ((n = put(block.data(), size)) > 0) total += static_cast<std::size_t>(n);
  }
  return total;
}

// Everything readable now (fd non-blocking).
std::string drain(int fd) {
  std::string out;
  char buffer[65536];
  ssize_t n;
  while ((n = ::read(fd, buffer, sizeof buffer)) > 0)
    out.append(buffer, static_cast<std::size_t>(n));
  return out;
}

std::string numbered_line(int i, std::size_t size) {
  std::string line = "line " + std::to_string(i) + " ";
  line.resize(size - 1, '.');
  return line + "\n";
}

log_sink::handlers counting_notice() {
  return {.dropped_notice = [](std::uint64_t n) { return "dropped " + std::to_string(n) + "\n"; }};
}

// Runs what is ready; an io_context that ran out of work stays stopped until restarted.
void run_ready(boost::asio::io_context& io, std::chrono::milliseconds patience) {
  io.restart();
  io.run_for(patience);
}

// Reads while running the loop, until the sink's queue is empty and nothing more arrives.
std::string read_until_drained(boost::asio::io_context& io, int read_fd, const log_sink& sink) {
  std::string out;
  for (int round = 0; round < 1000; ++round) {
    out += drain(read_fd);
    run_ready(io, 5ms);
    const std::string more = drain(read_fd);
    out += more;
    if (sink.queued_bytes() == 0 && more.empty()) break;
  }
  return out;
}

// --- how the descriptor is written ---------------------------------------------------------------

TEST(LogSink, PipeGetsADescriptionOfItsOwn) {
  auto p = make_pipe();
  auto t = log_sink::writable_copy(p.write.get());
  ASSERT_TRUE(t.fd);
  EXPECT_EQ(t.how, log_sink::method::write);
  EXPECT_TRUE(nonblocking(t.fd.get()));
  EXPECT_FALSE(nonblocking(p.write.get())) << "the shared description was made non-blocking";
  EXPECT_TRUE(::fcntl(t.fd.get(), F_GETFD) & FD_CLOEXEC);
}

TEST(LogSink, SocketIsSentToWithoutChangingItsFlags) {
  auto s = make_socketpair();
  auto t = log_sink::writable_copy(s.write.get());
  ASSERT_TRUE(t.fd);
  EXPECT_EQ(t.how, log_sink::method::send);
  EXPECT_FALSE(nonblocking(t.fd.get()));
  EXPECT_FALSE(nonblocking(s.write.get()));
}

TEST(LogSink, RegularFileSharesTheOffset) {
  test::captured_output file;
  auto t = log_sink::writable_copy(file.fd());
  EXPECT_EQ(t.how, log_sink::method::write);
  log_sink sink(std::move(t), 1000, counting_notice());
  ASSERT_EQ(::write(file.fd(), "child\n", 6), 6);
  sink.write("shim\n");
  ASSERT_EQ(::write(file.fd(), "child again\n", 12), 12);
  EXPECT_EQ(file.text(), "child\nshim\nchild again\n") << "one overwrote the other";
}

// --- the bounded queue ---------------------------------------------------------------------------

TEST(LogSink, FullPipeQueuesUpToTheBoundThenDropsWholeLines) {
  auto p = make_pipe();
  ASSERT_EQ(::fcntl(p.read.get(), F_SETFL, O_NONBLOCK), 0);
  const std::size_t filled = fill(p.write.get());
  ASSERT_GT(filled, 0u);

  boost::asio::io_context io;  // outlives the sink, as attach() requires (ASan caught the reverse)
  log_sink sink(log_sink::writable_copy(p.write.get()), 1000, counting_notice());
  for (int i = 0; i < 30; ++i) sink.write(numbered_line(i, 100));  // would hang if it blocked
  EXPECT_EQ(sink.queued_bytes(), 1000u);
  EXPECT_EQ(sink.dropped_lines(), 20u);
  EXPECT_FALSE(nonblocking(p.write.get()));

  // Not attached yet: nothing waits, and the queue stays as it is until the reader wakes up.
  EXPECT_EQ(drain(p.read.get()).size(), filled);
  sink.attach(io);
  const std::string text = read_until_drained(io, p.read.get(), sink);
  std::vector<std::string> expected;
  for (int i = 0; i < 10; ++i) expected.push_back(numbered_line(i, 100).substr(0, 99));
  expected.push_back("dropped 20");
  EXPECT_EQ(split_lines(text), expected);

  // Once reported, not again.
  sink.write("after\n");
  EXPECT_EQ(read_until_drained(io, p.read.get(), sink), "after\n");
  EXPECT_EQ(sink.dropped_lines(), 20u);
  EXPECT_FALSE(nonblocking(p.write.get()));
}

TEST(LogSink, FullSocketQueuesAndDrains) {
  auto s = make_socketpair();
  ASSERT_EQ(::fcntl(s.read.get(), F_SETFL, O_NONBLOCK), 0);
  const std::size_t filled = fill(s.write.get(), true);
  boost::asio::io_context io;
  log_sink sink(log_sink::writable_copy(s.write.get()), 1000, counting_notice());
  sink.attach(io);
  for (int i = 0; i < 12; ++i) sink.write(numbered_line(i, 100));
  EXPECT_EQ(sink.dropped_lines(), 2u);
  EXPECT_FALSE(nonblocking(s.write.get()));
  std::string text = read_until_drained(io, s.read.get(), sink);
  ASSERT_GE(text.size(), filled);
  const auto lines = split_lines(text.substr(filled));
  ASSERT_EQ(lines.size(), 11u);
  EXPECT_EQ(lines.front(), numbered_line(0, 100).substr(0, 99));
  EXPECT_EQ(lines.back(), "dropped 2");
}

// A line longer than what the pipe can take goes out in pieces, and is finished before the next.
TEST(LogSink, PartlyWrittenLineIsFinishedFirst) {
  auto p = make_pipe();
  ASSERT_EQ(::fcntl(p.read.get(), F_SETFL, O_NONBLOCK), 0);
  ASSERT_EQ(::fcntl(p.write.get(), F_SETPIPE_SZ, 4096), 4096);
  boost::asio::io_context io;
  log_sink sink(log_sink::writable_copy(p.write.get()), 64 * 1024, counting_notice());
  sink.attach(io);
  const std::string long_line = std::string(3 * PIPE_BUF + 100, 'L') + "\n";
  sink.write(long_line);
  EXPECT_GT(sink.queued_bytes(), 0u) << "the pipe took it all";
  EXPECT_LT(sink.queued_bytes(), long_line.size()) << "nothing of it went out";
  sink.write("next\n");
  sink.write("and the next\n");
  EXPECT_EQ(read_until_drained(io, p.read.get(), sink), long_line + "next\nand the next\n");
  EXPECT_EQ(sink.dropped_lines(), 0u);
}

TEST(LogSink, LineLongerThanTheQueueIsDropped) {
  auto p = make_pipe();
  log_sink sink(log_sink::writable_copy(p.write.get()), 100, counting_notice());
  sink.write(std::string(100, 'x') + "\n");
  EXPECT_EQ(sink.dropped_lines(), 1u);
  EXPECT_EQ(sink.queued_bytes(), 0u);
}

TEST(LogSink, ReaderGoneDropsAndCounts) {
  auto p = make_pipe();
  p.read.reset();
  // The shim ignores SIGPIPE (main); so does this test, for the write that meets no reader.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  struct sigaction saved {};
  ASSERT_EQ(::sigaction(SIGPIPE, &ignore, &saved), 0);
  log_sink sink(log_sink::writable_copy(p.write.get()), 1000, counting_notice());
  for (int i = 0; i < 3; ++i) sink.write(numbered_line(i, 50));
  EXPECT_EQ(sink.dropped_lines(), 3u);
  EXPECT_EQ(sink.queued_bytes(), 0u) << "a notice about lines nobody can read";
  ::sigaction(SIGPIPE, &saved, nullptr);
}

TEST(LogSink, ClosedDescriptorDropsAndCounts) {
  log_sink sink(log_sink::target{}, 1000, counting_notice());
  sink.write("lost\n");
  EXPECT_EQ(sink.dropped_lines(), 1u);
}

// The fallback for a stderr that cannot be opened again: the shared, blocking description, with a
// poll for room before each write.
TEST(LogSink, PollThenWriteNeverBlocksOnAFullPipe) {
  auto p = make_pipe();
  ASSERT_EQ(::fcntl(p.read.get(), F_SETFL, O_NONBLOCK), 0);
  const std::size_t filled = fill(p.write.get());
  boost::asio::io_context io;
  log_sink sink(
      {unique_fd(::fcntl(p.write.get(), F_DUPFD_CLOEXEC, 3)), log_sink::method::poll_then_write},
      1000, counting_notice());
  sink.attach(io);
  for (int i = 0; i < 11; ++i) sink.write(numbered_line(i, 100));  // would hang if it blocked
  EXPECT_EQ(sink.dropped_lines(), 1u);
  EXPECT_FALSE(nonblocking(p.write.get()));
  const std::string text = read_until_drained(io, p.read.get(), sink);
  ASSERT_GE(text.size(), filled);
  const auto lines = split_lines(text.substr(filled));
  ASSERT_EQ(lines.size(), 11u);
  EXPECT_EQ(lines[9], numbered_line(9, 100).substr(0, 99));
  EXPECT_EQ(lines[10], "dropped 1");
}

// In wrapper mode the child writes to the same pipe: each of our writes is at most PIPE_BUF bytes
// ending at a line's end, which a pipe keeps whole, so no line of ours is cut by one of its.
TEST(LogSink, LinesNeverInterleaveWithAnotherWriter) {
  auto p = make_pipe();
  constexpr int kLines = 3000;
  std::string received;
  std::thread reader([&] {
    char buffer[65536];
    ssize_t n;
    while ((n = ::read(p.read.get(), buffer, sizeof buffer)) > 0) {
      received.append(buffer, static_cast<std::size_t>(n));
    }
  });
  unique_fd child_fd(::fcntl(p.write.get(), F_DUPFD_CLOEXEC, 3));
  std::thread child([&] {
    const std::string line = "child " + std::string(193, 'c') + "\n";
    for (int i = 0; i < kLines; ++i) {
      if (::write(child_fd.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
        return;
      }
    }
  });
  {
    boost::asio::io_context io;
    log_sink sink(log_sink::writable_copy(p.write.get()), 4 * 1024 * 1024, counting_notice());
    sink.attach(io);
    for (int i = 0; i < kLines; ++i) {
      sink.write(numbered_line(i, 301));
      io.restart();
      io.poll();
    }
    while (sink.queued_bytes() > 0) run_ready(io, 10ms);
    EXPECT_EQ(sink.dropped_lines(), 0u);
  }
  child.join();
  child_fd.reset();
  p.write.reset();
  reader.join();

  int next = 0;
  int child_lines = 0;
  for (const auto& line : split_lines(received)) {
    if (line == "child " + std::string(193, 'c')) {
      ++child_lines;
    } else {
      ASSERT_EQ(line, numbered_line(next, 301).substr(0, 300)) << "a line was cut";
      ++next;
    }
  }
  EXPECT_EQ(next, kLines);
  EXPECT_EQ(child_lines, kLines);
}

}  // namespace
}  // namespace shim
