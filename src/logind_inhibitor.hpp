#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "backoff.hpp"
#include "bus_connection.hpp"
#include "config.hpp"
#include "event_log.hpp"
#include "shim_status.hpp"
#include "unique_fd.hpp"

namespace shim {

// The systemd-logind delay lock on "shutdown", and everything else the shim asks of the system bus.
//
// On connect: subscribe to PrepareForShutdown (only from the owner of org.freedesktop.login1, with
// signature "b") and to that name's owner changes, take the lock (Inhibit, fd dup'ed with
// F_DUPFD_CLOEXEC), then read PreparingForShutdown and InhibitDelayMaxUSec. When the bus or logind
// goes away the old lock fd is kept; once back, a new lock is taken before the old one is closed.
// Retries use capped exponential backoff with jitter.
class logind_inhibitor {
 public:
  struct handlers {
    // PrepareForShutdown(active) from logind, or PreparingForShutdown=true read after connecting.
    std::function<void(bool active, const std::string& cause)> prepare_for_shutdown;
    // The first attempt at the lock has finished; error is empty when the lock is held.
    std::function<void(const std::string& error)> first_attempt_done;
    // Something shown in shim_status changed (for sd_notify STATUS=).
    std::function<void()> status_changed;
    // InhibitDelayMaxUSec was read (after every lock taken); already in shim_status.
    std::function<void(std::uint64_t usec)> inhibit_delay_read;
  };
  using delay_handler =
      std::function<void(std::optional<std::uint64_t> usec, const std::string& error)>;

  logind_inhibitor(boost::asio::io_context& io, logger& log, event_recorder& events,
                   shim_status& status, std::string why, handlers h);
  ~logind_inhibitor();
  logind_inhibitor(const logind_inhibitor&) = delete;
  logind_inhibitor& operator=(const logind_inhibitor&) = delete;

  void start();

  // Closes the lock so that the shutdown goes on; it is not taken again until retake().
  void release(const std::string& cause);
  // After a cancelled shutdown: take the lock again unless it is held.
  void retake();
  bool held() const { return static_cast<bool>(lock_); }

  // PID 1's org.freedesktop.systemd1.Manager SystemState ("running", "stopping", ...).
  void query_system_state(
      std::function<void(std::optional<std::string> state, const std::string& error)> done);

  // Makes logind re-read its configuration as systemctl and kubelet do: PID 1's
  // KillUnit("systemd-logind.service", "all", SIGHUP). done gets an empty error on success. If the
  // bus is lost meanwhile, done is never called: callers bound the wait themselves.
  void reload_logind(std::function<void(const std::string& error)> done);
  // Reads InhibitDelayMaxUSec again (shim_status follows); the same caveat about a lost bus.
  void read_inhibit_delay(delay_handler done);

 private:
  void connect();
  void schedule(backoff& delays, std::function<void()> what, const std::string& why);
  void bus_lost(std::string why);
  void drop_bus();
  void subscribe();
  void logind_appeared(const std::string& owner);
  void take_lock();
  void send_inhibit();
  void lock_failed(const std::string& error);
  void read_properties();
  void send_property_reads();
  slot_ptr send_delay_read(delay_handler done);
  void send_reload(const std::function<void(const std::string&)>& done);
  void send_system_state_query(
      const std::function<void(std::optional<std::string>, const std::string&)>& done);
  void first_attempt(const std::string& error);
  // shim_status::inhibitor follows from first_done_, the lock and wanted_; never set it elsewhere.
  void publish_state();
  void prepare_for_shutdown_signal(sd_bus_message* m);
  static int on_prepare_for_shutdown(sd_bus_message* m, void* userdata, sd_bus_error*);
  static int on_owner_changed(sd_bus_message* m, void* userdata, sd_bus_error*);

  boost::asio::io_context& io_;
  logger& log_;
  event_recorder& events_;
  shim_status& status_;
  std::string why_;
  handlers handlers_;

  std::shared_ptr<bus_connection> bus_;
  slot_ptr prepare_match_;
  slot_ptr owner_match_;
  slot_ptr owner_call_;
  slot_ptr inhibit_call_;
  slot_ptr preparing_call_;
  slot_ptr delay_call_;
  slot_ptr state_call_;
  slot_ptr reload_call_;
  slot_ptr reread_call_;

  std::string logind_owner_;  // unique name; PrepareForShutdown from anyone else is ignored
  unique_fd lock_;
  bool wanted_ = true;  // false from release() until retake()
  bool inhibit_in_flight_ = false;
  bool first_done_ = false;
  bool was_lost_ = false;
  boost::asio::steady_timer retry_timer_;
  backoff connect_backoff_{std::chrono::milliseconds(200), std::chrono::seconds(30)};
  backoff lock_backoff_{std::chrono::milliseconds(200), std::chrono::seconds(30)};
};

}  // namespace shim
