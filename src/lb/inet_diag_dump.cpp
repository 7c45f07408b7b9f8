#include "lb/inet_diag_dump.hpp"

#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <system_error>

namespace shim::inet_diag_dump {
namespace {

// sport >= port, then sport <= port; a failed test jumps 4 bytes past the end (rejects), as ss's
// programs do and inet_diag_bc_audit() accepts.
constexpr std::size_t kProgram = 4 * sizeof(inet_diag_bc_op);

template <typename T>
void put(std::vector<std::uint8_t>& out, const T& value) {
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(&value);
  out.insert(out.end(), bytes, bytes + sizeof(T));
}

template <typename T>
T get(std::span<const std::uint8_t> bytes) {
  T value{};
  std::memcpy(&value, bytes.data(), sizeof(T));
  return value;
}

// The family and the four-tuple, FNV-1a-hashed into one 64-bit key.
socket_entry entry_of(const inet_diag_msg& m) {
  std::uint64_t h = 14695981039346656037u;
  const auto hash = [&h](const void* field, std::size_t size) {
    const auto* bytes = static_cast<const std::uint8_t*>(field);
    for (std::size_t i = 0; i < size; ++i) h = (h ^ bytes[i]) * 1099511628211u;
  };
  hash(&m.idiag_family, sizeof(m.idiag_family));
  hash(&m.id.idiag_sport, sizeof(m.id.idiag_sport));
  hash(&m.id.idiag_dport, sizeof(m.id.idiag_dport));
  hash(m.id.idiag_src, sizeof(m.id.idiag_src));
  hash(m.id.idiag_dst, sizeof(m.id.idiag_dst));
  return {.key = h, .local_port = ntohs(m.id.idiag_sport)};
}

}  // namespace

std::vector<std::uint8_t> request(std::uint16_t port, std::uint32_t sequence) {
  const std::size_t attribute = NLA_HDRLEN + kProgram;
  const nlmsghdr header{
      .nlmsg_len = static_cast<__u32>(NLMSG_LENGTH(sizeof(inet_diag_req)) + NLA_ALIGN(attribute)),
      .nlmsg_type = TCPDIAG_GETSOCK,
      .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP,
      .nlmsg_seq = sequence,
      .nlmsg_pid = 0};
  // The dump ignores the family: inet_diag_dump_compat() asks for AF_UNSPEC.
  inet_diag_req req{};
  req.idiag_family = AF_INET;
  req.idiag_states = (1u << TCP_ESTABLISHED) | (1u << TCP_SYN_RECV);
  const nlattr bytecode{.nla_len = static_cast<__u16>(attribute),
                        .nla_type = INET_DIAG_REQ_BYTECODE};
  // yes: the next test; no: past the end. The port rides in the `no` of the op after each test.
  const std::array<inet_diag_bc_op, 4> program{{
      {.code = INET_DIAG_BC_S_GE,
       .yes = 2 * sizeof(inet_diag_bc_op),
       .no = static_cast<unsigned short>(kProgram + 4)},
      {.code = INET_DIAG_BC_NOP, .yes = 0, .no = port},
      {.code = INET_DIAG_BC_S_LE,
       .yes = 2 * sizeof(inet_diag_bc_op),
       .no = static_cast<unsigned short>(kProgram / 2 + 4)},
      {.code = INET_DIAG_BC_NOP, .yes = 0, .no = port},
  }};
  std::vector<std::uint8_t> out;
  out.reserve(header.nlmsg_len);
  put(out, header);
  out.resize(NLMSG_HDRLEN);
  put(out, req);
  out.resize(NLMSG_LENGTH(sizeof(inet_diag_req)));
  put(out, bytecode);
  put(out, program);
  out.resize(header.nlmsg_len);
  return out;
}

parsed read(std::span<const std::uint8_t> datagram, std::uint32_t sequence,
            const std::function<void(const socket_entry&)>& entry) {
  while (datagram.size() >= sizeof(nlmsghdr)) {
    const auto header = get<nlmsghdr>(datagram);
    if (header.nlmsg_len < sizeof(nlmsghdr) || header.nlmsg_len > datagram.size()) {
      return {.state = outcome::failed,
              .error = "sock_diag: a reply message overruns its datagram"};
    }
    const auto payload = datagram.subspan(NLMSG_HDRLEN, header.nlmsg_len - NLMSG_HDRLEN);
    if (header.nlmsg_seq == sequence) {
      // Both carry an int: NLMSG_ERROR's negative errno; NLMSG_DONE's 0, or the errno of a dump
      // that failed on the way.
      const bool done = header.nlmsg_type == NLMSG_DONE;
      const int status = payload.size() >= sizeof(int) ? get<int>(payload) : (done ? 0 : -EPROTO);
      if (done && status >= 0) return {.state = outcome::done};
      if (done || header.nlmsg_type == NLMSG_ERROR) {
        // The kernel's errnos are below 4096 (MAX_ERRNO); anything else (0 on an error, INT_MIN,
        // whose negation overflows) is a reply that makes no sense.
        const int error = status < 0 && status > -4096 ? -status : EPROTO;
        return {.state = outcome::failed,
                .error = std::system_error(error, std::generic_category(), "sock_diag").what()};
      }
      // The compat dump answers in the request's type; SOCK_DIAG_BY_FAMILY's alike.
      if (header.nlmsg_type == TCPDIAG_GETSOCK || header.nlmsg_type == SOCK_DIAG_BY_FAMILY) {
        if (payload.size() < sizeof(inet_diag_msg)) {
          return {.state = outcome::failed, .error = "sock_diag: a socket message is cut short"};
        }
        entry(entry_of(get<inet_diag_msg>(payload)));
      }
    }
    datagram =
        datagram.subspan(std::min<std::size_t>(NLMSG_ALIGN(header.nlmsg_len), datagram.size()));
  }
  return {.state = outcome::more};
}

}  // namespace shim::inet_diag_dump
