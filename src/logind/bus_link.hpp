#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "logind/bus_connection.hpp"
#include "util/backoff.hpp"

namespace shim {

// The shim's connection to the system bus, kept up for as long as the shim runs: when it cannot be
// opened, or is lost, it is opened again with capped backoff, whatever the shim is doing (a hold
// that ends while the bus is down must not end the reconnecting: seen in the faults suite).
class bus_link {
 public:
  struct handlers {
    // A new connection: subscribe and ask what is needed. Calls queued now go out once the Hello
    // is through.
    std::function<void(bus_connection& bus)> connected;
    // The connection is gone, and every call and match with it.
    std::function<void(const std::string& why)> lost;
    // Opening failed, or a connection was lost: the next try is in `retry_in`.
    std::function<void(const std::string& why, std::chrono::milliseconds retry_in)> retrying;
  };

  bus_link(boost::asio::io_context& io, handlers h);
  ~bus_link();
  bus_link(const bus_link&) = delete;
  bus_link& operator=(const bus_link&) = delete;

  // Opens the connection, and again after a failure or a loss (retry_later).
  void start();

 private:
  void on_lost(std::string why);
  void retry_later(const std::string& why);

  boost::asio::io_context& io_;
  handlers handlers_;
  std::shared_ptr<bus_connection> bus_;
  boost::asio::steady_timer retry_timer_;
  // Capped at 5 s: once the bus is back the lock follows within that, and a failed connect() every
  // few seconds costs nothing; a 30 s cap left the lock late in the faults suite.
  backoff backoff_{std::chrono::milliseconds(200), std::chrono::seconds(5)};
  std::chrono::steady_clock::time_point opened_at_;
};

}  // namespace shim
