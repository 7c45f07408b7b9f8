#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <cstdint>
#include <filesystem>
#include <memory>

#include "http/http_connections.hpp"
#include "http/http_limits.hpp"
#include "http/http_request_counts.hpp"

namespace shim {

template <typename Protocol>
struct http_listeners;

// The control socket (issue 23, item 1): the same HTTP/1.1 sessions as the readiness server
// (bounded requests and answers, deadlines, eviction of the least recently active connection,
// never blocking the loop) on a Unix stream socket that only root may use, so that
// `curl --unix-socket` works by hand. Its answers are the caller's and share nothing with the
// readiness server's: neither listener reaches the other's routes.
//
// Root only, twice: the socket is created mode 0600 (bound under umask 0177, so it is never wider,
// not even for a moment), and every connection's SO_PEERCRED uid must be 0, else it is answered
// 403 "root only", closed and counted (refused_peers()).
class control_server {
 public:
  // limits.max_connections 0: kMaxControlConnections.
  control_server(boost::asio::io_context& io, http_answers answers, http_limits limits = {});
  ~control_server();
  control_server(const control_server&) = delete;
  control_server& operator=(const control_server&) = delete;

  // Creates the socket at `path` (close-on-exec) and listens. A socket already at the path is
  // replaced when nothing listens on it; a live one, or anything else at the path, is an error
  // naming it and is left alone. Throws std::system_error naming the path.
  void listen(const std::filesystem::path& path);
  // Empty before listen() and after stop().
  const std::filesystem::path& path() const;
  const http_request_counts& request_counts() const;
  // Connections refused because the peer's uid was not 0.
  std::uint64_t refused_peers() const;

  // Closes the listener and every connection, and removes the socket if it is still the one
  // listen() created.
  void stop();

 private:
  std::shared_ptr<http_listeners<boost::asio::local::stream_protocol>> state_;
  std::filesystem::path path_;
  dev_t device_ = 0;  // of the socket listen() created, to remove only that one
  ino_t inode_ = 0;
};

}  // namespace shim
