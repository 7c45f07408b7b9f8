#pragma once

#include <string>
#include <utility>
#include <variant>

namespace shim {

// The one error convention at the edges of the daemon (the bus, logind, PID 1, the logind drop-in):
// - A step of start-up that cannot go on throws std::system_error; only main() turns that into an
//   exit code.
// - Everything that runs on the loop reports its outcome once, to a handler, as a result: a value
//   or a one-line error text. Nothing throws into the loop, and a handler is never called from
//   inside the call that started the operation (even a failure to send is delivered from the loop
//   later), so no caller is ever re-entered.
template <typename T = std::monostate>
class result {
 public:
  static result success(T value = {}) { return result(std::in_place_index<0>, std::move(value)); }
  static result failure(std::string error) {
    return result(std::in_place_index<1>, std::move(error));
  }

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  const T& value() const& { return std::get<0>(v_); }
  // For a value that is moved out (a unique_fd, a large string).
  T& value() & { return std::get<0>(v_); }
  const std::string& error() const { return std::get<1>(v_); }

 private:
  template <std::size_t I, typename V>
  result(std::in_place_index_t<I> index, V&& v) : v_(index, std::forward<V>(v)) {}

  std::variant<T, std::string> v_;
};

}  // namespace shim
