#pragma once

#include <sys/types.h>

#include <boost/asio/ip/address.hpp>
#include <cstdint>
#include <variant>

namespace shim {

// Who is at the other end of a connection, as the kernel reported it when the connection was
// accepted: read once per connection, never per request.
struct tcp_peer {
  boost::asio::ip::address address;  // from accept() itself: no getpeername() per connection
  std::uint16_t port = 0;
};

// SO_PEERCRED: the credentials the peer had when it called connect().
struct unix_peer {
  uid_t uid = static_cast<uid_t>(-1);
  pid_t pid = 0;
};

using http_peer = std::variant<tcp_peer, unix_peer>;

}  // namespace shim
