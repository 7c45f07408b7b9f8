#pragma once

#include <string>
#include <utility>
#include <variant>

namespace shim {

// The one error convention of the daemon:
// - A step of start-up that cannot go on throws std::system_error; only main() turns that into an
//   exit code (1). Some throw another std::exception, which main() treats alike: event_recorder's
//   constructor (std::runtime_error for a path that is not a regular file), Asio's signal_set::add
//   and local_endpoint() under shutdown_shim::start() and readiness_server::listen()
//   (boost::system::system_error), and shutdown_shim::start() itself, which throws a failed
//   target_watch::start_child() on as std::runtime_error with its text.
// - Everything that runs on the loop reports its outcome as a result: a value or a one-line error
//   text. A call that is done at once returns it (process_handle::open and send_signal,
//   child_process::send_signal, exit_watcher::watch, target_watch::start_child,
//   event_recorder::reopen, signal_record::load and save). One that waits for the bus or PID 1
//   delivers it once, to a handler, from the loop and never from inside the call that started it
//   (even a failure to send comes later), so no caller is re-entered; inhibit_delay_ensurer::start
//   alone may call its finished handler before it returns. Nothing throws into the loop on
//   purpose; what a library throws there is logged by shutdown_shim::run(), and the loop goes on.
// Documented exceptions:
// - Parsers whose callers need no reason return std::optional, nullopt for refused input:
//   parse_flat_json, parse_event_record, parse_logind_timespan, parse_process_stat,
//   parse_boot_time, parse_max_open_files.
// - write_file_atomically throws std::system_error; its callers, signal_record::save and
//   inhibit_delay_ensurer::start, catch it and turn it into a result.
// - parse_duration throws duration_error and parse_signal std::invalid_argument; config.cpp's
//   flag parsing (duration_flag, --signal) turns them into a usage_error (exit 2), and
//   kubelet_shutdown.cpp's reading of a metav1.Duration into a field error of its result.
// Not converted yet: resolve_target, open_trusted_file, identify_process, current_boot_id,
// kubelet_dropin_usec, plan_inhibit_delay, add_match, log_sink::writable_copy,
// yaml_event_stream::next and find_cut_short_cause still report a failure in a field, an empty
// value or a sentinel.
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
