#include "util/atomic_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <system_error>

#include "util/errno_error.hpp"
#include "util/unique_fd.hpp"

namespace shim {

namespace fs = std::filesystem;

void write_file_atomically(const fs::path& file, std::string_view content, durability survives) {
  const fs::path dir = file.parent_path();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::system_error(ec, "create " + dir.string());

  // Formatted rather than `"." + name + ...`: GCC 12 at -O3 (the release build) reports a bogus
  // -Wrestrict for operator+(const char*, std::string&&), GCC bug 105329.
  std::string temp = (dir / fmt::format(".{}.XXXXXX", file.filename().string())).string();
  unique_fd fd(::mkostemp(temp.data(), O_CLOEXEC));
  if (!fd) throw_errno(errno, "create a temporary file in " + dir.string());
  try {
    std::string_view rest = content;
    while (!rest.empty()) {
      const ssize_t n = ::write(fd.get(), rest.data(), rest.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw_errno(n < 0 ? errno : EIO, "write " + temp);
      rest.remove_prefix(static_cast<std::size_t>(n));
    }
    check_libc(::fchmod(fd.get(), 0644), "chmod " + temp);
    if (survives == durability::power_loss) check_libc(::fsync(fd.get()), "fsync " + temp);
    fd.reset();
    check_libc(::rename(temp.c_str(), file.c_str()), "rename " + temp + " to " + file.string());
  } catch (...) {
    ::unlink(temp.c_str());
    throw;
  }
  // The rename itself must survive a crash, or logind could read the old file after the reboot.
  if (survives == durability::process_crash) return;
  unique_fd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir_fd) throw_errno(errno, "open " + dir.string());
  check_libc(::fsync(dir_fd.get()), "fsync " + dir.string());
}

}  // namespace shim
