#pragma once

// The receiving end of sd_notify, for tests that stand in for systemd's notify socket: the shim's
// own (test_shim_notify.cpp) and the podman unit's --sdnotify=container (tests/containers).

#include <fmt/core.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "node_sandbox.hpp"

namespace shim_it {

// The receiving end of sd_notify: an AF_UNIX datagram socket. Each datagram holds one or more
// "NAME=value" lines; every line is kept with the time it was read.
class notify_socket {
 public:
  struct line {
    std::string text;
    std::uint64_t usec = 0;
  };

  explicit notify_socket(std::filesystem::path path) : path_(std::move(path)) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path_.c_str(), sizeof addr.sun_path - 1);
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0) {
      throw std::runtime_error(fmt::format("notify socket: {}", std::strerror(errno)));
    }
  }
  ~notify_socket() {
    close(fd_);
    unlink(path_.c_str());
  }
  notify_socket(const notify_socket&) = delete;
  notify_socket& operator=(const notify_socket&) = delete;

  std::string env() const { return "NOTIFY_SOCKET=" + path_.string(); }

  // Reads what has arrived until pred holds or timeout passes (driven by poll on the socket).
  bool wait_until(const std::function<bool(const std::vector<line>&)>& pred,
                  std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      drain();
      if (pred(lines_)) return true;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      poll(&p, 1, static_cast<int>(left.count()));
    }
  }
  bool wait_for(const std::string& text, std::chrono::milliseconds timeout) {
    return wait_until([&](const auto&) { return first(text).has_value(); }, timeout);
  }

  const std::vector<line>& lines() {
    drain();
    return lines_;
  }
  std::optional<line> first(const std::string& prefix, std::uint64_t since_us = 0) const {
    for (const auto& l : lines_) {
      if (l.text.starts_with(prefix) && l.usec >= since_us) return l;
    }
    return std::nullopt;
  }
  std::size_t count(const std::string& text) const {
    std::size_t n = 0;
    for (const auto& l : lines_) n += l.text == text ? 1 : 0;
    return n;
  }

 private:
  void drain() {
    char buf[4096];
    for (;;) {
      const ssize_t n = recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
      if (n <= 0) return;
      const auto now = sandbox::monotonic_us();
      std::string_view rest(buf, static_cast<std::size_t>(n));
      while (!rest.empty()) {
        const auto nl = rest.find('\n');
        if (!rest.substr(0, nl).empty()) lines_.push_back({std::string(rest.substr(0, nl)), now});
        rest = nl == std::string_view::npos ? std::string_view{} : rest.substr(nl + 1);
      }
    }
  }

  std::filesystem::path path_;
  int fd_ = -1;
  std::vector<line> lines_;
};

}  // namespace shim_it
