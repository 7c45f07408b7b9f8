#pragma once

#include <sys/types.h>

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "util/result.hpp"
#include "util/unique_fd.hpp"

namespace shim {

// The one way the shim opens and reads a file it did not write itself: TLS material, the token,
// kubelet's config and manifest, logind's configuration, the event log for `report`, the record
// of signalled processes, /proc and the boot id. A FIFO at such a path once blocked the event
// loop for good, and a link to /dev/zero ended in std::bad_alloc (issue 18, item 1), so:
// - opened O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC: open() itself never waits (a FIFO
//   without a writer opens at once), never takes a terminal, never reaches a child;
// - refused unless fstat() says it is a regular file (procfs files are);
// - read with a bound per kind of file, one byte past it so that a file that grew is refused too,
//   and again after EINTR;
// - a failure is one line that names the file and the reason.

// A file type in words, for refusals: "a FIFO", "a character device", ...
std::string_view file_type_name(mode_t mode);

// The file opened as above; nullopt when it does not exist (ENOENT, or ENOTDIR on the way).
result<std::optional<unique_fd>> open_regular_file_if_exists(const std::filesystem::path& path);

// At most max_bytes from fd (opened as above, or checked the same way); more is an
// error. `path` only names the file in errors.
result<std::string> read_bounded(const unique_fd& fd, const std::filesystem::path& path,
                                 std::size_t max_bytes);

// open_regular_file_if_exists + read_bounded.
result<std::optional<std::string>> read_small_file_if_exists(const std::filesystem::path& path,
                                                             std::size_t max_bytes);
// The same, a missing file being an error too (ENOENT).
result<std::string> read_small_file(const std::filesystem::path& path, std::size_t max_bytes);

// The bounds, one per kind of file: what such a file can hold, with room to spare.
// A CA bundle: Debian's whole trust store is about 220 KB.
inline constexpr std::size_t kMaxTlsFileBytes = 1024 * 1024;
// A bearer token is a token, not a document.
inline constexpr std::size_t kMaxTokenBytes = 16 * 1024;
// logind.conf and its drop-ins are a few KiB.
inline constexpr std::size_t kMaxLogindConfBytes = 64 * 1024;
// /proc/PID/stat, status and comm; /proc/stat grows by about 150 bytes per CPU.
inline constexpr std::size_t kMaxProcFileBytes = 1024 * 1024;

}  // namespace shim
