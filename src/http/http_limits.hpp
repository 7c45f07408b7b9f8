#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace shim {

// The most a request may take: request line and headers. No endpoint takes a body, so a request
// that announces one is refused from its header, and this bounds the whole request. Twice the
// largest real probe: kubelet's is ~120 bytes, a Prometheus scrape with a bearer token ~2 KiB.
inline constexpr std::size_t kMaxRequestBytes = 4 * 1024;

// Above this many connections memory, not descriptors, is the bound: each may hold
// kMaxRequestBytes. A node's probers (LBs, kubelet, Prometheus) need a few dozen.
inline constexpr std::size_t kMaxConnections = 512;

// Descriptors the shim keeps for itself besides its HTTP connections: stdio, epoll, Asio's own,
// the bus, the event log, pidfds, the listeners, the control socket and its connections, a
// wrapped child's, and one for accept() itself; 64 leaves room over what a shim uses.
inline constexpr std::size_t kReservedDescriptors = 64;

// The control socket's connections at most (control_server): root's CLI opens one per command, a
// watch loop or a curl by hand another; beyond it the least recently active one is closed.
inline constexpr std::size_t kMaxControlConnections = 8;

// How many connections the server keeps open under a descriptor limit (RLIMIT_NOFILE's soft
// value): the oldest idle one is closed to admit a new one beyond it, so accept() never runs out
// of descriptors. The soft limit is left as found, never raised: a wrapped child would inherit it,
// and may use select() and its 1024 bound (the unit sets LimitNOFILE=576, the full cap).
inline std::size_t connection_cap(std::uint64_t descriptor_limit) {
  if (descriptor_limit <= kReservedDescriptors) return 1;
  return static_cast<std::size_t>(
      std::min<std::uint64_t>(descriptor_limit - kReservedDescriptors, kMaxConnections));
}

struct http_limits {
  std::size_t max_request_bytes = kMaxRequestBytes;
  std::chrono::milliseconds read_timeout{10'000};
  // 0: connection_cap() of the process's RLIMIT_NOFILE when listen() is called.
  std::size_t max_connections = 0;
};

}  // namespace shim
