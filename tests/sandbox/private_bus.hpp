#pragma once

#include <systemd/sd-bus.h>

#include <chrono>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

namespace sandbox {

// A failed D-Bus call, with the error name kept apart so that tests can match on it.
class bus_error : public std::runtime_error {
 public:
  bus_error(std::string name, const std::string& what)
      : std::runtime_error(what), name_(std::move(name)) {}
  const std::string& name() const { return name_; }

 private:
  std::string name_;
};

struct message_unref {
  void operator()(sd_bus_message* m) const { sd_bus_message_unref(m); }
};
using message_ptr = std::unique_ptr<sd_bus_message, message_unref>;

struct slot_unref {
  void operator()(sd_bus_slot* s) const { sd_bus_slot_unref(s); }
};
using slot_ptr = std::unique_ptr<sd_bus_slot, slot_unref>;

// True for an address the harness may use: a unix socket path that is not the machine's system bus.
bool is_private_bus_address(std::string_view address);

// A client connection to a sandbox's private bus, opened the only way test code may open one:
// sd_bus_new + sd_bus_set_address + sd_bus_set_bus_client + sd_bus_start. The constructor throws
// std::logic_error for any address that is not private.
class private_bus {
 public:
  explicit private_bus(std::string address);
  ~private_bus();
  private_bus(const private_bus&) = delete;
  private_bus& operator=(const private_bus&) = delete;

  sd_bus* get() const { return bus_; }
  const std::string& address() const { return address_; }
  std::string unique_name() const;

  // sd_bus_call_method with a 25 s timeout; throws bus_error.
  template <typename... Args>
  message_ptr call(const char* destination, const char* path, const char* interface,
                   const char* member, const char* types, Args... args) {
    sd_bus_error error = SD_BUS_ERROR_NULL;
    sd_bus_message* reply = nullptr;
    const int r = sd_bus_call_method(bus_, destination, path, interface, member, &error, &reply,
                                     types, args...);
    if (r < 0) throw_call_error(destination, member, error, r);
    return message_ptr(reply);
  }

  template <typename T>
  T get_property(const char* destination, const char* path, const char* interface,
                 const char* property, char type) {
    T value{};
    sd_bus_error error = SD_BUS_ERROR_NULL;
    const int r = sd_bus_get_property_trivial(bus_, destination, path, interface, property, &error,
                                              type, &value);
    if (r < 0) throw_call_error(destination, property, error, r);
    return value;
  }
  std::string get_property_string(const char* destination, const char* path, const char* interface,
                                  const char* property);

  // The unique name owning name, or "" when nobody does.
  std::string name_owner(const std::string& name);

  // Dispatches incoming messages (match callbacks run from here) until done() holds or the
  // timeout passes. Returns done(). Waits on the connection's fd: no polling.
  bool process_until(const std::function<bool()>& done, std::chrono::milliseconds timeout);
  // Dispatches whatever is queued, without waiting.
  void process_pending();

  // Event-driven waits on NameOwnerChanged (checked against GetNameOwner first, so no race).
  bool wait_for_name(const std::string& name, std::chrono::milliseconds timeout);
  bool wait_for_name_gone(const std::string& name, std::chrono::milliseconds timeout);

  // Adds a signal match; the callback runs inside process_until / process_pending.
  slot_ptr add_match(const char* sender, const char* path, const char* interface,
                     const char* member, sd_bus_message_handler_t callback, void* userdata);

 private:
  [[noreturn]] static void throw_call_error(const char* destination, const char* member,
                                            sd_bus_error& error, int r);
  bool wait_for_owner_state(const std::string& name, bool owned, std::chrono::milliseconds timeout);

  std::string address_;
  sd_bus* bus_ = nullptr;
};

}  // namespace sandbox
