#include "daemon/systemd_notifier.hpp"

#include <systemd/sd-daemon.h>

#include <cstdint>
#include <system_error>

#include "util/duration_text.hpp"

namespace shim {

void systemd_notifier::start_watchdog() {
  std::uint64_t usec = 0;
  const int r = sd_watchdog_enabled(0, &usec);
  if (r < 0) {
    log_.warning("ignoring a malformed WATCHDOG_USEC/WATCHDOG_PID",
                 {{"error", std::generic_category().message(-r)}});
  }
  if (r <= 0 || usec == 0) return;
  watchdog_period_ = std::chrono::microseconds(usec / 2);
  log_.info("systemd watchdog enabled; sending WATCHDOG=1 at half the interval",
            {{"interval", format_duration(std::chrono::microseconds(usec))}});
  ping_watchdog();
}

void systemd_notifier::ping_watchdog() {
  sd_notify(0, "WATCHDOG=1");
  watchdog_timer_.expires_after(watchdog_period_);
  watchdog_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) ping_watchdog();
  });
}

void systemd_notifier::status() { sd_notify(0, ("STATUS=" + status_line(status_)).c_str()); }

void systemd_notifier::ready() {
  if (ready_) return;
  ready_ = true;
  status();
  sd_notify(0, "READY=1");
}

void systemd_notifier::stopping() { sd_notify(0, "STOPPING=1"); }

}  // namespace shim
