#include "logind_inhibitor.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>

#include <cstring>

#include "errno_error.hpp"

namespace shim {

namespace {

constexpr const char* kLogind = "org.freedesktop.login1";
constexpr const char* kLogindPath = "/org/freedesktop/login1";
constexpr const char* kLogindManager = "org.freedesktop.login1.Manager";
constexpr std::uint64_t kCallTimeoutUsec = 5'000'000;

}  // namespace

logind_inhibitor::logind_inhibitor(boost::asio::io_context& io, logger& log, event_recorder& events,
                                   shim_status& status, std::string why, handlers h)
    : io_(io),
      log_(log),
      events_(events),
      status_(status),
      why_(std::move(why)),
      handlers_(std::move(h)),
      retry_timer_(io) {}

logind_inhibitor::~logind_inhibitor() { drop_bus(); }

void logind_inhibitor::drop_bus() {
  // Slots go before the bus they belong to.
  prepare_match_.reset();
  owner_match_.reset();
  owner_call_.reset();
  inhibit_call_.reset();
  preparing_call_.reset();
  delay_call_.reset();
  state_call_.reset();
  reload_call_.reset();
  reread_call_.reset();
  inhibit_in_flight_ = false;
  if (bus_) bus_->close();
  bus_.reset();
  logind_owner_.clear();
}

void logind_inhibitor::start() { connect(); }

void logind_inhibitor::schedule(backoff& delays, std::function<void()> what,
                                const std::string& why) {
  auto delay = delays.next();
  log_.info(fmt::format("retrying in {}", format_duration(delay)), {{"what", why}});
  retry_timer_.expires_after(delay);
  retry_timer_.async_wait([what = std::move(what)](const boost::system::error_code& ec) {
    if (!ec) what();
  });
}

void logind_inhibitor::connect() {
  try {
    bus_ = bus_connection::open_system(io_, [this](std::string why) { bus_lost(std::move(why)); });
    subscribe();
  } catch (const std::system_error& e) {
    drop_bus();
    std::string error = e.what();
    status_.inhibitor_detail = error;
    publish_state();
    first_attempt(error);
    schedule(
        connect_backoff_, [this] { connect(); }, "connect to the system bus");
  }
}

void logind_inhibitor::bus_lost(std::string why) {
  // Calls in flight died with the connection.
  drop_bus();
  was_lost_ = true;
  // The old lock fd stays open: logind keeps honouring it across its own restart, and a stale fd
  // is never closed by number.
  status_.inhibitor_detail = "system bus lost: " + why;
  publish_state();
  events_.record(event_kind::BusLost, why, "lost the system bus; keeping the lock fd, reconnecting",
                 {{"lock_held", held() ? "true" : "false"}});
  if (handlers_.status_changed) handlers_.status_changed();
  connect_backoff_.reset();
  schedule(
      connect_backoff_, [this] { connect(); }, "connect to the system bus");
}

void logind_inhibitor::subscribe() {
  sd_bus* bus = bus_->get();
  sd_bus_slot* slot = nullptr;
  // The daemon filters by the name's current owner; on_prepare_for_shutdown checks it again.
  check_negative_errno(sd_bus_match_signal(bus, &slot, kLogind, kLogindPath, kLogindManager,
                                           "PrepareForShutdown", on_prepare_for_shutdown, this),
                       "subscribe to PrepareForShutdown");
  prepare_match_.reset(slot);
  std::string rule = fmt::format(
      "type='signal',sender='org.freedesktop.DBus',path='/org/freedesktop/DBus',"
      "interface='org.freedesktop.DBus',member='NameOwnerChanged',arg0='{}'",
      kLogind);
  check_negative_errno(sd_bus_add_match(bus, &slot, rule.c_str(), on_owner_changed, this),
                       "subscribe to logind's owner changes");
  owner_match_.reset(slot);

  sd_bus_message* raw = nullptr;
  check_negative_errno(
      sd_bus_message_new_method_call(bus, &raw, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                                     "org.freedesktop.DBus", "GetNameOwner"),
      "build GetNameOwner");
  message_ptr m(raw);
  check_negative_errno(sd_bus_message_append(m.get(), "s", kLogind), "build GetNameOwner");
  owner_call_ = call_async(
      *bus_, m.get(),
      [this](sd_bus_message* reply, const std::string& error) {
        if (was_lost_) {
          was_lost_ = false;
          connect_backoff_.reset();
          events_.record(event_kind::BusRestored, "reconnected", "the system bus is back");
        }
        const char* owner = nullptr;
        if (reply && sd_bus_message_read(reply, "s", &owner) >= 0 && owner) {
          logind_appeared(owner);
        } else {
          lock_failed("logind is not on the bus (" + error + ")");
          read_properties();
        }
      },
      kCallTimeoutUsec);
}

void logind_inhibitor::logind_appeared(const std::string& owner) {
  if (owner == logind_owner_ && (held() || inhibit_in_flight_)) return;
  bool restarted = !logind_owner_.empty() && logind_owner_ != owner;
  logind_owner_ = owner;
  if (restarted) log_.notice("logind restarted; taking a new lock", {{"owner", owner}});
  lock_backoff_.reset();
  retry_timer_.cancel();
  if (wanted_)
    take_lock();
  else
    read_properties();
}

void logind_inhibitor::take_lock() {
  if (!bus_ || inhibit_in_flight_ || !wanted_) return;
  try {
    send_inhibit();
  } catch (const std::system_error& e) {
    inhibit_in_flight_ = false;
    lock_failed(e.what());
  }
}

void logind_inhibitor::send_inhibit() {
  sd_bus_message* raw = nullptr;
  check_negative_errno(sd_bus_message_new_method_call(bus_->get(), &raw, kLogind, kLogindPath,
                                                      kLogindManager, "Inhibit"),
                       "build Inhibit");
  message_ptr m(raw);
  check_negative_errno(
      sd_bus_message_append(m.get(), "ssss", "shutdown", "shutdown-shim", why_.c_str(), "delay"),
      "build Inhibit");
  inhibit_in_flight_ = true;
  inhibit_call_ = call_async(
      *bus_, m.get(),
      [this](sd_bus_message* reply, const std::string& error) {
        inhibit_in_flight_ = false;
        int fd = -1;
        if (!reply) {
          lock_failed("Inhibit failed: " + error);
        } else if (int r = sd_bus_message_read(reply, "h", &fd); r < 0) {
          lock_failed(std::string("Inhibit reply: ") + std::strerror(-r));
        } else if (!wanted_) {
          // released while the call was in flight: drop the new lock with the reply
        } else {
          // The reply owns fd; our duplicate is close-on-exec so no child ever holds the lock.
          unique_fd dup(fcntl(fd, F_DUPFD_CLOEXEC, 3));
          if (!dup) {
            lock_failed(std::string("dup the lock fd: ") + std::strerror(errno));
          } else {
            bool replaced = held();
            // New lock first, then the old one goes: there is never a moment without one.
            lock_ = std::move(dup);
            lock_backoff_.reset();
            status_.inhibitor_detail.clear();
            publish_state();
            events_.record(event_kind::InhibitorTaken, replaced ? "re-taken" : "start",
                           "holding a logind delay lock on shutdown",
                           {{"fd", std::to_string(lock_.get())}});
            first_attempt({});
          }
        }
        read_properties();
      },
      kCallTimeoutUsec);
}

void logind_inhibitor::lock_failed(const std::string& error) {
  status_.inhibitor_detail = error;
  publish_state();
  log_.warning("could not take the logind delay lock", {{"error", error}});
  first_attempt(error);
  if (handlers_.status_changed) handlers_.status_changed();
  if (wanted_ && !logind_owner_.empty())
    schedule(
        lock_backoff_, [this] { take_lock(); }, "take the logind lock");
}

void logind_inhibitor::publish_state() {
  using state = shim_status::inhibitor_state;
  if (!first_done_) {
    status_.inhibitor = state::pending;
  } else if (held()) {
    status_.inhibitor = state::held;
  } else {
    status_.inhibitor = wanted_ ? state::retrying : state::released;
  }
}

void logind_inhibitor::first_attempt(const std::string& error) {
  if (first_done_) return;
  first_done_ = true;
  publish_state();
  if (handlers_.first_attempt_done) handlers_.first_attempt_done(error);
}

void logind_inhibitor::read_properties() {
  if (!bus_ || logind_owner_.empty()) return;
  try {
    send_property_reads();
  } catch (const std::system_error& e) {
    log_.warning("could not read logind's properties", {{"error", e.what()}});
  }
}

void logind_inhibitor::send_property_reads() {
  // No change signal is sent for PreparingForShutdown: a shutdown already under way is only seen
  // by asking.
  preparing_call_ = get_property_async(
      *bus_, kLogind, kLogindPath, kLogindManager, "PreparingForShutdown",
      [this](sd_bus_message* reply, const std::string& error) {
        int preparing = 0;
        if (!reply || sd_bus_message_read(reply, "v", "b", &preparing) < 0) {
          log_.warning("could not read PreparingForShutdown", {{"error", error}});
          return;
        }
        if (preparing && handlers_.prepare_for_shutdown) {
          handlers_.prepare_for_shutdown(true, "PreparingForShutdown=true when connecting");
        }
      },
      kCallTimeoutUsec);
  delay_call_ =
      send_delay_read([this](std::optional<std::uint64_t> usec, const std::string& error) {
        if (!usec) {
          log_.warning("could not read InhibitDelayMaxUSec", {{"error", error}});
          return;
        }
        if (auto warning = status_.logind_delay_warning()) {
          log_.warning(*warning, {{"InhibitDelayMaxUSec", std::to_string(*usec)}});
        }
        if (handlers_.inhibit_delay_read) handlers_.inhibit_delay_read(*usec);
      });
}

slot_ptr logind_inhibitor::send_delay_read(delay_handler done) {
  return get_property_async(
      *bus_, kLogind, kLogindPath, kLogindManager, "InhibitDelayMaxUSec",
      [this, done = std::move(done)](sd_bus_message* reply, const std::string& error) {
        std::uint64_t usec = 0;
        if (!reply || sd_bus_message_read(reply, "v", "t", &usec) < 0) {
          return done(std::nullopt, error.empty() ? "bad InhibitDelayMaxUSec reply" : error);
        }
        status_.logind_delay_max_usec = usec;
        if (handlers_.status_changed) handlers_.status_changed();
        done(usec, {});
      },
      kCallTimeoutUsec);
}

void logind_inhibitor::read_inhibit_delay(delay_handler done) {
  if (!bus_ || logind_owner_.empty()) return done(std::nullopt, "logind is not on the bus");
  try {
    reread_call_ = send_delay_read(done);
  } catch (const std::system_error& e) {
    done(std::nullopt, e.what());
  }
}

void logind_inhibitor::reload_logind(std::function<void(const std::string& error)> done) {
  if (!bus_) return done("not connected to the system bus");
  try {
    send_reload(done);
  } catch (const std::system_error& e) {
    done(e.what());
  }
}

void logind_inhibitor::send_reload(const std::function<void(const std::string&)>& done) {
  sd_bus_message* raw = nullptr;
  check_negative_errno(
      sd_bus_message_new_method_call(bus_->get(), &raw, "org.freedesktop.systemd1",
                                     "/org/freedesktop/systemd1",
                                     "org.freedesktop.systemd1.Manager", "KillUnit"),
      "build KillUnit");
  message_ptr m(raw);
  check_negative_errno(
      sd_bus_message_append(m.get(), "ssi", "systemd-logind.service", "all", SIGHUP),
      "build KillUnit");
  reload_call_ = call_async(
      *bus_, m.get(),
      [done](sd_bus_message* reply, const std::string& error) {
        done(reply ? std::string() : error.empty() ? std::string("no reply") : error);
      },
      kCallTimeoutUsec);
}

void logind_inhibitor::release(const std::string& cause) {
  wanted_ = false;
  retry_timer_.cancel();
  bool had = held();
  lock_.reset();
  status_.inhibitor_detail.clear();
  publish_state();
  events_.record(
      event_kind::InhibitorReleased, cause,
      had ? "closed the logind lock: the shutdown goes on" : "hold over (no lock was held)");
  if (handlers_.status_changed) handlers_.status_changed();
}

void logind_inhibitor::retake() {
  wanted_ = true;
  publish_state();
  if (held()) return;
  status_.inhibitor_detail = "taking the lock again";
  lock_backoff_.reset();
  take_lock();
}

void logind_inhibitor::query_system_state(
    std::function<void(std::optional<std::string>, const std::string&)> done) {
  if (!bus_) return done(std::nullopt, "not connected to the system bus");
  try {
    send_system_state_query(done);
  } catch (const std::system_error& e) {
    done(std::nullopt, e.what());
  }
}

void logind_inhibitor::send_system_state_query(
    const std::function<void(std::optional<std::string>, const std::string&)>& done) {
  state_call_ = get_property_async(
      *bus_, "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
      "org.freedesktop.systemd1.Manager", "SystemState",
      [done](sd_bus_message* reply, const std::string& error) {
        const char* state = nullptr;
        if (!reply || sd_bus_message_read(reply, "v", "s", &state) < 0 || !state) {
          return done(std::nullopt, error.empty() ? "bad SystemState reply" : error);
        }
        done(std::string(state), {});
      },
      kCallTimeoutUsec);
}

int logind_inhibitor::on_prepare_for_shutdown(sd_bus_message* m, void* userdata, sd_bus_error*) {
  auto* self = static_cast<logind_inhibitor*>(userdata);
  return self->bus_->guarded([self, m] { self->prepare_for_shutdown_signal(m); });
}

void logind_inhibitor::prepare_for_shutdown_signal(sd_bus_message* m) {
  const char* sender = sd_bus_message_get_sender(m);
  std::string from = sender ? sender : "(unknown)";
  if (logind_owner_.empty() || from != logind_owner_) {
    log_.warning("ignoring PrepareForShutdown not sent by logind", {{"sender", from}});
    return;
  }
  int active = 0;
  if (!sd_bus_message_has_signature(m, "b") || sd_bus_message_read(m, "b", &active) < 0) {
    log_.warning("ignoring PrepareForShutdown with a wrong signature",
                 {{"sender", from}, {"signature", sd_bus_message_get_signature(m, 1)}});
    return;
  }
  if (handlers_.prepare_for_shutdown) {
    handlers_.prepare_for_shutdown(active != 0, fmt::format("PrepareForShutdown({}) from {}",
                                                            active ? "true" : "false", from));
  }
}

int logind_inhibitor::on_owner_changed(sd_bus_message* m, void* userdata, sd_bus_error*) {
  auto* self = static_cast<logind_inhibitor*>(userdata);
  return self->bus_->guarded([self, m] {
    const char *name = nullptr, *old_owner = nullptr, *new_owner = nullptr;
    if (sd_bus_message_read(m, "sss", &name, &old_owner, &new_owner) < 0) return;
    if (!new_owner || !*new_owner) {
      self->log_.warning("logind left the bus; keeping the lock fd", {{"old_owner", old_owner}});
      return;
    }
    self->logind_appeared(new_owner);
  });
}

}  // namespace shim
