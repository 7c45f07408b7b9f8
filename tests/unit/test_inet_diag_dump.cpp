// The sock_diag request and the bounded reading of the kernel's replies, on crafted datagrams.
#include <gtest/gtest.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <vector>

#include "lb/inet_diag_dump.hpp"

namespace shim {
namespace {

using bytes = std::vector<std::uint8_t>;

template <typename T>
void append(bytes& out, const T& value, std::size_t size = sizeof(T)) {
  const auto* p = reinterpret_cast<const std::uint8_t*>(&value);
  out.insert(out.end(), p, p + size);
}

// One netlink message: header and payload, padded to NLMSG_ALIGN.
template <typename T>
void message(bytes& out, std::uint16_t type, std::uint32_t seq, const T& payload,
             std::size_t payload_size = sizeof(T)) {
  const nlmsghdr h{.nlmsg_len = static_cast<__u32>(NLMSG_LENGTH(payload_size)),
                   .nlmsg_type = type,
                   .nlmsg_flags = NLM_F_MULTI,
                   .nlmsg_seq = seq,
                   .nlmsg_pid = 0};
  append(out, h);
  append(out, payload, payload_size);
  out.resize(NLMSG_ALIGN(out.size()));
}

inet_diag_msg socket_message(std::uint16_t sport, std::uint16_t dport, std::uint8_t last_octet) {
  inet_diag_msg m{};
  m.idiag_family = AF_INET;
  m.idiag_state = TCP_ESTABLISHED;
  m.id.idiag_sport = htons(sport);
  m.id.idiag_dport = htons(dport);
  m.id.idiag_src[0] = htonl(0x7f000001);
  m.id.idiag_dst[0] = htonl(0x7f000000u | last_octet);
  return m;
}

struct collected {
  std::vector<inet_diag_dump::socket_entry> entries;
  inet_diag_dump::parsed result;
};

collected read_all(const bytes& datagram, std::uint32_t seq) {
  collected c;
  c.result = inet_diag_dump::read(
      datagram, seq, [&](const inet_diag_dump::socket_entry& e) { c.entries.push_back(e); });
  return c;
}

TEST(InetDiagDump, RequestAsksForOnePortsEstablishedAndSynRecvSockets) {
  const auto r = inet_diag_dump::request(6443, 7);
  nlmsghdr h{};
  ASSERT_GE(r.size(), sizeof(h));
  std::memcpy(&h, r.data(), sizeof(h));
  EXPECT_EQ(h.nlmsg_len, r.size());
  EXPECT_EQ(h.nlmsg_type, TCPDIAG_GETSOCK) << "one walk of the hash table for both families";
  EXPECT_EQ(h.nlmsg_flags, NLM_F_REQUEST | NLM_F_DUMP);
  EXPECT_EQ(h.nlmsg_seq, 7u);
  inet_diag_req req{};
  std::memcpy(&req, r.data() + NLMSG_HDRLEN, sizeof(req));
  EXPECT_EQ(req.idiag_states, (1u << TCP_ESTABLISHED) | (1u << TCP_SYN_RECV));
  nlattr a{};
  const std::size_t at = NLMSG_LENGTH(sizeof(req));
  std::memcpy(&a, r.data() + at, sizeof(a));
  EXPECT_EQ(a.nla_type, INET_DIAG_REQ_BYTECODE);
  ASSERT_EQ(a.nla_len, NLA_HDRLEN + 4 * sizeof(inet_diag_bc_op));
  inet_diag_bc_op ops[4];
  std::memcpy(ops, r.data() + at + NLA_HDRLEN, sizeof(ops));
  EXPECT_EQ(ops[0].code, INET_DIAG_BC_S_GE);
  EXPECT_EQ(ops[0].yes, 8);
  EXPECT_EQ(ops[0].no, 20) << "rejects: 4 bytes past the program's end";
  EXPECT_EQ(ops[1].no, 6443);
  EXPECT_EQ(ops[2].code, INET_DIAG_BC_S_LE);
  EXPECT_EQ(ops[2].yes, 8);
  EXPECT_EQ(ops[2].no, 12);
  EXPECT_EQ(ops[3].no, 6443);
}

TEST(InetDiagDump, ReadsSocketsUntilDone) {
  bytes d;
  message(d, TCPDIAG_GETSOCK, 5, socket_message(6443, 40000, 2));
  message(d, TCPDIAG_GETSOCK, 4, socket_message(6443, 40001, 2));  // an older dump's
  message(d, SOCK_DIAG_BY_FAMILY, 5, socket_message(6443, 40002, 2));
  auto c = read_all(d, 5);
  EXPECT_EQ(c.result.state, inet_diag_dump::outcome::more);
  ASSERT_EQ(c.entries.size(), 2u);
  EXPECT_EQ(c.entries[0].local_port, 6443);
  EXPECT_NE(c.entries[0].key, c.entries[1].key);
  int zero = 0;
  message(d, NLMSG_DONE, 5, zero);
  c = read_all(d, 5);
  EXPECT_EQ(c.result.state, inet_diag_dump::outcome::done);
  EXPECT_EQ(c.entries.size(), 2u);
}

TEST(InetDiagDump, TheSameTupleIsTheSameKey) {
  bytes a, b, other;
  message(a, SOCK_DIAG_BY_FAMILY, 1, socket_message(6443, 40000, 2));
  auto syn_recv = socket_message(6443, 40000, 2);
  syn_recv.idiag_state = TCP_SYN_RECV;
  syn_recv.id.idiag_cookie[0] = 99;  // a request socket: another cookie, the same tuple
  message(b, SOCK_DIAG_BY_FAMILY, 1, syn_recv);
  message(other, SOCK_DIAG_BY_FAMILY, 1, socket_message(6443, 40000, 3));
  EXPECT_EQ(read_all(a, 1).entries.at(0).key, read_all(b, 1).entries.at(0).key);
  EXPECT_NE(read_all(a, 1).entries.at(0).key, read_all(other, 1).entries.at(0).key);
}

TEST(InetDiagDump, AnErrorIsAFailureWithItsErrno) {
  bytes d;
  nlmsgerr e{};
  e.error = -EBUSY;
  message(d, NLMSG_ERROR, 3, e);
  const auto c = read_all(d, 3);
  EXPECT_EQ(c.result.state, inet_diag_dump::outcome::failed);
  EXPECT_EQ(c.result.error, "sock_diag: Device or resource busy");
  bytes failed_done;
  const int enomem = -ENOMEM;
  message(failed_done, NLMSG_DONE, 3, enomem);
  EXPECT_EQ(read_all(failed_done, 3).result.state, inet_diag_dump::outcome::failed);
}

TEST(InetDiagDump, AnErrnoOutOfRangeIsAProtocolError) {
  // Found by fuzz-sock_diag_reply (corpus/sock_diag_reply/error-int-min): -INT_MIN overflowed.
  bytes d;
  nlmsgerr e{};
  e.error = std::numeric_limits<int>::min();
  message(d, NLMSG_ERROR, 3, e);
  EXPECT_EQ(read_all(d, 3).result.error, "sock_diag: Protocol error");
  bytes positive;
  e.error = 5;
  message(positive, NLMSG_ERROR, 3, e);
  EXPECT_EQ(read_all(positive, 3).result.error, "sock_diag: Protocol error");
}

TEST(InetDiagDump, NoLengthIsTrustedBeyondTheDatagram) {
  bytes d;
  message(d, SOCK_DIAG_BY_FAMILY, 1, socket_message(6443, 40000, 2));
  // The length says more than there is.
  bytes overrun = d;
  const __u32 too_long = static_cast<__u32>(d.size() + 64);
  std::memcpy(overrun.data(), &too_long, sizeof(too_long));
  auto c = read_all(overrun, 1);
  EXPECT_EQ(c.result.state, inet_diag_dump::outcome::failed);
  EXPECT_TRUE(c.entries.empty());
  // Shorter than a header.
  bytes tiny = d;
  const __u32 three = 3;
  std::memcpy(tiny.data(), &three, sizeof(three));
  EXPECT_EQ(read_all(tiny, 1).result.state, inet_diag_dump::outcome::failed);
  // A socket message cut short: a header and half an inet_diag_msg.
  bytes short_socket;
  message(short_socket, SOCK_DIAG_BY_FAMILY, 1, socket_message(6443, 40000, 2),
          sizeof(inet_diag_msg) / 2);
  c = read_all(short_socket, 1);
  EXPECT_EQ(c.result.state, inet_diag_dump::outcome::failed);
  EXPECT_EQ(c.result.error, "sock_diag: a socket message is cut short");
  // Every prefix of a good datagram is read without a fault.
  message(d, NLMSG_DONE, 1, 0);
  for (std::size_t n = 0; n <= d.size(); ++n) {
    const bytes prefix(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(n));
    const auto p = read_all(prefix, 1);
    EXPECT_LE(p.entries.size(), 1u);
    EXPECT_EQ(p.result.state == inet_diag_dump::outcome::done, n == d.size()) << n;
  }
}

}  // namespace
}  // namespace shim
