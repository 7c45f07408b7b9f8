// sock_diag_reply: an arbitrary datagram as the kernel's answer to new_connection_sampler's dump.
// - inet_diag_dump::read never reads past the datagram (ASan) whatever its lengths say.
// - Each socket it hands on came from a whole message: at most one per header and
//   inet_diag_msg's worth of bytes.
// - A failure has a one-line reason; anything else has none.
#include <linux/inet_diag.h>
#include <linux/netlink.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "lb/inet_diag_dump.hpp"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" const char* __ubsan_default_options() { return "halt_on_error=1:print_stacktrace=1"; }

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::size_t sockets = 0;
  // The seeds' messages are numbered 1.
  const auto parsed =
      shim::inet_diag_dump::read(std::span<const std::uint8_t>(data, size), 1,
                                 [&](const shim::inet_diag_dump::socket_entry&) { ++sockets; });
  check(sockets <= size / (NLMSG_HDRLEN + sizeof(inet_diag_msg)));
  if (parsed.state == shim::inet_diag_dump::outcome::failed) {
    check(!parsed.error.empty() && parsed.error.find('\n') == std::string::npos);
  } else {
    check(parsed.error.empty());
  }
  return 0;
}
