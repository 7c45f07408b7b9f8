#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <vector>

#include "util/joined.hpp"

namespace shim {

// One --listen address.
struct listen_address {
  std::string host;  // literal IPv4 or IPv6 address, without brackets
  std::uint16_t port = 0;
  friend bool operator==(const listen_address&, const listen_address&) = default;
};

// "0.0.0.0:6080", "[::]:6080"; a list joined with commas.
inline std::string format_listen_address(const listen_address& address) {
  return address.host.find(':') == std::string::npos
             ? fmt::format("{}:{}", address.host, address.port)
             : fmt::format("[{}]:{}", address.host, address.port);
}

inline std::string format_listen_addresses(const std::vector<listen_address>& addresses) {
  return joined(addresses, ",", format_listen_address);
}

}  // namespace shim
