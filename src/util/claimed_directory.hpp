#pragma once

#include <filesystem>
#include <string_view>
#include <utility>

#include "util/result.hpp"
#include "util/unique_fd.hpp"

namespace shim {

// The shim's state directory, where what must outlive a restart of the shim is kept (the record
// of signalled processes, the control socket): one that only root may write to, held by one shim
// at a time. Two shims on one directory would each signal the apiserver at a reboot, and a
// directory others may write to is one where a restarted shim finds no record it may trust (the
// root of a memory emptyDir, a tmpfs of mode 1777: 2 SIGTERMs, issue 35).
class claimed_directory {
 public:
  // The file whose exclusive lock (flock) is the claim; it holds the claimant's PID.
  static constexpr std::string_view kLockName = "lock";

  // Makes `path` (mode 0700, its parent must exist) when it is missing, checks it as
  // open_trusted_directory does, and locks path/lock (never inherited by a child, which could
  // otherwise keep the claim after the shim is gone). A failure says why: a directory root may not
  // trust, or another process's claim (naming its PID; EWOULDBLOCK).
  static result<claimed_directory> claim(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }

 private:
  claimed_directory(std::filesystem::path path, unique_fd lock)
      : path_(std::move(path)), lock_(std::move(lock)) {}

  std::filesystem::path path_;
  unique_fd lock_;
};

}  // namespace shim
