#include "logind/logind_inhibitor.hpp"

#include <fcntl.h>
#include <fmt/format.h>

#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstring>
#include <utility>

#include "util/duration_text.hpp"

namespace shim {

namespace {

constexpr const char* kLogind = "org.freedesktop.login1";
constexpr const char* kLogindPath = "/org/freedesktop/login1";
constexpr const char* kLogindManager = "org.freedesktop.login1.Manager";
constexpr const char* kBusDriver = "org.freedesktop.DBus";
// logind's answer to Inhibit while a delayed shutdown runs (logind-dbus.c, method_inhibit).
constexpr std::string_view kOperationInProgress = "org.freedesktop.login1.OperationInProgress";

}  // namespace

logind_inhibitor::logind_inhibitor(boost::asio::io_context& io, logger& log, std::string why,
                                   events& on)
    : io_(io), log_(log), why_(std::move(why)), on_(on), retry_timer_(io) {}

logind_inhibitor::~logind_inhibitor() { drop_connection(); }

void logind_inhibitor::drop_connection() {
  // Slots go before the connection they belong to.
  prepare_match_.reset();
  owner_match_.reset();
  properties_match_.reset();
  owner_call_.reset();
  list_call_.reset();
  relist_ = false;
  inhibit_call_.reset();
  preparing_call_.reset();
  delay_call_.reset();
  reread_call_.reset();
  retry_timer_.cancel();
  bus_ = nullptr;
  logind_owner_.clear();
}

void logind_inhibitor::connected(bus_connection& bus) {
  drop_connection();
  bus_ = &bus;
  // The daemon routes these by the name's current owner; the handlers check the sender again.
  prepare_match_ = add_match(
      bus,
      fmt::format("type='signal',sender='{}',path='{}',interface='{}',member='PrepareForShutdown'",
                  kLogind, kLogindPath, kLogindManager),
      [this](sd_bus_message* m) { on_prepare_for_shutdown(m); });
  owner_match_ = add_match(
      bus,
      fmt::format("type='signal',sender='{0}',path='/org/freedesktop/DBus',interface='{0}',"
                  "member='NameOwnerChanged',arg0='{1}'",
                  kBusDriver, kLogind),
      [this](sd_bus_message* m) { on_owner_changed(m); });
  properties_match_ =
      add_match(bus,
                fmt::format("type='signal',sender='{}',path='{}',interface='org.freedesktop.DBus."
                            "Properties',member='PropertiesChanged',arg0='{}'",
                            kLogind, kLogindPath, kLogindManager),
                [this](sd_bus_message* m) { on_properties_changed(m); });
  if (!prepare_match_ || !owner_match_ || !properties_match_) {
    // The connection cannot even queue a message: bus_link will see it lost.
    log_.warning("could not subscribe to logind's signals");
    return;
  }
  // Asked after the matches, on the same connection: no owner change can fall in between.
  confirm_owner();
}

void logind_inhibitor::lost(const std::string& why) {
  drop_connection();
  // The old lock fd stays open: logind keeps honouring it across its own restart, and it is closed
  // only once a new lock has replaced it. Whether logind still counts it cannot be known now.
  if (wanted_) report(lock_state::retrying, "the system bus is down: " + why);
}

void logind_inhibitor::confirm_owner() {
  owner_call_ = call_method(
      *bus_, {kBusDriver, "/org/freedesktop/DBus", kBusDriver, "GetNameOwner"},
      [](sd_bus_message* m) { return sd_bus_message_append(m, "s", kLogind); },
      [this](result<sd_bus_message*> reply) {
        const char* owner = nullptr;
        if (reply && sd_bus_message_read(reply.value(), "s", &owner) >= 0 && owner) {
          return owner_confirmed(owner);
        }
        logind_owner_.clear();
        lock_failed("logind is not on the bus (" + (reply ? "bad reply" : reply.error()) + ")");
      });
}

void logind_inhibitor::owner_confirmed(const std::string& owner) {
  if (owner == logind_owner_) return;
  const bool restarted = !logind_owner_.empty();
  logind_owner_ = owner;
  if (restarted) log_.notice("logind restarted; taking a new lock", {{"owner", owner}});
  lock_backoff_.reset();
  retry_timer_.cancel();
  inhibit_call_.reset();
  // The list first: logind answers in order, so kubelet's lock is known before a shutdown already
  // under way (PreparingForShutdown) is acted on.
  list_locks();
  if (wanted_) take_lock();
  read_properties();
}

void logind_inhibitor::take_lock() {
  if (!bus_ || logind_owner_.empty() || !wanted_ || inhibit_call_.in_flight()) return;
  inhibit_call_ = call_method(
      *bus_, {kLogind, kLogindPath, kLogindManager, "Inhibit"},
      [this](sd_bus_message* m) {
        return sd_bus_message_append(m, "ssss", "shutdown", "shutdown-shim", why_.c_str(), "delay");
      },
      [this](result<sd_bus_message*> reply) {
        inhibit_call_.reset();
        int fd = -1;
        if (!reply) return lock_failed(reply.error());
        if (const int r = sd_bus_message_read(reply.value(), "h", &fd); r < 0) {
          return lock_failed(std::string("bad Inhibit reply: ") + std::strerror(-r));
        }
        // Released while the call was in flight: the new lock goes with the reply.
        if (wanted_) lock_granted(fd);
      });
}

void logind_inhibitor::lock_granted(int fd) {
  // The reply owns fd; our duplicate is close-on-exec so no child ever holds the lock.
  unique_fd dup(fcntl(fd, F_DUPFD_CLOEXEC, 3));
  if (!dup) return lock_failed(std::string("dup the lock fd: ") + std::strerror(errno));
  // New lock first, then the old one goes: there is never a moment without one.
  lock_ = std::move(dup);
  lock_backoff_.reset();
  last_failure_.clear();
  report(lock_state::held, {});
  first_attempt(result<>::success());
  read_properties();
}

void logind_inhibitor::lock_failed(const std::string& error) {
  std::string detail = error;
  if (error.starts_with(kOperationInProgress)) {
    detail =
        "logind refuses a new lock while a shutdown is already under way, so this shutdown is "
        "not held by the shim; it takes the lock again as soon as logind accepts one";
  }
  // Said once as a warning; the retries that follow with the same answer are only noted.
  if (detail != last_failure_) {
    log_.warning("could not take the logind delay lock", {{"error", detail}});
  } else {
    log_.info("could not take the logind delay lock", {{"error", detail}});
  }
  last_failure_ = detail;
  report(lock_state::retrying, detail);
  first_attempt(result<>::failure(detail));
  schedule_lock_retry();
}

void logind_inhibitor::schedule_lock_retry() {
  if (!wanted_ || !bus_ || logind_owner_.empty()) return;  // a new owner or connection retries
  const auto delay = lock_backoff_.next();
  log_.info(fmt::format("retrying the logind lock in {}", format_duration(delay)));
  retry_timer_.expires_after(delay);
  retry_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) take_lock();
  });
}

