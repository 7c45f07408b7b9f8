// The one way the shim reads a file (issue 18, item 1): a FIFO at a path the shim reads once
// blocked its event loop for good, and a link to /dev/zero ended it in std::bad_alloc. Every case
// runs under a watchdog: a read that blocks fails the test instead of hanging it.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>

#include "log_test_support.hpp"
#include "util/small_file.hpp"

namespace shim {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

// Runs f on a thread and fails (leaving the thread blocked, so the process is ended by the test
// runner's timeout rather than by a hang here) if it does not return within 10 s.
template <typename F>
auto within_bound(F f) {
  auto done = std::async(std::launch::async, f);
  if (done.wait_for(10s) != std::future_status::ready) {
    ADD_FAILURE() << "the read blocked";
    std::quick_exit(1);
  }
  return done.get();
}

class SmallFile : public ::testing::Test {
 protected:
  fs::path path(const std::string& name) const { return fs::path(dir_.path()) / name; }
  test::temp_dir dir_;
};

TEST_F(SmallFile, ReadsARegularFileWhole) {
  const auto file = path("config.yaml");
  std::ofstream(file) << "kind: KubeletConfiguration\n";
  auto r = read_small_file(file, 1024);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r.value(), "kind: KubeletConfiguration\n");
}

TEST_F(SmallFile, RefusesMoreThanTheBound) {
  const auto file = path("big");
  std::ofstream(file) << std::string(4097, '#');
  auto r = read_small_file(file, 4096);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), file.string() + ": larger than 4096 bytes: refused");
  r = read_small_file(file, 4097);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r.value().size(), 4097u);
}

TEST_F(SmallFile, AFifoIsRefusedWithoutWaiting) {
  const auto fifo = path("ca.crt");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto r = within_bound([&] { return read_small_file(fifo, kMaxTlsFileBytes); });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), fifo.string() + ": a FIFO, not a regular file");
}

TEST_F(SmallFile, ALinkToDevZeroIsRefused) {
  const auto link = path("99-kubelet.conf");
  fs::create_symlink("/dev/zero", link);
  const auto r = within_bound([&] { return read_small_file_if_exists(link, kMaxLogindConfBytes); });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), link.string() + ": a character device, not a regular file");
}

TEST_F(SmallFile, ASocketDirectoryAndDeviceAreRefused) {
  const auto socket_path = path("sock");
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  socket_path.string().copy(addr.sun_path, sizeof addr.sun_path - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  // Opening a socket fails (ENXIO) before any type check: still a refusal that names the file.
  auto r = read_small_file(socket_path, 64);
  ::close(fd);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error(), HasSubstr(socket_path.string() + ": "));

  r = read_small_file(dir_.path(), 64);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), dir_.path() + ": a directory, not a regular file");
  r = read_small_file("/dev/null", 64);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), "/dev/null: a character device, not a regular file");
  EXPECT_EQ(r.error_code(), 0);  // a refusal: no system call failed
}

TEST_F(SmallFile, AMissingFileIsNoneOnlyWhereThatIsAllowed) {
  auto maybe = read_small_file_if_exists(path("absent"), 64);
  ASSERT_TRUE(maybe.ok()) << maybe.error();
  EXPECT_FALSE(maybe.value());
  maybe = read_small_file_if_exists(path("absent/below"), 64);
  ASSERT_TRUE(maybe.ok()) << maybe.error();
  EXPECT_FALSE(maybe.value());
  const auto r = read_small_file(path("absent"), 64);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), path("absent").string() + ": No such file or directory");
  EXPECT_EQ(r.error_code(), ENOENT);  // the errno of a missing file, kept
}

TEST_F(SmallFile, ProcFilesReadAsRegularFiles) {
  // procfs says 0 bytes in st_size; the reader reads until the end, not up to st_size.
  const auto r = read_small_file("/proc/self/stat", kMaxProcFileBytes);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_THAT(r.value(), HasSubstr(std::to_string(::getpid()) + " ("));
}

}  // namespace
}  // namespace shim
