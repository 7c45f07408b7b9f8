#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shim {

// One --listen address.
struct listen_address {
  std::string host;  // literal IPv4 or IPv6 address, without brackets
  std::uint16_t port = 0;
  friend bool operator==(const listen_address&, const listen_address&) = default;
};

// "0.0.0.0:6080", "[::]:6080"; a list joined with commas.
std::string format_listen_address(const listen_address& address);
std::string format_listen_addresses(const std::vector<listen_address>& addresses);

}  // namespace shim