void logind_inhibitor::read_properties() {
  if (!bus_ || logind_owner_.empty()) return;
  preparing_call_ =
      get_property(*bus_, kLogind, kLogindPath, kLogindManager, "PreparingForShutdown",
                   [this](result<sd_bus_message*> reply) {
                     int preparing = 0;
                     if (!reply || sd_bus_message_read(reply.value(), "v", "b", &preparing) < 0) {
                       log_.warning("could not read PreparingForShutdown",
                                    {{"error", reply ? "bad reply" : reply.error()}});
                       return;
                     }
                     on_.preparing_read(preparing != 0);
                   });
  delay_call_ = delay_read([this](result<std::uint64_t> usec) {
    if (!usec) {
      log_.warning("could not read InhibitDelayMaxUSec", {{"error", usec.error()}});
    } else {
      on_.inhibit_delay_read(usec.value());
    }
  });
}

void logind_inhibitor::read_inhibit_delay(std::function<void(result<std::uint64_t>)> done) {
  if (!bus_ || logind_owner_.empty()) {
    boost::asio::post(io_, [done = std::move(done)] {
      done(result<std::uint64_t>::failure("logind is not on the bus"));
    });
    return;
  }
  reread_call_ = delay_read(std::move(done));
}

pending_call logind_inhibitor::delay_read(std::function<void(result<std::uint64_t>)> done) {
  using read = result<std::uint64_t>;
  return get_property(*bus_, kLogind, kLogindPath, kLogindManager, "InhibitDelayMaxUSec",
                      [done = std::move(done)](result<sd_bus_message*> reply) {
                        std::uint64_t usec = 0;
                        if (!reply) return done(read::failure_from(reply));
                        if (sd_bus_message_read(reply.value(), "v", "t", &usec) < 0) {
                          return done(read::failure("bad InhibitDelayMaxUSec reply"));
                        }
                        done(read::success(usec));
                      });
}

void logind_inhibitor::release() {
  wanted_ = false;
  retry_timer_.cancel();
  inhibit_call_.reset();
  lock_.reset();
  report(lock_state::released, {});
}

void logind_inhibitor::retake() {
  wanted_ = true;
  if (held()) return;
  lock_backoff_.reset();
  retry_timer_.cancel();
  report(lock_state::retrying, bus_ ? "taking the lock again" : "the system bus is down");
  take_lock();
}

void logind_inhibitor::report(lock_state state, const std::string& detail) {
  state_ = state;
  on_.lock_changed(state, detail);
}

void logind_inhibitor::first_attempt(const result<>& outcome) {
  if (first_done_) return;
  first_done_ = true;
  on_.first_attempt_done(outcome);
}

