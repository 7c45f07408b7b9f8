#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "util/unique_fd.hpp"

namespace shim {

// Sends journal entries to journald's native socket without ever waiting for it.
//
// Not sd_journal_sendv: libsystemd's socket is blocking and it sends with sendmsg(MSG_NOSIGNAL)
// alone (systemd 252, src/libsystemd/sd-journal/journal-send.c), and a blocking AF_UNIX datagram
// send waits while the receiver's queue is full (net.unix.max_dgram_qlen datagrams; the kernel's
// unix_dgram_sendmsg): a journald that is stalled (stopped, or behind a slow disk) would stop the
// loop in the middle of a shutdown. Here every send is MSG_DONTWAIT: a full queue is EAGAIN at
// once, and the caller writes the line to stderr instead, as it does without a journal.
class journal_socket {
 public:
  static constexpr std::string_view kPath = "/run/systemd/journal/socket";

  // The socket is made here; path is where journald listens (tests give their own).
  explicit journal_socket(std::string path);

  // One entry, the fields "NAME=value". 0 when journald has it queued, else the errno: EAGAIN
  // (its queue is full), ENOENT or ECONNREFUSED (no journald), EMSGSIZE.
  int send(const std::vector<std::string>& fields) const noexcept;

 private:
  std::string path_;
  unique_fd socket_;
};

}  // namespace shim
