#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "util/result.hpp"

namespace shim {

// Counts new TCP connections to a local listening port (the target's: kube-apiserver's 6443) from
// the kernel's socket table: each sample dumps the ESTABLISHED and SYN_RECV sockets of that port
// (IPv4 and IPv6) over NETLINK_SOCK_DIAG, filtered in the kernel, and counts those not in the
// sample before. Needs no privilege; sees the sockets of its own network namespace only.
//
// It misses a connection opened and closed between two samples, and counts one whose four-tuple
// was reused between them as old. The netlink socket is non-blocking on the io_context: a sample
// never blocks the loop, and between samples nothing wakes (the lead's timer drives it).
class new_connection_sampler {
 public:
  struct counts {
    std::size_t open = 0;   // sockets of the port now
    std::size_t fresh = 0;  // of which not in the previous sample (all of them in the first)
    bool first = false;     // no previous sample: fresh is everything open
    // Stopped at max_sockets: open is that many, fresh 0, and the next sample is a first again
    // (a part of the table is not comparable with another part).
    bool truncated = false;
  };
  using handler = std::function<void(result<counts>)>;
  // What bounds a sample's cost: the dump is read up to this many sockets of the port, then
  // abandoned (some 95 ms of CPU at most: docs/benchmarks.md).
  static constexpr std::size_t kMaxSockets = 1 << 16;

  // Opens the netlink socket. Throws std::system_error (or Asio's system_error, registering it)
  // when it cannot.
  new_connection_sampler(boost::asio::io_context& io, std::uint16_t port,
                         std::size_t max_sockets = kMaxSockets);

  // One sample; done is called from the loop, never from inside this call. A sample asked for
  // while one runs fails at once (through done, later): one at a time. After a failed sample the
  // next opens a new netlink socket.
  void sample(handler done);

 private:
  // The sample under way. No default member initializers: clang 14 (the fuzz build) cannot
  // emplace a nested struct that has them.
  struct dump {
    handler done;
    std::vector<std::uint64_t> keys;
    bool truncated;
  };
  void open();
  void fail_later(handler done, result<counts> failure);
  void wait();
  void receive();
  void finish(result<counts> outcome);

  std::uint16_t port_;
  std::size_t max_sockets_;
  boost::asio::posix::stream_descriptor socket_;
  std::uint32_t sequence_ = 0;
  std::optional<dump> running_;
  std::vector<std::uint64_t> previous_;
  bool sampled_ = false;
  std::vector<std::uint8_t> buffer_;
};

}  // namespace shim