void logind_inhibitor::on_prepare_for_shutdown(sd_bus_message* m) {
  const char* sender = sd_bus_message_get_sender(m);
  const std::string from = sender ? sender : "(unknown)";
  if (logind_owner_.empty() || from != logind_owner_) {
    log_.warning("ignoring PrepareForShutdown not sent by logind", {{"sender", from}});
    return;
  }
  int active = 0;
  if (!sd_bus_message_has_signature(m, "b") || sd_bus_message_read(m, "b", &active) < 0) {
    log_.warning("ignoring PrepareForShutdown with a wrong signature", {{"sender", from}});
    return;
  }
  on_.prepare_for_shutdown(
      active != 0, fmt::format("PrepareForShutdown({}) from {}", active ? "true" : "false", from));
}

void logind_inhibitor::on_properties_changed(sd_bus_message* m) {
  // A peer's unicast copy costs one ListInhibitors of the real logind, no more: a list in flight
  // absorbs any number of them.
  const char* sender = sd_bus_message_get_sender(m);
  if (logind_owner_.empty() || !sender || logind_owner_ != sender) return;
  if (names_delay_inhibited(m)) list_locks();
}

// logind sends PropertiesChanged(DelayInhibited) for every delay lock taken or released
// (inhibitor_start/inhibitor_stop), and the same signal for other properties too (IdleHint with
// every session's activity): only the first is a reason to list the locks.
bool logind_inhibitor::names_delay_inhibited(sd_bus_message* m) {
  constexpr std::string_view kProperty = "DelayInhibited";
  const char* interface = nullptr;
  if (sd_bus_message_read(m, "s", &interface) < 0) return false;
  if (sd_bus_message_enter_container(m, 'a', "{sv}") < 0) return false;
  bool named = false;
  while (sd_bus_message_enter_container(m, 'e', "sv") > 0) {
    const char* name = nullptr;
    if (sd_bus_message_read(m, "s", &name) < 0) return false;
    named = named || kProperty == name;
    if (sd_bus_message_skip(m, "v") < 0 || sd_bus_message_exit_container(m) < 0) return false;
  }
  if (sd_bus_message_exit_container(m) < 0) return false;
  if (named) return true;
  // The invalidated names, read in place (sd_bus_message_read_strv would copy them).
  if (sd_bus_message_enter_container(m, 'a', "s") < 0) return false;
  const char* name = nullptr;
  while (sd_bus_message_read(m, "s", &name) > 0) named = named || kProperty == name;
  return named;
}

void logind_inhibitor::list_locks() {
  if (!bus_ || logind_owner_.empty()) return;
  if (list_call_.in_flight()) {
    relist_ = true;
    return;
  }
  list_call_ = call_method(*bus_, {kLogind, kLogindPath, kLogindManager, "ListInhibitors"}, {},
                           [this](result<sd_bus_message*> reply) {
                             list_call_.reset();
                             locks_listed(reply);
                             if (std::exchange(relist_, false)) list_locks();
                           });
}

void logind_inhibitor::locks_listed(result<sd_bus_message*> reply) {
  if (!reply) {
    log_.warning("could not list logind's locks", {{"error", reply.error()}});
    return;
  }
  sd_bus_message* m = reply.value();
  std::vector<listed_lock> locks;
  int r = sd_bus_message_enter_container(m, 'a', "(ssssuu)");
  while (r > 0) {
    const char *what = nullptr, *who = nullptr, *why = nullptr, *mode = nullptr;
    std::uint32_t uid = 0, pid = 0;
    r = sd_bus_message_read(m, "(ssssuu)", &what, &who, &why, &mode, &uid, &pid);
    if (r > 0 && std::string_view(mode) == "delay" && locks.size() < kMaxListedLocks) {
      locks.push_back({what, who, why, mode, uid, pid});
    }
  }
  if (r < 0) {
    log_.warning("could not read logind's list of locks", {{"error", std::strerror(-r)}});
    return;
  }
  on_.delay_locks_listed(locks);
}

void logind_inhibitor::on_owner_changed(sd_bus_message* m) {
  const char* sender = sd_bus_message_get_sender(m);
  if (!sender || std::string_view(sender) != kBusDriver) {
    // A unicast signal from a peer: under Debian's default policy anyone may send one.
    log_.warning("ignoring a NameOwnerChanged for logind not sent by the bus driver",
                 {{"sender", sender ? sender : "(unknown)"}});
    return;
  }
  const char *name = nullptr, *old_owner = nullptr, *new_owner = nullptr;
  if (sd_bus_message_read(m, "sss", &name, &old_owner, &new_owner) < 0) return;
  if (!new_owner || !*new_owner) {
    log_.warning("logind left the bus; keeping the lock fd", {{"old_owner", old_owner}});
    logind_owner_.clear();
    inhibit_call_.reset();
    if (wanted_) report(lock_state::retrying, "logind left the bus");
    return;
  }
  // Even the driver's word is checked against its current answer.
  confirm_owner();
}

}  // namespace shim
