#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "process.hpp"

namespace e2e {

struct lb_server {
  std::string name;              // "node-a"
  std::uint16_t port = 0;        // where requests go (the apiserver)
  std::uint16_t check_port = 0;  // where /readyz is checked (the shim, or the apiserver itself)
};

struct lb_options {
  std::string mode = "tcp";  // tcp: TLS passthrough, as control planes run it; or http
  std::string inter = "1s";
  unsigned fall = 2;
  unsigned rise = 2;
  // kubeadm's `retries 1` with `option redispatch`: a refused connection is tried once more, on
  // another server. 0: no retry, as cloud network load balancers behave.
  unsigned retries = 1;
  bool redispatch = true;  // with retries: the retry goes to another server
  // OpenShift's on-prem HAProxy checks with "HTTP/1.0", over TLS (check-ssl verify none).
  std::string check_version;
  bool check_ssl = false;
  std::string timeout_client_server = "35s";
  std::string timeout_tunnel;    // none by default
  std::uint16_t stats_port = 0;  // 0: no stats socket; else one on 127.0.0.1 (level user)
  std::uint16_t frontend_port = 0;
  std::vector<lb_server> servers;
};

// haproxy.cfg as control planes write it (kubeadm's HA guide, OpenShift on-prem): round robin,
// `option httpchk GET /readyz`, `http-check expect status 200`, `option redispatch`, `retries 1`.
std::string haproxy_config(const lb_options& options);

// Each server's status as HAProxy's stats socket shows it ("show stat"): "UP", "DOWN", or a
// transition under way ("UP 1/2": one failed check of `fall`). Throws when the socket cannot be
// read.
std::map<std::string, std::string> server_status(std::uint16_t stats_port);

// A health-check transition HAProxy reported: "node-a" went "DOWN" or "UP".
struct lb_transition {
  std::string server;
  std::string state;
  std::uint64_t usec = 0;  // CLOCK_MONOTONIC when the line was read (within ~5 ms of the event)
  std::string line;
};

// HAProxy in the foreground (-db), started and stopped by PID. A thread follows its stderr, where
// it reports every server state change ("Server apiservers/node-a is DOWN, reason: ..."), and
// stamps each with CLOCK_MONOTONIC as it is read.
class haproxy {
 public:
  haproxy(const std::string& binary, const std::filesystem::path& dir, const lb_options& options);
  ~haproxy();
  haproxy(const haproxy&) = delete;
  haproxy& operator=(const haproxy&) = delete;

  std::vector<lb_transition> transitions() const;
  std::optional<std::uint64_t> first(const std::string& server, const std::string& state,
                                     std::uint64_t since_us = 0) const;
  bool running() { return process_.running(); }
  const std::filesystem::path& log() const { return log_; }
  void stop();

 private:
  void follow();

  std::filesystem::path log_;
  sandbox::child_process process_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mutex_;
  std::vector<lb_transition> transitions_;
  std::thread follower_;
};

}  // namespace e2e
