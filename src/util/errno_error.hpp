#pragma once

#include <cerrno>
#include <string>
#include <system_error>

namespace shim {

// Negative errno (sd-bus style) or -1/errno (libc style) becomes a std::system_error once, at the
// boundary, with the operation that failed as its context.
[[noreturn]] inline void throw_errno(int error, const std::string& context) {
  throw std::system_error(error < 0 ? -error : error, std::generic_category(), context);
}

// The same failure as a result's one-line error text, for code on the loop: exactly the what()
// that throw_errno's exception would carry ("pidfd_open PID 812: Too many open files").
inline std::string errno_text(int error, const std::string& context) {
  return std::system_error(error < 0 ? -error : error, std::generic_category(), context).what();
}

// For libc calls that return -1 and set errno.
inline int check_libc(int r, const std::string& context) {
  if (r < 0) throw_errno(errno, context);
  return r;
}

}  // namespace shim
