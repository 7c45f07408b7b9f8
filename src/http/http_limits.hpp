#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace shim {

// The most a request may take: request line and headers. No endpoint takes a body, so a request
// that announces one (Content-Length > 0, Transfer-Encoding) is refused from its header, and
// this bounds the whole request: body, chunk extensions and trailers are never read. Real probes
// are far below it: kubelet's httpGet (~120 bytes: Host, User-Agent kube-probe/1.x, Accept,
// Connection), HAProxy's httpchk (~50-200 bytes), a Prometheus scrape (~350 bytes of Accept,
// User-Agent and X-Prometheus-Scrape-Timeout-Seconds, ~1.5 KiB more with a service account bearer
// token). 4 KiB is twice the largest, and what one connection can make the shim hold.
inline constexpr std::size_t kMaxRequestBytes = 4 * 1024;

// Above this many connections memory, not descriptors, is the bound: each may hold
// kMaxRequestBytes. A node's probers (LBs, kubelet, Prometheus) need a few dozen.
inline constexpr std::size_t kMaxConnections = 512;

// Descriptors the shim keeps for itself besides its HTTP connections: stdio, epoll, Asio's eventfd,
// timerfd and signal pipe, the bus, the event log, pidfds (--target-name may match several), the
// listeners, the control socket and its connections (kMaxControlConnections), a wrapped child's,
// and one for accept() itself. An attach-mode shim holding its lock
// had 15 open, one probe connection included (FaultHttp's low-limit test); 64 leaves room.
inline constexpr std::size_t kReservedDescriptors = 64;

// The control socket's connections at most (control_server): root's CLI opens one per command, a
// watch loop or a curl by hand another; beyond it the least recently active one is closed.
inline constexpr std::size_t kMaxControlConnections = 8;

// How many connections the server keeps open under a descriptor limit (RLIMIT_NOFILE's soft
// value): the oldest idle one is closed to admit a new one beyond it, so accept() never runs out
// of descriptors and a fresh probe always gets through. The shim leaves its soft limit as it finds
// it rather than raising it to the hard one: the full cap needs kMaxConnections +
// kReservedDescriptors = 576, below the soft 1024 that systemd and container runtimes start
// processes with (the unit sets LimitNOFILE=576), and a raised soft limit would be inherited by a
// wrapped child, which may use select() and its 1024 bound. Asio's epoll has no such bound.
std::size_t connection_cap(std::uint64_t descriptor_limit);

struct http_limits {
  std::size_t max_request_bytes = kMaxRequestBytes;
  std::chrono::milliseconds read_timeout{10'000};
  // 0: connection_cap() of the process's RLIMIT_NOFILE when listen() is called.
  std::size_t max_connections = 0;
};

}  // namespace shim
