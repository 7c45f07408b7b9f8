#include "http/control_server.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio/local/stream_protocol.hpp>
#include <boost/beast/http/status.hpp>
#include <cerrno>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "http/http_answer.hpp"
#include "http/http_listeners.hpp"
#include "util/errno_error.hpp"
#include "util/unique_fd.hpp"

namespace shim {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using local = asio::local::stream_protocol;

namespace {

constexpr std::string_view kRootOnly = "root only\n";

// The process's umask for the lifetime of the object. The shim has one thread, so nothing else
// creates a file while it is set.
class scoped_umask {
 public:
  explicit scoped_umask(mode_t mask) : saved_(::umask(mask)) {}
  ~scoped_umask() { ::umask(saved_); }
  scoped_umask(const scoped_umask&) = delete;
  scoped_umask& operator=(const scoped_umask&) = delete;

 private:
  mode_t saved_;
};

[[noreturn]] void throw_at(const std::filesystem::path& path, int error, std::string_view what) {
  throw_errno(error, "control socket " + path.string() + ": " + std::string(what));
}

[[noreturn]] void throw_at(const std::filesystem::path& path, const beast::error_code& ec,
                           std::string_view what) {
  throw_listen_error(ec, "control socket " + path.string() + ": " + std::string(what));
}

// Whether a process listens on the socket at `path`. A connect() that does not block: a full
// listen queue (EAGAIN) is someone listening too.
bool someone_listens(const std::filesystem::path& path) {
  unique_fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) throw_at(path, errno, "socket");
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  path.native().copy(address.sun_path, sizeof address.sun_path - 1);
  const int r = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address);
  return r == 0 || errno == EAGAIN;
}

// Makes room for the socket at `path`: removes a stale socket, refuses anything else.
void clear_stale_socket(const std::filesystem::path& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return;
    throw_at(path, errno, "lstat");
  }
  if (!S_ISSOCK(st.st_mode)) {
    const std::string_view what = S_ISREG(st.st_mode)   ? "a regular file"
                                  : S_ISDIR(st.st_mode) ? "a directory"
                                  : S_ISLNK(st.st_mode) ? "a symbolic link"
                                                        : "a file";
    throw_at(path, EEXIST, std::string(what) + ", not a socket, is at this path: left alone");
  }
  if (someone_listens(path)) {
    throw_at(path, EADDRINUSE, "another process is listening on it");
  }
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) throw_at(path, errno, "unlink stale socket");
}

// The caller's answers, with the refusal of a peer that is not root.
http_answers with_root_only_refusal(http_answers answers) {
  return {
      .respond = std::move(answers.respond),
      .refuse =
          [refuse = std::move(answers.refuse)](http::status code, http_request_counts& counts,
                                               std::string& out) {
            if (code != http::status::forbidden) return refuse(code, counts, out);
            append_closing_answer(code, kRootOnly, out);
            counts.add(http_handler::other, static_cast<unsigned>(code));
          },
  };
}

bool is_root(const http_peer& peer) {
  const auto* p = std::get_if<unix_peer>(&peer);
  return p != nullptr && p->uid == 0;
}

}  // namespace

control_server::control_server(asio::io_context& io, http_answers answers, http_limits limits) {
  if (limits.max_connections == 0) limits.max_connections = kMaxControlConnections;
  state_ = std::make_shared<http_listeners<local>>(
      io,
      std::make_shared<http_connections>(io, limits, with_root_only_refusal(std::move(answers))));
  state_->admits = is_root;
}

control_server::~control_server() { stop(); }

void control_server::listen(const std::filesystem::path& path) {
  auto& state = *state_;
  beast::error_code ec;
  local::endpoint endpoint;
  try {
    endpoint = local::endpoint(path.native());
  } catch (const boost::system::system_error& e) {
    throw_at(path, e.code(), "path");  // longer than sun_path
  }
  clear_stale_socket(path);
  auto l = std::make_shared<http_listeners<local>::listener>(state.io);
  // Close-on-exec from the start: a child started in wrapper mode never inherits it.
  unique_fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) throw_at(path, errno, "socket");
  l->acceptor.assign(local(), fd.release(), ec);
  if (ec) throw_at(path, ec, "socket");
  {
    // bind() creates the socket file with 0777 & ~umask: 0600 from the start.
    const scoped_umask only_owner(0177);
    l->acceptor.bind(endpoint, ec);
  }
  if (ec) throw_at(path, ec, "bind");
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) throw_at(path, errno, "lstat");
  l->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    ::unlink(path.c_str());
    throw_at(path, ec, "listen");
  }
  path_ = path;
  device_ = st.st_dev;
  inode_ = st.st_ino;
  state.connections->restart();
  state.endpoints.push_back(endpoint);
  state.listeners.push_back(l);
  state.accept(l);
}

const std::filesystem::path& control_server::path() const { return path_; }

const http_request_counts& control_server::request_counts() const {
  return state_->connections->counts();
}

std::uint64_t control_server::refused_peers() const { return state_->refused; }

void control_server::stop() {
  state_->stop();
  if (path_.empty()) return;
  struct stat st {};
  // Only our own socket: another instance may have replaced it since.
  if (::lstat(path_.c_str(), &st) == 0 && S_ISSOCK(st.st_mode) && st.st_dev == device_ &&
      st.st_ino == inode_) {
    ::unlink(path_.c_str());
  }
  path_.clear();
}

}  // namespace shim
