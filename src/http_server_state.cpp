#include "http_server_state.hpp"

#include <fcntl.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <utility>

#include "http_session.hpp"

namespace shim {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;

namespace {

// A pause after an accept error that eviction cannot cure: the listening socket stays readable, so
// retrying at once would spin.
constexpr std::chrono::milliseconds kAcceptBackoff{100};

// Whether a connection waits in the listen queue; never blocks.
bool connection_pending(tcp::acceptor& acceptor) {
  pollfd fd{acceptor.native_handle(), POLLIN, 0};
  return ::poll(&fd, 1, 0) == 1 && (fd.revents & POLLIN) != 0;
}

}  // namespace

void http_server_state::accept(std::shared_ptr<listener> l) {
  auto& acceptor = l->acceptor;
  acceptor.async_accept(io, [self = shared_from_this(), l = std::move(l)](
                                beast::error_code ec, http_session::socket_type socket) mutable {
    self->on_accept(l, ec, std::move(socket));
  });
}

void http_server_state::on_accept(const std::shared_ptr<listener>& l, beast::error_code ec,
                                  http_session::socket_type socket) {
  if (stopped || !l->acceptor.is_open()) return;
  if (ec == asio::error::connection_aborted) return accept(l);  // that one client gave up
  if (ec) {
    // EMFILE although the cap keeps kReservedDescriptors free: something else took them. The fds
    // idle clients pin are the ones to give back, but only for a client that is actually waiting:
    // accept() reports EMFILE even when nobody is.
    const bool out_of_descriptors = ec == asio::error::no_descriptors || ec.value() == ENFILE;
    if (out_of_descriptors && !sessions.empty() && connection_pending(l->acceptor)) {
      evict_oldest();
      return accept(l);
    }
    l->backoff.expires_after(kAcceptBackoff);
    l->backoff.async_wait([self = shared_from_this(), l](beast::error_code wait_ec) {
      if (!wait_ec && !self->stopped) self->accept(l);
    });
    return;
  }
  // Asio accepts without SOCK_CLOEXEC; a child started in wrapper mode must not inherit the socket.
  // There is only one thread, so nothing can fork between the accept and this.
  ::fcntl(socket.native_handle(), F_SETFD, FD_CLOEXEC);
  // Make room for the newcomer: a fresh probe must always be answered.
  while (sessions.size() >= std::max<std::size_t>(limits.max_connections, 1)) evict_oldest();
  std::make_shared<http_session>(shared_from_this(), std::move(socket))->start();
  accept(l);
}

void http_server_state::evict_oldest() {
  if (!sessions.empty()) sessions.front()->close();
}

void http_server_state::session_closed(std::list<http_session*>::iterator pos) {
  sessions.erase(pos);
  if (sessions.empty()) reset_timerfd();
}

// Asio (1.74's epoll_reactor) cancels a timer without disarming its timerfd, so the read deadline
// of the connection that has just closed would still wake the idle process once: scripts/bench's
// idle section saw that wake-up without this and none with it (docs/benchmarks.md). Scheduling a
// timer that is the earliest makes Asio re-arm the timerfd to its longest wait (5 minutes, which
// it keeps anyway).
void http_server_state::reset_timerfd() {
  timerfd_reset.expires_after(std::chrono::minutes(5));
  timerfd_reset.async_wait([](beast::error_code) {});
  timerfd_reset.cancel();
}

void http_server_state::stop() {
  stopped = true;
  beast::error_code ignored;
  for (auto& l : listeners) {
    l->acceptor.close(ignored);
    l->backoff.cancel();
  }
  listeners.clear();
  endpoints.clear();
  while (!sessions.empty()) sessions.front()->close();
}

}  // namespace shim
