#include "log/journal_socket.hpp"

#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "log/journal_entry.hpp"

namespace shim {

journal_socket::journal_socket(std::string path)
    : path_(std::move(path)),
      socket_(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) {}

int journal_socket::send(const std::vector<std::string>& fields) const noexcept {
  if (!socket_) return EBADF;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path_.size() >= sizeof(address.sun_path)) return ENAMETOOLONG;
  std::memcpy(address.sun_path, path_.data(), path_.size());
  try {
    const std::string datagram = native_datagram(fields);
    for (;;) {
      const ssize_t sent =
          ::sendto(socket_.get(), datagram.data(), datagram.size(), MSG_DONTWAIT | MSG_NOSIGNAL,
                   reinterpret_cast<const sockaddr*>(&address), sizeof(address));
      if (sent >= 0) return 0;
      if (errno != EINTR) return errno;
    }
  } catch (...) {
    return ENOMEM;
  }
}

}  // namespace shim
