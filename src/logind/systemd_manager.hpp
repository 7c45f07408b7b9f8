#pragma once

#include <boost/asio/io_context.hpp>
#include <functional>
#include <string>

#include "logind/bus_connection.hpp"
#include "util/result.hpp"

namespace shim {

// What the shim asks of PID 1's manager (org.freedesktop.systemd1) on the system bus: whether the
// system is stopping, and a reload of logind's configuration. Rides on bus_link's connection; a
// question asked while the bus is down gets its error from the loop, never at once.
class systemd_manager {
 public:
  explicit systemd_manager(boost::asio::io_context& io) : io_(io) {}
  systemd_manager(const systemd_manager&) = delete;
  systemd_manager& operator=(const systemd_manager&) = delete;

  // From bus_link.
  void connected(bus_connection& bus) { bus_ = &bus; }
  void lost();

  // The manager's SystemState: "running", "stopping", ...
  void system_state(std::function<void(result<std::string>)> done);
  // Makes logind re-read its configuration as systemctl and kubelet do:
  // KillUnit("systemd-logind.service", "all", SIGHUP).
  void reload_logind(std::function<void(result<>)> done);

 private:
  template <typename T>
  bool refuse_when_down(std::function<void(result<T>)>& done);

  boost::asio::io_context& io_;
  bus_connection* bus_ = nullptr;
  pending_call state_call_;
  pending_call reload_call_;
};

}  // namespace shim
