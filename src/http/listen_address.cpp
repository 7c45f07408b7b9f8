#include "http/listen_address.hpp"

#include <fmt/format.h>

namespace shim {

std::string format_listen_address(const listen_address& address) {
  return address.host.find(':') == std::string::npos
             ? fmt::format("{}:{}", address.host, address.port)
             : fmt::format("[{}]:{}", address.host, address.port);
}

std::string format_listen_addresses(const std::vector<listen_address>& addresses) {
  std::string out;
  for (const auto& a : addresses) {
    if (!out.empty()) out += ",";
    out += format_listen_address(a);
  }
  return out;
}

}  // namespace shim
