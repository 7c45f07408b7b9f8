#include "private_bus.hpp"

#include <fmt/core.h>

#include <cstring>

namespace sandbox {

bool is_private_bus_address(std::string_view address) {
  constexpr std::string_view prefix = "unix:path=";
  if (!address.starts_with(prefix)) return false;
  if (address.find(';') != std::string_view::npos) return false;  // one address, no fallbacks
  const std::string_view path = address.substr(prefix.size(), address.find(',') - prefix.size());
  // The machine's own bus, under either spelling of its path.
  return !path.empty() && path.front() == '/' &&
         path.find("/run/dbus/system_bus_socket") == std::string_view::npos;
}

private_bus::private_bus(std::string address) : address_(std::move(address)) {
  if (!is_private_bus_address(address_)) {
    throw std::logic_error(
        fmt::format("refusing to connect to '{}': not a private sandbox bus", address_));
  }
  int r = sd_bus_new(&bus_);
  if (r < 0) throw std::runtime_error(fmt::format("sd_bus_new: {}", std::strerror(-r)));
  r = sd_bus_set_address(bus_, address_.c_str());
  if (r >= 0) r = sd_bus_set_bus_client(bus_, 1);
  if (r >= 0) r = sd_bus_start(bus_);
  if (r < 0) {
    sd_bus_unref(bus_);
    bus_ = nullptr;
    throw std::runtime_error(
        fmt::format("cannot connect to private bus {}: {}", address_, std::strerror(-r)));
  }
}

private_bus::~private_bus() {
  if (bus_) sd_bus_flush_close_unref(bus_);
}

std::string private_bus::unique_name() const {
  const char* name = nullptr;
  if (sd_bus_get_unique_name(bus_, &name) < 0 || !name) return {};
  return name;
}

void private_bus::throw_call_error(const char* destination, const char* member, sd_bus_error& error,
                                   int r) {
  std::string name = error.name ? error.name : "";
  std::string message = error.message ? error.message : std::strerror(-r);
  sd_bus_error_free(&error);
  throw bus_error(name, fmt::format("{}.{}: {}{}{}", destination ? destination : "?", member, name,
                                    name.empty() ? "" : ": ", message));
}

std::string private_bus::get_property_string(const char* destination, const char* path,
                                             const char* interface, const char* property) {
  sd_bus_error error = SD_BUS_ERROR_NULL;
  char* value = nullptr;
  const int r =
      sd_bus_get_property_string(bus_, destination, path, interface, property, &error, &value);
  if (r < 0) throw_call_error(destination, property, error, r);
  std::string result(value ? value : "");
  std::free(value);
  return result;
}

std::string private_bus::name_owner(const std::string& name) {
  sd_bus_error error = SD_BUS_ERROR_NULL;
  sd_bus_message* reply = nullptr;
  const int r =
      sd_bus_call_method(bus_, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                         "org.freedesktop.DBus", "GetNameOwner", &error, &reply, "s", name.c_str());
  sd_bus_error_free(&error);
  if (r < 0) return {};
  message_ptr owned(reply);
  const char* owner = nullptr;
  if (sd_bus_message_read(reply, "s", &owner) < 0 || !owner) return {};
  return owner;
}

void private_bus::process_pending() {
  while (sd_bus_process(bus_, nullptr) > 0) {
  }
}

bool private_bus::process_until(const std::function<bool()>& done,
                                std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int r;
    while ((r = sd_bus_process(bus_, nullptr)) > 0) {
      if (done()) return true;
    }
    if (done()) return true;
    if (r < 0) return false;  // disconnected
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return done();
    sd_bus_wait(bus_, static_cast<std::uint64_t>(left.count()));
  }
}

slot_ptr private_bus::add_match(const char* sender, const char* path, const char* interface,
                                const char* member, sd_bus_message_handler_t callback,
                                void* userdata) {
  sd_bus_slot* slot = nullptr;
  const int r =
      sd_bus_match_signal(bus_, &slot, sender, path, interface, member, callback, userdata);
  if (r < 0) {
    throw std::runtime_error(
        fmt::format("adding match for {}.{}: {}", interface, member, std::strerror(-r)));
  }
  return slot_ptr(slot);
}

bool private_bus::wait_for_owner_state(const std::string& name, bool owned,
                                       std::chrono::milliseconds timeout) {
  struct state {
    bool changed = false;
  } st;
  // Match first, then ask: a change between the two is not lost.
  sd_bus_slot* slot = nullptr;
  int r = sd_bus_match_signal(
      bus_, &slot, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
      "NameOwnerChanged",
      [](sd_bus_message* m, void* userdata, sd_bus_error*) -> int {
        const char *n = nullptr, *old_owner = nullptr, *new_owner = nullptr;
        if (sd_bus_message_read(m, "sss", &n, &old_owner, &new_owner) >= 0) {
          static_cast<state*>(userdata)->changed = true;
        }
        return 0;
      },
      &st);
  if (r < 0) return false;
  slot_ptr guard(slot);
  auto satisfied = [&] { return name_owner(name).empty() != owned; };
  if (satisfied()) return true;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    st.changed = false;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return satisfied();
    process_until([&] { return st.changed; }, left);
    if (satisfied()) return true;
  }
}

bool private_bus::wait_for_name(const std::string& name, std::chrono::milliseconds timeout) {
  return wait_for_owner_state(name, true, timeout);
}

bool private_bus::wait_for_name_gone(const std::string& name, std::chrono::milliseconds timeout) {
  return wait_for_owner_state(name, false, timeout);
}

}  // namespace sandbox
