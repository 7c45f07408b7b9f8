#include "daemon/signal_watch.hpp"

#include <signal.h>

#include <algorithm>
#include <iterator>
#include <utility>

namespace shim {
namespace {

// Signals whose default action would kill the shim, apart from the two that start the shutdown
// sequence and those that report its own faults. A wrapper passes these on to its child, as a
// container's init does.
constexpr int kPassedOn[] = {SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGPWR, SIGWINCH};
constexpr int kOwnSignals[] = {SIGXCPU, SIGXFSZ, SIGVTALRM, SIGPROF, SIGSYS};

}  // namespace

signal_watch::signal_watch(boost::asio::io_context& io, signal_events& on)
    : on_(on), triggers_(io), strays_(io) {}

void signal_watch::start(bool reap_orphans) {
  triggers_.add(SIGTERM);
  triggers_.add(SIGINT);
  wait_for_triggers();
  for (int s : kPassedOn) strays_.add(s);
  for (int s = SIGRTMIN; s <= SIGRTMAX; ++s) strays_.add(s);
  for (int s : kOwnSignals) strays_.add(s);
  if (reap_orphans) strays_.add(SIGCHLD);
  wait_for_strays();
  // Job control must never stop the shim mid-hold; a child gets the default back at exec.
  for (int s : {SIGTSTP, SIGTTIN, SIGTTOU}) ::signal(s, SIG_IGN);
}

void signal_watch::stop() {
  triggers_.cancel();
  strays_.cancel();
}

void signal_watch::wait_for_triggers() {
  triggers_.async_wait([this](const boost::system::error_code& ec, int signal) {
    if (ec) return;
    on_.trigger_signal(signal);
    wait_for_triggers();
  });
}

void signal_watch::wait_for_strays() {
  strays_.async_wait([this](const boost::system::error_code& ec, int signal) {
    if (ec) return;
    on_.stray_signal(signal,
                     std::count(std::begin(kOwnSignals), std::end(kOwnSignals), signal) > 0);
    wait_for_strays();
  });
}

}  // namespace shim
