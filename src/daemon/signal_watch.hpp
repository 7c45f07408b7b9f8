#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include "daemon/signal_events.hpp"

namespace shim {

// The shim's own signals, on the loop: SIGTERM and SIGINT start the shutdown sequence; every other
// signal whose default action would kill or stop the shim is caught, so that none of them can cut
// a hold short (logrotate's `kill -HUP` or a stray SIGUSR1 once did: faults suite). Those that
// report the shim's own faults (SIGSEGV and the like) still kill it.
class signal_watch {
 public:
  signal_watch(boost::asio::io_context& io, signal_events& on);

  // reap_orphans: SIGCHLD is caught too (a wrapper that is PID 1, a container's init).
  void start(bool reap_orphans);
  void stop();

 private:
  void wait_for_triggers();
  void wait_for_strays();

  signal_events& on_;
  boost::asio::signal_set triggers_;
  boost::asio::signal_set strays_;
};

}  // namespace shim
