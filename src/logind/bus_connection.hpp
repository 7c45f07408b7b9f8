#pragma once

// The error convention of every edge of the daemon (see result.hpp): start-up steps throw
// std::system_error; on the loop, an operation's outcome reaches its handler once as a result<T>,
// never as an exception and never from inside the call that started it.

#include <systemd/sd-bus.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <exception>
#include <functional>
#include <memory>
#include <string>

#include "util/result.hpp"

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
  // Connects to the system bus named by DBUS_SYSTEM_BUS_ADDRESS (or the default); the error when
  // the socket cannot be reached. The Hello runs in the loop.
  static result<std::shared_ptr<bus_connection>> open_system(
      boost::asio::io_context& io, std::function<void(std::string)> on_lost);
  ~bus_connection();
  bus_connection(const bus_connection&) = delete;
  bus_connection& operator=(const bus_connection&) = delete;

  sd_bus* get() const { return bus_.get(); }
  boost::asio::io_context& io() const { return io_; }

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

// Where a method call goes.
struct bus_method {
  const char* destination;
  const char* path;
  const char* interface;
  const char* member;
};

// Appends a call's arguments; returns a negative errno when it cannot.
using bus_arguments = std::function<int(sd_bus_message*)>;

// The outcome of a method call: the reply (valid only during the handler), or the error (a D-Bus
// error name and message, or errno text).
using reply_handler = std::function<void(result<sd_bus_message*>)>;

// A method call in flight. Destroying it (or reset()) cancels the call: its handler is not called.
class pending_call {
 public:
  pending_call() = default;
  void reset();
  bool in_flight() const;

 private:
  friend pending_call call_method(bus_connection&, const bus_method&, const bus_arguments&,
                                  reply_handler, std::uint64_t);
  slot_ptr slot_;
  std::shared_ptr<reply_handler> failed_;  // a failure to send, on its way through the loop
};

// How long a call may wait for its reply.
inline constexpr std::uint64_t kCallTimeoutUsec = 5'000'000;

// Builds and sends a method call; `done` gets the reply or the error, always from the loop (see
// result.hpp), never as an exception.
pending_call call_method(bus_connection& bus, const bus_method& method,
                         const bus_arguments& arguments, reply_handler done,
                         std::uint64_t timeout_usec = kCallTimeoutUsec);

// org.freedesktop.DBus.Properties.Get of one property.
pending_call get_property(bus_connection& bus, const char* destination, const char* path,
                          const char* interface, const char* property, reply_handler done);

// Subscribes to the signals that match `rule` without waiting for the bus driver's answer (a
// failure to install the match closes the connection, which its owner sees as lost). nullptr when
// the match cannot even be queued; the connection is no good then either.
slot_ptr add_match(bus_connection& bus, const std::string& rule,
                   std::function<void(sd_bus_message*)> on_signal);

}  // namespace shim
