#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "log/event_recorder.hpp"
#include "log/logger.hpp"
#include "logind/bus_connection.hpp"
#include "util/backoff.hpp"
#include "util/result.hpp"
#include "util/unique_fd.hpp"

namespace shim {

// The systemd-logind delay lock on "shutdown", and what logind says about shutdowns. It rides on
// the connection bus_link keeps up, and reports through its events interface (logind_edge
// implements it); it owns no other state of the shim.
//
// Who logind is: only the bus driver says. A NameOwnerChanged for org.freedesktop.login1 counts
// only when its sender is org.freedesktop.DBus (any peer may send a unicast signal that sd-bus's
// match lets through, under Debian's default policy too), and even then the owner is confirmed with
// GetNameOwner. PrepareForShutdown counts only from that unique name.
//
// The lock: Inhibit("shutdown", ..., "delay"), its fd dup'ed with F_DUPFD_CLOEXEC. When the bus or
// logind goes away the old fd is kept; once back, a new lock is taken before the old one is closed.
// Retries use capped exponential backoff with jitter.
class logind_inhibitor {
 public:
  // One entry of logind's ListInhibitors, a(ssssuu).
  struct listed_lock {
    std::string what, who, why, mode;
    std::uint32_t uid = 0;
    std::uint32_t pid = 0;
  };
  // logind keeps up to InhibitorsMax (8192) locks; only delay locks are kept from a list, and no
  // node has more than a handful (kubelet, unattended-upgrades, the shim).
  static constexpr std::size_t kMaxListedLocks = 256;

  enum class lock_state {
    held,      // logind granted it on the current connection
    retrying,  // not held, or not known to be (the bus is down); retrying
    released,  // closed on purpose (release()) until retake()
  };
  class events {
   public:
    // PrepareForShutdown(active) from logind.
    virtual void prepare_for_shutdown(bool active, const std::string& cause) = 0;
    // PreparingForShutdown, read after each connection to logind: no change signal exists for it,
    // so a shutdown already under way, or one that a restarted logind forgot, is seen only by
    // asking.
    virtual void preparing_read(bool preparing) = 0;
    virtual void lock_changed(lock_state state, const std::string& detail) = 0;
    // The first attempt at the lock is over (held, or why not).
    virtual void first_attempt_done(const result<>& outcome) = 0;
    // InhibitDelayMaxUSec, read after every lock taken.
    virtual void inhibit_delay_read(std::uint64_t usec) = 0;
    // The delay locks logind lists (at most kMaxListedLocks), read after each connection to
    // logind and whenever logind says its locks changed (PropertiesChanged of DelayInhibited,
    // sent for every lock taken or released).
    virtual void delay_locks_listed(const std::vector<listed_lock>& locks) = 0;

   protected:
    ~events() = default;
  };

  logind_inhibitor(boost::asio::io_context& io, logger& log, std::string why, events& on);
  ~logind_inhibitor();
  logind_inhibitor(const logind_inhibitor&) = delete;
  logind_inhibitor& operator=(const logind_inhibitor&) = delete;

  // From bus_link.
  void connected(bus_connection& bus);
  void lost(const std::string& why);

  // Closes the lock so that the shutdown goes on; it is not taken again until retake().
  void release();
  // Takes the lock again (after a cancelled shutdown) unless it is held.
  void retake();
  bool held() const { return state_ == lock_state::held; }

  // Reads InhibitDelayMaxUSec again (for --ensure-inhibit-delay).
  void read_inhibit_delay(std::function<void(result<std::uint64_t>)> done);

 private:
  void drop_connection();
  void confirm_owner();
  void owner_confirmed(const std::string& owner);
  void take_lock();
  void lock_granted(int fd);
  void lock_failed(const std::string& error);
  void schedule_lock_retry();
  void read_properties();
  pending_call delay_read(std::function<void(result<std::uint64_t>)> done);
  void report(lock_state state, const std::string& detail);
  void first_attempt(const result<>& outcome);
  void on_prepare_for_shutdown(sd_bus_message* m);
  void on_owner_changed(sd_bus_message* m);
  void on_properties_changed(sd_bus_message* m);
  static bool names_delay_inhibited(sd_bus_message* m);
  void list_locks();
  void locks_listed(result<sd_bus_message*> reply);

  boost::asio::io_context& io_;
  logger& log_;
  std::string why_;
  events& on_;

  bus_connection* bus_ = nullptr;  // bus_link's; null while down
  slot_ptr prepare_match_;
  slot_ptr owner_match_;
  slot_ptr properties_match_;
  pending_call owner_call_;
  pending_call inhibit_call_;
  pending_call preparing_call_;
  pending_call delay_call_;
  pending_call reread_call_;
  pending_call list_call_;
  bool relist_ = false;  // the locks changed while a list was in flight: list again after it

  std::string logind_owner_;  // unique name, as the bus driver confirmed it; empty: unknown
  unique_fd lock_;            // may be a lock of an earlier connection, kept until replaced
  lock_state state_ = lock_state::retrying;
  bool wanted_ = true;  // false from release() until retake()
  bool first_done_ = false;
  std::string last_failure_;  // what the last failed Inhibit said
  boost::asio::steady_timer retry_timer_;
  backoff lock_backoff_{std::chrono::milliseconds(200), std::chrono::seconds(30)};
};

}  // namespace shim
