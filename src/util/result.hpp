#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "util/errno_error.hpp"

namespace shim {

// The one error convention, by what a failure is and where it happens:
// - Start-up that cannot go on throws a std::exception (std::system_error where a system call
//   failed, usage_error for a bad flag); only main() turns it into an exit code.
// - Anything that can fail for a reason its caller passes on returns (or, once it waits for the
//   bus, PID 1 or a timer, delivers to a handler from the loop, never from inside the call that
//   started it) a result<T>: the value, or a one-line text and the errno behind it (0 when no
//   system call failed: a parse error, a refusal). A caller acts on the errno, never on the words.
// - An answer that may be "nothing" without a reason to give returns std::optional: a parser of
//   untrusted text refusing its input, a process that is gone, a file that is not there.
// - A helper that throws (write_file_atomically, parse_duration, parse_signal) is caught by its
//   caller, which turns the exception into one of the above.
// Nothing throws into the loop on purpose; what a library throws there is logged by
// run_event_loop(), and the loop goes on.
template <typename T = std::monostate>
class result {
 public:
  static result success(T value = {}) { return result(std::in_place_index<0>, std::move(value)); }
  // code: the errno behind the failure, 0 when there is none.
  static result failure(std::string text, int code = 0) {
    return result(std::in_place_index<1>, failed{std::move(text), code});
  }
  // A system call's failure: errno_text(code, context), the code kept.
  static result errno_failure(int code, const std::string& context) {
    return failure(errno_text(code, context), code < 0 ? -code : code);
  }
  // Another result's failure passed on: its errno kept, its text after prefix.
  template <typename U>
  static result failure_from(const result<U>& other, std::string_view prefix = {}) {
    return failure(std::string(prefix) + other.error(), other.error_code());
  }

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  const T& value() const& { return std::get<0>(v_); }
  // For a value that is moved out (a unique_fd, a large string).
  T& value() & { return std::get<0>(v_); }
  T value_or(T fallback) const { return ok() ? value() : std::move(fallback); }
  const std::string& error() const { return std::get<1>(v_).text; }
  int error_code() const { return std::get<1>(v_).code; }

 private:
  struct failed {
    std::string text;
    int code = 0;
  };
  template <std::size_t I, typename V>
  result(std::in_place_index_t<I> index, V&& v) : v_(index, std::forward<V>(v)) {}

  std::variant<T, failed> v_;
};

}  // namespace shim
