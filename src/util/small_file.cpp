#include "util/small_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <utility>

namespace shim {
namespace {

constexpr std::array<std::pair<mode_t, std::string_view>, 6> kFileTypeNames{{
    {S_IFIFO, "a FIFO"},
    {S_IFSOCK, "a socket"},
    {S_IFCHR, "a character device"},
    {S_IFBLK, "a block device"},
    {S_IFDIR, "a directory"},
    {S_IFLNK, "a symbolic link"},
}};

}  // namespace

std::string_view file_type_name(mode_t mode) {
  for (const auto& [bits, name] : kFileTypeNames) {
    if ((mode & S_IFMT) == bits) return name;
  }
  return "not a regular file";
}

result<std::optional<unique_fd>> open_regular_file_if_exists(const std::filesystem::path& path) {
  using R = result<std::optional<unique_fd>>;
  unique_fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT || errno == ENOTDIR) return R::success(std::nullopt);
    return R::errno_failure(errno, path.string());
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return R::errno_failure(errno, path.string());
  if (!S_ISREG(st.st_mode)) {
    return R::failure(
        fmt::format("{}: {}, not a regular file", path.string(), file_type_name(st.st_mode)));
  }
  return R::success(std::move(fd));
}

result<std::string> read_bounded(const unique_fd& fd, const std::filesystem::path& path,
                                 std::size_t max_bytes) {
  using R = result<std::string>;
  std::string content;
  std::array<char, 4096> buffer{};
  // One byte past the bound: a file that grew past it is refused, not cut.
  while (content.size() <= max_bytes) {
    const std::size_t want = std::min(buffer.size(), max_bytes + 1 - content.size());
    const ssize_t n = ::read(fd.get(), buffer.data(), want);
    if (n < 0) {
      if (errno == EINTR) continue;
      return R::errno_failure(errno, path.string());
    }
    if (n == 0) return R::success(std::move(content));
    content.append(buffer.data(), static_cast<std::size_t>(n));
  }
  return R::failure(fmt::format("{}: larger than {} bytes: refused", path.string(), max_bytes));
}

result<std::optional<std::string>> read_small_file_if_exists(const std::filesystem::path& path,
                                                             std::size_t max_bytes) {
  using R = result<std::optional<std::string>>;
  auto opened = open_regular_file_if_exists(path);
  if (!opened) return R::failure_from(opened);
  if (!opened.value()) return R::success(std::nullopt);
  auto text = read_bounded(*opened.value(), path, max_bytes);
  if (!text) return R::failure_from(text);
  return R::success(std::move(text.value()));
}

result<std::string> read_small_file(const std::filesystem::path& path, std::size_t max_bytes) {
  using R = result<std::string>;
  auto text = read_small_file_if_exists(path, max_bytes);
  if (!text) return R::failure_from(text);
  if (!text.value()) return R::errno_failure(ENOENT, path.string());
  return R::success(std::move(*text.value()));
}

}  // namespace shim
