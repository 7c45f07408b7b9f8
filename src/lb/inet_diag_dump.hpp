#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace shim {

// The NETLINK_SOCK_DIAG messages of one TCP socket dump (what `ss -tn sport = :6443` asks): the
// request, and the reading of the kernel's replies, which trusts no length beyond the bytes it
// was given. Pure: new_connection_sampler does the I/O.
namespace inet_diag_dump {

// A request for every TCP socket, IPv4 and IPv6, in state ESTABLISHED or SYN_RECV whose local
// port is `port`. The port is filtered in the kernel by an inet_diag bytecode program (sport >=
// port && sport <= port, which every kernel since 2.6 runs). It is the original TCPDIAG_GETSOCK
// request, which the kernel still serves (inet_diag_rcv_msg_compat()) and answers for both
// families in one walk of the TCP hash table, most of a sample's cost: SOCK_DIAG_BY_FAMILY would
// need one walk per family.
std::vector<std::uint8_t> request(std::uint16_t port, std::uint32_t sequence);

// One socket of the reply: its identity for telling a new connection from one seen before (the
// four-tuple, hashed: a SYN_RECV request socket and the established one it becomes differ in
// cookie and inode, not in tuple) and its local port, checked again here.
struct socket_entry {
  std::uint64_t key = 0;
  std::uint16_t local_port = 0;
};

enum class outcome {
  more,    // the dump goes on in the next datagram
  done,    // NLMSG_DONE: the dump is complete
  failed,  // NLMSG_ERROR, or a message that cannot be read: error says which
};

struct parsed {
  outcome state = outcome::more;
  std::string error = {};
};

// Reads one datagram of the reply to the request numbered `sequence`; each socket goes to entry.
// Messages of another sequence number are skipped.
parsed read(std::span<const std::uint8_t> datagram, std::uint32_t sequence,
            const std::function<void(const socket_entry&)>& entry);

}  // namespace inet_diag_dump
}  // namespace shim
