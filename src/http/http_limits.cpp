#include "http/http_limits.hpp"

#include <algorithm>

namespace shim {

std::size_t connection_cap(std::uint64_t descriptor_limit) {
  if (descriptor_limit <= kReservedDescriptors) return 1;
  return static_cast<std::size_t>(
      std::min<std::uint64_t>(descriptor_limit - kReservedDescriptors, kMaxConnections));
}

}  // namespace shim
