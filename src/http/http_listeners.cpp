#include "http/http_listeners.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <cerrno>
#include <chrono>
#include <system_error>
#include <utility>

#include "http/http_session.hpp"
#include "util/errno_error.hpp"

namespace shim {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
using local = asio::local::stream_protocol;

namespace {

// A pause after an accept error that eviction cannot cure: the listening socket stays readable, so
// retrying at once would spin.
constexpr std::chrono::milliseconds kAcceptBackoff{100};

// Whether a connection waits in the listen queue; never blocks.
template <typename Acceptor>
bool connection_pending(Acceptor& acceptor) {
  pollfd fd{acceptor.native_handle(), POLLIN, 0};
  return ::poll(&fd, 1, 0) == 1 && (fd.revents & POLLIN) != 0;
}

// The peer, from what accept() gave: a TCP peer's address and port.
http_peer peer_of(const http_session<tcp>::socket_type&, const tcp::endpoint& peer) {
  return tcp_peer{.address = peer.address(), .port = peer.port()};
}

// A Unix socket's peer: its credentials at connect(). Unknown (uid -1) if the kernel does not say.
http_peer peer_of(http_session<local>::socket_type& socket, const local::endpoint&) {
  ucred credentials{};
  socklen_t size = sizeof credentials;
  if (::getsockopt(socket.native_handle(), SOL_SOCKET, SO_PEERCRED, &credentials, &size) != 0) {
    return unix_peer{};
  }
  return unix_peer{.uid = credentials.uid, .pid = credentials.pid};
}

}  // namespace

template <typename Protocol>
void http_listeners<Protocol>::accept(std::shared_ptr<listener> l) {
  auto& acceptor = l->acceptor;
  acceptor.async_accept(
      io, l->peer,
      [self = this->shared_from_this(), l](beast::error_code ec,
                                           typename session_type::socket_type socket) mutable {
        self->on_accept(l, ec, std::move(socket));
      });
}

template <typename Protocol>
void http_listeners<Protocol>::on_accept(const std::shared_ptr<listener>& l, beast::error_code ec,
                                         typename session_type::socket_type socket) {
  if (connections->stopped() || !l->acceptor.is_open()) return;
  if (ec == asio::error::connection_aborted) return accept(l);  // that one client gave up
  if (ec) {
    // EMFILE although the cap keeps kReservedDescriptors free: something else took them. The fds
    // idle clients pin are the ones to give back, but only for a client that is actually waiting:
    // accept() reports EMFILE even when nobody is.
    const bool out_of_descriptors = ec == asio::error::no_descriptors || ec.value() == ENFILE;
    if (out_of_descriptors && !connections->empty() && connection_pending(l->acceptor)) {
      connections->close_oldest();
      return accept(l);
    }
    l->backoff.expires_after(kAcceptBackoff);
    l->backoff.async_wait([self = this->shared_from_this(), l](beast::error_code wait_ec) {
      if (!wait_ec && !self->connections->stopped()) self->accept(l);
    });
    return;
  }
  // Asio accepts without SOCK_CLOEXEC; a child started in wrapper mode must not inherit the socket.
  // There is only one thread, so nothing can fork between the accept and this.
  ::fcntl(socket.native_handle(), F_SETFD, FD_CLOEXEC);
  // Make room for the newcomer: a fresh probe must always be answered.
  const std::size_t cap = std::max<std::size_t>(connections->limits().max_connections, 1);
  while (connections->size() >= cap) connections->close_oldest();
  http_peer peer = peer_of(socket, l->peer);
  const bool admitted = !admits || admits(peer);
  auto session = std::make_shared<session_type>(connections, std::move(socket), std::move(peer));
  if (admitted) {
    session->start();
  } else {
    ++refused;
    session->start_refused(beast::http::status::forbidden);
  }
  accept(l);
}

template <typename Protocol>
void http_listeners<Protocol>::stop() {
  beast::error_code ignored;
  for (auto& l : listeners) {
    l->acceptor.close(ignored);
    l->backoff.cancel();
  }
  listeners.clear();
  endpoints.clear();
  connections->close_all();
}

void throw_listen_error(const beast::error_code& ec, const std::string& what) {
  if (ec.category() == boost::system::system_category() ||
      ec.category() == boost::system::generic_category()) {
    throw_errno(ec.value(), what);
  }
  throw std::system_error(std::error_code(ec), what);
}

template struct http_listeners<tcp>;
template struct http_listeners<local>;

}  // namespace shim
