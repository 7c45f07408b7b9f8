#include "util/trusted_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <climits>
#include <deque>
#include <filesystem>
#include <optional>
#include <system_error>
#include <utility>

namespace shim {
namespace {

// Linux's own limit on symlinks followed in one path lookup (MAXSYMLINKS).
constexpr int kMaxSymlinks = 40;

// Why `what` may not be trusted for its owner; nullopt when root or the shim's uid owns it.
std::optional<std::string> untrusted_owner(std::string_view what, const struct stat& st) {
  if (st.st_uid == 0 || st.st_uid == ::geteuid()) return std::nullopt;
  return fmt::format("{} is owned by uid {}, not by root or the shim's uid {}", what, st.st_uid,
                     ::geteuid());
}
bool writable_by_others(mode_t mode) { return (mode & (S_IWGRP | S_IWOTH)) != 0; }

// Why the directory at `path` may not lead to the file; nullopt when it may. holds_file: it is
// the directory the file is in.
std::optional<std::string> untrusted_directory(const std::string& path, const struct stat& st,
                                               bool holds_file, std::string_view noun) {
  if (auto why = untrusted_owner("directory " + path, st)) return why;
  if (!writable_by_others(st.st_mode)) return std::nullopt;
  if (holds_file) {
    return fmt::format(
        "directory {}, which holds the {}, is writable by group or others "
        "(mode {:04o})",
        path, noun, st.st_mode & 07777);
  }
  if ((st.st_mode & S_ISVTX) == 0) {
    return fmt::format("directory {} is writable by group or others (mode {:04o}) and not sticky",
                       path, st.st_mode & 07777);
  }
  return std::nullopt;
}

// The components of a path, without empty ones and ".".
std::deque<std::string> path_components(std::string_view path) {
  std::deque<std::string> out;
  while (!path.empty()) {
    const auto slash = path.find('/');
    const auto part = path.substr(0, slash);
    if (!part.empty() && part != ".") out.emplace_back(part);
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }
  return out;
}

// For messages: the walked path one step further down ("..": up).
std::string step(const std::string& where, const std::string& name) {
  if (name == "..") {
    const auto slash = where.rfind('/');
    return slash == 0 || slash == std::string::npos ? "/" : where.substr(0, slash);
  }
  return where == "/" ? "/" + name : where + "/" + name;
}

// The walk both open_trusted_file and open_trusted_directory take: `directory`, the path names
// the directory that holds what the shim trusts, and its O_PATH descriptor is the result.
result<unique_fd> open_trusted(const std::string& path, std::string_view noun, bool directory) {
  using R = result<unique_fd>;
  auto fail = [&path](int error) { return R::errno_failure(error, path); };
  auto refuse = [](std::string why) { return R::failure(std::move(why)); };

  std::string absolute = path;
  if (!path.starts_with('/')) {
    std::error_code ec;
    const auto cwd = std::filesystem::current_path(ec);
    if (ec) return fail(ec.value());
    absolute = (cwd / path).string();
  }
  std::deque<std::string> todo = path_components(absolute);

  unique_fd dir;
  struct stat dir_st {};
  std::string where;
  // Starts (again) at "/", which is checked like any directory on the way.
  auto open_root = [&]() -> std::optional<std::string> {
    dir = unique_fd(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!dir || ::fstat(dir.get(), &dir_st) != 0) return std::strerror(errno);
    where.assign(1, '/');  // not `= "/"`: GCC 12's bogus -Wrestrict at -O3 once inlined here
    return untrusted_directory(where, dir_st, false, noun);
  };
  if (auto why = open_root()) return refuse(*why);

  int symlinks = 0;
  while (!todo.empty()) {
    const std::string name = std::move(todo.front());
    todo.pop_front();
    const std::string here = step(where, name);
    unique_fd fd(::openat(dir.get(), name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
    struct stat st {};
    if (!fd || ::fstat(fd.get(), &st) != 0) return fail(errno);

    if (S_ISLNK(st.st_mode)) {
      if (auto why = untrusted_owner("symlink " + here, st)) return refuse(*why);
      if (++symlinks > kMaxSymlinks) return fail(ELOOP);
      std::array<char, PATH_MAX> target{};
      const ssize_t n = ::readlinkat(fd.get(), "", target.data(), target.size());
      if (n < 0) return fail(errno);
      if (static_cast<std::size_t>(n) == target.size()) return fail(ENAMETOOLONG);
      const std::string_view link(target.data(), static_cast<std::size_t>(n));
      auto parts = path_components(link);
      todo.insert(todo.begin(), parts.begin(), parts.end());
      if (link.starts_with('/')) {
        if (auto why = open_root()) return refuse(*why);
      }
      continue;
    }
    if (S_ISDIR(st.st_mode)) {
      if (todo.empty() && directory) {
        if (auto why = untrusted_directory(here, st, true, noun)) return refuse(*why);
        return R::success(std::move(fd));
      }
      if (todo.empty()) return fail(EISDIR);
      // Whether it holds the pidfile is known only at the last step, which checks it once more.
      if (auto why = untrusted_directory(here, st, false, noun)) return refuse(*why);
      dir = std::move(fd);
      dir_st = st;
      where = here;
      continue;
    }
    if (!todo.empty() || directory) return fail(ENOTDIR);

    if (auto why = untrusted_directory(where, dir_st, true, noun)) return refuse(*why);
    if (!S_ISREG(st.st_mode)) return refuse(fmt::format("{} is not a regular file", here));
    if (auto why = untrusted_owner(here, st)) return refuse(*why);
    if (writable_by_others(st.st_mode)) {
      return refuse(
          fmt::format("{} is writable by group or others (mode {:04o})", here, st.st_mode & 07777));
    }
    unique_fd file(::openat(dir.get(), name.c_str(),
                            O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
    struct stat opened {};
    if (!file || ::fstat(file.get(), &opened) != 0) return fail(errno);
    if (opened.st_dev != st.st_dev || opened.st_ino != st.st_ino) {
      return refuse(fmt::format("{} was replaced while it was being checked", here));
    }
    return R::success(std::move(file));
  }
  return fail(EISDIR);  // the path was "/" (or only "." and "..")
}

}  // namespace

result<unique_fd> open_trusted_file(const std::string& path, std::string_view noun) {
  return open_trusted(path, noun, false);
}

result<unique_fd> open_trusted_directory(const std::string& path, std::string_view noun) {
  return open_trusted(path, noun, true);
}

}  // namespace shim
