#include "util/claimed_directory.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <string>

#include "util/trusted_file.hpp"

namespace shim {

namespace {

constexpr std::string_view kNoun = "shim's state";

// What the lock file says: the claimant's PID, or "?" when it cannot be read.
std::string holder_of(int fd) {
  std::array<char, 32> text{};
  const ssize_t n = ::pread(fd, text.data(), text.size() - 1, 0);
  std::string pid(text.data(), n > 0 ? static_cast<std::size_t>(n) : 0);
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  return pid.empty() ? "?" : pid;
}

}  // namespace

result<claimed_directory> claimed_directory::claim(const std::filesystem::path& path) {
  using R = result<claimed_directory>;
  auto dir = open_trusted_directory(path.string(), kNoun);
  if (!dir && dir.error_code() == ENOENT) {
    // Made by path; whatever the walk below then finds is checked again, so a parent swapped in
    // between gains nothing.
    if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
      return R::errno_failure(errno, "create the state directory " + path.string());
    }
    dir = open_trusted_directory(path.string(), kNoun);
  }
  if (!dir) {
    return R::failure_from(dir, dir.error_code() == 0 ? "state directory not to be trusted: " : "");
  }
  const std::string lock_path = (path / kLockName).string();
  unique_fd lock(::openat(dir.value().get(), std::string(kLockName).c_str(),
                          O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0600));
  if (!lock) return R::errno_failure(errno, "open " + lock_path);
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    if (error != EWOULDBLOCK) return R::errno_failure(error, "lock " + lock_path);
    return R::failure(fmt::format("another process (PID {}) holds the state directory {} ({} is "
                                  "locked): two shims on one directory would both signal",
                                  holder_of(lock.get()), path.string(), lock_path),
                      error);
  }
  const std::string pid = fmt::format("{}\n", ::getpid());
  if (::ftruncate(lock.get(), 0) != 0 ||
      ::pwrite(lock.get(), pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    return R::errno_failure(errno, "write " + lock_path);
  }
  return R::success(claimed_directory(path, std::move(lock)));
}

}  // namespace shim
