#pragma once

#include <string>
#include <string_view>

#include "util/result.hpp"
#include "util/unique_fd.hpp"

namespace shim {

// A file opened for reading only if root may trust what it says: a pidfile, whose PID the shim
// signals, and the event log, whose records decide the previous shutdown's verdict. The rules are
// the way systemd trusts PIDFile= for a process outside the service (owned by root), made stricter
// because the shim has no cgroup to check the PID against:
// - the file is a regular file owned by root or by the shim's effective uid, and not writable by
//   group or others;
// - the directory that holds it is owned by root or the shim's uid and not writable by group or
//   others, sticky or not;
// - every directory above it, and every symlink on the way (each is followed, as for /var/run ->
//   /run), is owned by root or the shim's uid; a directory above may be writable by others only if
//   it is sticky (/tmp), since then nobody else can move the entries the shim relies on.
// systemd's CHASE_SAFE only refuses a step from a directory owned by one non-root user to an entry
// owned by another; here no step may pass through anything a non-root user other than the shim's
// own controls. The path is walked with O_PATH|O_NOFOLLOW from "/", each step checked on the
// descriptor it opened, so nothing can be swapped between the check and the read.
//
// The file open for reading when it is trusted. A failure with an errno: there is nothing to trust
// ("PATH: No such file or directory"; ENOENT: it does not exist). A failure without one (code 0):
// it may not be trusted, and why. noun: what the file is, for that refusal ("directory D, which
// holds the pidfile, ...").
result<unique_fd> open_trusted_file(const std::string& path, std::string_view noun);

// The same walk to a directory that is to hold what root trusts (the shim's state: the record of
// signalled processes, the control socket), checked as the directory that holds a pidfile is: its
// O_PATH descriptor when it may be trusted.
result<unique_fd> open_trusted_directory(const std::string& path, std::string_view noun);

}  // namespace shim
