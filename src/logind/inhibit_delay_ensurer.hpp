#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "log/event_recorder.hpp"
#include "log/logger.hpp"
#include "logind/logind_config.hpp"
#include "logind/logind_settings.hpp"
#include "util/backoff.hpp"
#include "util/result.hpp"

namespace shim {

// --ensure-inhibit-delay: when logind's InhibitDelayMaxUSec (first read at start) is shorter than
// drain-delay + exit-timeout, writes the shim's logind.conf.d drop-in (never lowering a value
// another file sets), has PID 1 send logind a SIGHUP, and re-reads the property with capped
// backoff until it shows the new value or kReloadBound has passed. Everything runs on the loop.
class inhibit_delay_ensurer {
 public:
  // How long logind gets to show the new value after the SIGHUP was asked for.
  static constexpr std::chrono::seconds kReloadBound{5};

  // The bus calls it needs (systemd_manager's and logind_inhibitor's).
  struct bus_calls {
    std::function<void(std::function<void(result<>)>)> reload_logind;
    std::function<void(std::function<void(result<std::uint64_t>)>)> read_inhibit_delay;
  };
  struct handlers {
    // What it is doing or has done, one line for /readyz?verbose.
    std::function<void(const std::string& progress)> progress;
    // Called once, from the loop (never from inside start()): ok when logind's value is now (or
    // already was) long enough.
    std::function<void(const result<>& outcome)> finished;
  };

  inhibit_delay_ensurer(boost::asio::io_context& io, logger& log, event_recorder& events,
                        const logind_settings& cfg, bus_calls calls, handlers h);
  inhibit_delay_ensurer(const inhibit_delay_ensurer&) = delete;
  inhibit_delay_ensurer& operator=(const inhibit_delay_ensurer&) = delete;

  // With the first InhibitDelayMaxUSec read; later calls do nothing.
  void start(std::uint64_t current_usec);

 private:
  void reread();
  void succeed(std::uint64_t usec);
  void fail(const std::string& why);
  void finish(const result<>& outcome);
  void progress(const std::string& text);

  logger& log_;
  event_recorder& events_;
  ensure_mode mode_;
  std::chrono::nanoseconds hold_;
  logind_conf_paths paths_;
  bus_calls calls_;
  handlers handlers_;

  bool started_ = false;
  bool finished_ = false;
  std::uint64_t old_usec_ = 0;
  std::optional<std::uint64_t> last_read_;
  inhibit_delay_plan plan_;
  boost::asio::steady_timer deadline_timer_;
  boost::asio::steady_timer reread_timer_;
  backoff reread_backoff_{std::chrono::milliseconds(50), std::chrono::seconds(1)};
};

}  // namespace shim
