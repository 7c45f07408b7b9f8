#include "bus_connection.hpp"

#include <poll.h>

#include <boost/asio/post.hpp>
#include <chrono>
#include <cstring>
#include <limits>

#include "errno_error.hpp"

namespace shim {

namespace asio = boost::asio;

std::shared_ptr<bus_connection> bus_connection::open_system(
    asio::io_context& io, std::function<void(std::string)> on_lost) {
  sd_bus* raw = nullptr;
  check_negative_errno(sd_bus_open_system(&raw), "connect to the system bus");
  bus_ptr bus(raw);
  // An exit-on-disconnect bus would raise SIGTERM in ourselves: the loss is ours to handle.
  check_negative_errno(sd_bus_set_exit_on_disconnect(bus.get(), 0), "configure the bus");
  auto connection =
      std::shared_ptr<bus_connection>(new bus_connection(io, std::move(bus), std::move(on_lost)));
  connection->kick();
  return connection;
}

bus_connection::bus_connection(asio::io_context& io, bus_ptr bus,
                               std::function<void(std::string)> on_lost)
    : io_(io), bus_(std::move(bus)), on_lost_(std::move(on_lost)), fd_(io), timer_(io) {}

bus_connection::~bus_connection() { close(); }

void bus_connection::close() {
  if (closed_) return;
  closed_ = true;
  ++generation_;
  timer_.cancel();
  // The fd belongs to sd-bus: take it back from Asio before sd-bus closes it.
  if (fd_.is_open()) fd_.release();
  bus_.reset();
}

void bus_connection::kick() {
  if (kicked_ || closed_) return;
  kicked_ = true;
  asio::post(io_, [self = shared_from_this()] {
    self->kicked_ = false;
    self->process();
  });
}

void bus_connection::process() {
  if (closed_) return;
  for (;;) {
    int r = sd_bus_process(bus_.get(), nullptr);
    if (deferred_) std::rethrow_exception(std::exchange(deferred_, nullptr));
    if (closed_) return;  // a callback closed us
    if (r < 0) return lost(std::string("processing the bus: ") + std::strerror(-r));
    if (r == 0) break;
  }
  if (sd_bus_is_open(bus_.get()) <= 0) return lost("the bus connection was closed");
  wait();
}

void bus_connection::wait() {
  const unsigned gen = ++generation_;
  timer_.cancel();
  if (fd_.is_open()) fd_.cancel();

  int fd = sd_bus_get_fd(bus_.get());
  int events = sd_bus_get_events(bus_.get());
  std::uint64_t timeout = std::numeric_limits<std::uint64_t>::max();
  int rt = sd_bus_get_timeout(bus_.get(), &timeout);
  if (fd < 0 || events < 0 || rt < 0) return lost("the bus connection is gone");

  if (!fd_.is_open() || fd_.native_handle() != fd) {
    if (fd_.is_open()) fd_.release();
    fd_.assign(fd);
  }

  auto wake = [self = shared_from_this(), gen](const boost::system::error_code& ec) {
    if (gen != self->generation_ || self->closed_) return;
    if (ec == asio::error::operation_aborted) return;
    self->process();
  };
  if (events & POLLIN) fd_.async_wait(asio::posix::descriptor_base::wait_read, wake);
  if (events & POLLOUT) fd_.async_wait(asio::posix::descriptor_base::wait_write, wake);
  if (timeout != std::numeric_limits<std::uint64_t>::max()) {
    // steady_clock is CLOCK_MONOTONIC, the clock of sd-bus's absolute timeout.
    timer_.expires_at(std::chrono::steady_clock::time_point(std::chrono::microseconds(timeout)));
    timer_.async_wait(wake);
  }
}

void bus_connection::lost(std::string why) {
  auto on_lost = on_lost_;
  close();
  if (on_lost) on_lost(std::move(why));
}

std::string bus_error_text(const sd_bus_error* error, int r) {
  if (error && sd_bus_error_is_set(error)) {
    return std::string(error->name) + ": " + (error->message ? error->message : "");
  }
  return std::strerror(r < 0 ? -r : r);
}

namespace {

struct pending_call {
  bus_connection& bus;  // the call's slot belongs to it, so it outlives the call
  reply_handler handler;
};

int on_reply(sd_bus_message* m, void* userdata, sd_bus_error*) {
  auto* call = static_cast<pending_call*>(userdata);
  return call->bus.guarded([call, m] {
    const sd_bus_error* error = sd_bus_message_get_error(m);
    if (error) {
      call->handler(nullptr, bus_error_text(error, sd_bus_message_get_errno(m)));
    } else {
      call->handler(m, {});
    }
  });
}

}  // namespace

slot_ptr call_async(bus_connection& bus, sd_bus_message* m, reply_handler handler,
                    std::uint64_t timeout_usec) {
  auto* call = new pending_call{bus, std::move(handler)};
  sd_bus_slot* slot = nullptr;
  int r = sd_bus_call_async(bus.get(), &slot, m, on_reply, call, timeout_usec);
  if (r < 0) {
    delete call;
    throw_errno(r, "send a bus call");
  }
  // The slot owns the pending call's state and frees it when the slot goes.
  sd_bus_slot_set_destroy_callback(
      slot, [](void* userdata) { delete static_cast<pending_call*>(userdata); });
  bus.kick();
  return slot_ptr(slot);
}

slot_ptr get_property_async(bus_connection& bus, const char* destination, const char* path,
                            const char* interface, const char* property, reply_handler handler,
                            std::uint64_t timeout_usec) {
  sd_bus_message* raw = nullptr;
  check_negative_errno(sd_bus_message_new_method_call(bus.get(), &raw, destination, path,
                                                      "org.freedesktop.DBus.Properties", "Get"),
                       "build a Properties.Get call");
  message_ptr m(raw);
  check_negative_errno(sd_bus_message_append(m.get(), "ss", interface, property),
                       "build a Properties.Get call");
  return call_async(bus, m.get(), std::move(handler), timeout_usec);
}

}  // namespace shim
