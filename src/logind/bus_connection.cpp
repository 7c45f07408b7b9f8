#include "logind/bus_connection.hpp"

#include <fmt/format.h>
#include <poll.h>

#include <boost/asio/post.hpp>
#include <chrono>
#include <cstring>
#include <limits>

namespace shim {

namespace asio = boost::asio;

result<std::shared_ptr<bus_connection>> bus_connection::open_system(
    asio::io_context& io, std::function<void(std::string)> on_lost) {
  using opened = result<std::shared_ptr<bus_connection>>;
  sd_bus* raw = nullptr;
  if (const int r = sd_bus_open_system(&raw); r < 0) {
    return opened::errno_failure(r, "connect to the system bus");
  }
  bus_ptr bus(raw);
  // An exit-on-disconnect bus would raise SIGTERM in ourselves: the loss is ours to handle.
  if (const int r = sd_bus_set_exit_on_disconnect(bus.get(), 0); r < 0) {
    return opened::errno_failure(r, "configure the bus");
  }
  auto connection =
      std::shared_ptr<bus_connection>(new bus_connection(io, std::move(bus), std::move(on_lost)));
  connection->kick();
  return opened::success(std::move(connection));
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

namespace {

// Text of an sd_bus_error or a negative errno, for logs.
std::string bus_error_text(const sd_bus_error* error, int r) {
  if (error && sd_bus_error_is_set(error)) {
    return std::string(error->name) + ": " + (error->message ? error->message : "");
  }
  return std::strerror(r < 0 ? -r : r);
}

struct pending_reply {
  bus_connection& bus;  // the call's slot belongs to it, so it outlives the call
  reply_handler done;
};

int on_reply(sd_bus_message* m, void* userdata, sd_bus_error*) {
  auto* call = static_cast<pending_reply*>(userdata);
  return call->bus.guarded([call, m] {
    if (const sd_bus_error* error = sd_bus_message_get_error(m)) {
      call->done(
          result<sd_bus_message*>::failure(bus_error_text(error, sd_bus_message_get_errno(m)),
                                           std::abs(sd_bus_message_get_errno(m))));
    } else {
      call->done(result<sd_bus_message*>::success(m));
    }
  });
}

struct signal_match {
  bus_connection& bus;
  std::function<void(sd_bus_message*)> on_signal;
};

int on_match(sd_bus_message* m, void* userdata, sd_bus_error*) {
  auto* match = static_cast<signal_match*>(userdata);
  return match->bus.guarded([match, m] { match->on_signal(m); });
}

}  // namespace

void pending_call::reset() {
  slot_.reset();
  failed_.reset();
}

bool pending_call::in_flight() const { return slot_ || failed_; }

pending_call call_method(bus_connection& bus, const bus_method& method,
                         const bus_arguments& arguments, reply_handler done,
                         std::uint64_t timeout_usec) {
  pending_call call;
  sd_bus_message* raw = nullptr;
  int r = sd_bus_message_new_method_call(bus.get(), &raw, method.destination, method.path,
                                         method.interface, method.member);
  message_ptr m(raw);
  if (r >= 0 && arguments) r = arguments(m.get());
  sd_bus_slot* slot = nullptr;
  std::unique_ptr<pending_reply> pending(new pending_reply{bus, std::move(done)});
  if (r >= 0) {
    r = sd_bus_call_async(bus.get(), &slot, m.get(), on_reply, pending.get(), timeout_usec);
  }
  if (r >= 0) {
    // The slot owns the pending reply and frees it when the slot goes.
    pending.release();
    sd_bus_slot_set_destroy_callback(
        slot, [](void* userdata) { delete static_cast<pending_reply*>(userdata); });
    call.slot_.reset(slot);
    bus.kick();
    return call;
  }
  // From the loop, and only while the caller still holds the call.
  call.failed_ = std::make_shared<reply_handler>(std::move(pending->done));
  std::weak_ptr<reply_handler> failed = call.failed_;
  const std::string error =
      fmt::format("cannot send {}.{}: {}", method.interface, method.member, std::strerror(-r));
  asio::post(bus.io(), [failed, error] {
    if (auto handler = failed.lock()) {
      const reply_handler run = std::move(*handler);
      *handler = nullptr;
      if (run) run(result<sd_bus_message*>::failure(error));
    }
  });
  return call;
}

pending_call get_property(bus_connection& bus, const char* destination, const char* path,
                          const char* interface, const char* property, reply_handler done) {
  return call_method(
      bus, {destination, path, "org.freedesktop.DBus.Properties", "Get"},
      [interface, property](sd_bus_message* m) {
        return sd_bus_message_append(m, "ss", interface, property);
      },
      std::move(done));
}

slot_ptr add_match(bus_connection& bus, const std::string& rule,
                   std::function<void(sd_bus_message*)> on_signal) {
  std::unique_ptr<signal_match> match(new signal_match{bus, std::move(on_signal)});
  sd_bus_slot* slot = nullptr;
  // Asynchronous: sd_bus_add_match() would block the loop until the bus driver answers.
  if (sd_bus_add_match_async(bus.get(), &slot, rule.c_str(), on_match, nullptr, match.get()) < 0) {
    return nullptr;
  }
  match.release();  // the slot's now
  sd_bus_slot_set_destroy_callback(
      slot, [](void* userdata) { delete static_cast<signal_match*>(userdata); });
  bus.kick();
  return slot_ptr(slot);
}

}  // namespace shim
