#pragma once

#include <systemd/sd-bus.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <exception>
#include <functional>
#include <memory>
#include <string>

namespace shim {

struct bus_deleter {
  void operator()(sd_bus* bus) const { sd_bus_close_unref(bus); }
};
struct slot_deleter {
  void operator()(sd_bus_slot* slot) const { sd_bus_slot_unref(slot); }
};
struct message_deleter {
  void operator()(sd_bus_message* m) const { sd_bus_message_unref(m); }
};
using bus_ptr = std::unique_ptr<sd_bus, bus_deleter>;
using slot_ptr = std::unique_ptr<sd_bus_slot, slot_deleter>;
using message_ptr = std::unique_ptr<sd_bus_message, message_deleter>;

// One sd-bus connection driven by the io_context. Before every wait it re-reads the fd, the events
// and the (absolute CLOCK_MONOTONIC) timeout from sd-bus; when woken it runs sd_bus_process until
// it returns 0. It never reads the fd itself.
//
// Owned through shared_ptr: pending waits keep it alive until they complete.
class bus_connection : public std::enable_shared_from_this<bus_connection> {
 public:
  // Connects to the system bus named by DBUS_SYSTEM_BUS_ADDRESS (or the default). The Hello runs in
  // the loop. Throws std::system_error when the socket cannot be reached.
  static std::shared_ptr<bus_connection> open_system(boost::asio::io_context& io,
                                                     std::function<void(std::string)> on_lost);
  ~bus_connection();
  bus_connection(const bus_connection&) = delete;
  bus_connection& operator=(const bus_connection&) = delete;

  sd_bus* get() const { return bus_.get(); }

  // Call after queueing messages from outside an sd-bus callback, so that the next wait includes
  // the write. Coalesced: one processing round however often it is called.
  void kick();

  // Stops waiting and closes the connection; on_lost is not called.
  void close();

  // sd-bus calls back through C frames, which no exception may cross: a callback keeps what it
  // throws here, and it is rethrown once sd_bus_process has returned.
  template <class F>
  int guarded(F&& callback) noexcept {
    try {
      callback();
    } catch (...) {
      if (!deferred_) deferred_ = std::current_exception();
    }
    return 0;
  }

 private:
  bus_connection(boost::asio::io_context& io, bus_ptr bus,
                 std::function<void(std::string)> on_lost);
  void process();
  void wait();
  void lost(std::string why);

  boost::asio::io_context& io_;
  bus_ptr bus_;
  std::function<void(std::string)> on_lost_;
  boost::asio::posix::stream_descriptor fd_;
  boost::asio::steady_timer timer_;
  unsigned generation_ = 0;  // waits from an earlier round are stale
  bool kicked_ = false;
  bool closed_ = false;
  std::exception_ptr deferred_;
};

// A method call on the bus, its reply handled in the loop. The handler gets the reply, or the error
// (a D-Bus error name and message, or errno text) and a null message.
using reply_handler = std::function<void(sd_bus_message* reply, const std::string& error)>;

// Sends m and calls handler with the outcome; the slot returned cancels it when destroyed.
slot_ptr call_async(bus_connection& bus, sd_bus_message* m, reply_handler handler,
                    std::uint64_t timeout_usec);

// org.freedesktop.DBus.Properties.Get, asynchronously.
slot_ptr get_property_async(bus_connection& bus, const char* destination, const char* path,
                            const char* interface, const char* property, reply_handler handler,
                            std::uint64_t timeout_usec);

// Text of an sd_bus_error or a negative errno, for logs.
std::string bus_error_text(const sd_bus_error* error, int r);

}  // namespace shim
