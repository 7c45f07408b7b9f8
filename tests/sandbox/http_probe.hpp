#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace sandbox {

struct http_result {
  bool ok = false;  // a complete response arrived
  unsigned status = 0;
  std::string body;
  std::string backend;  // the X-Backend header, if any
  std::string content_type;
  std::string error;        // transport error when !ok
  std::uint64_t at_us = 0;  // monotonic_us when the response (or error) was seen
};

// A small blocking HTTP/1.1 client with per-request timeouts over one keep-alive connection to
// 127.0.0.1:port. After a transport error the next request reconnects.
class http_client {
 public:
  explicit http_client(std::uint16_t port, std::string host = "127.0.0.1");
  ~http_client();
  http_client(const http_client&) = delete;
  http_client& operator=(const http_client&) = delete;

  http_result get(std::string_view target,
                  std::chrono::milliseconds timeout = std::chrono::milliseconds(2000));
  http_result head(std::string_view target,
                   std::chrono::milliseconds timeout = std::chrono::milliseconds(2000));
  // How many TCP connections this client has opened so far.
  unsigned connections_opened() const;
  void disconnect();

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

// A port on 127.0.0.1 that was free a moment ago (bound to port 0, then closed).
std::uint16_t pick_free_port();

// Probes a URL from its own thread in a tight loop over one keep-alive connection and remembers
// every change of answer (status, or transport error), with the time it was first seen. Stops by
// itself after max_duration so that a forgotten prober cannot run forever.
// The line of one check in a /readyz?verbose body ("[+]inhibitor ok: ...", "[-]shutdown failed:
// ..."), or nullopt if there is none.
std::optional<std::string> readyz_check_line(const std::string& body, const std::string& check);
// The value of an unlabelled sample in a Prometheus text body, or nullopt if there is none.
std::optional<double> metric_value(const std::string& body, const std::string& name);

class http_prober {
 public:
  struct change {
    std::uint64_t at_us;
    unsigned status;    // 0 for a transport error
    std::string error;  // set when status == 0
  };

  http_prober(std::uint16_t port, std::string target = "/readyz",
              std::chrono::microseconds interval = std::chrono::microseconds(1000),
              std::chrono::seconds max_duration = std::chrono::seconds(300));
  ~http_prober();
  http_prober(const http_prober&) = delete;
  http_prober& operator=(const http_prober&) = delete;

  void stop();
  std::vector<change> changes() const;
  // First time status was seen at or after since_us.
  std::optional<std::uint64_t> first_status_at(unsigned status, std::uint64_t since_us = 0) const;
  // The status in effect at `at_us` (0 for a transport error), and since when; none before the
  // first answer.
  std::optional<change> in_effect_at(std::uint64_t at_us) const;
  // First answer at or after since_us that was not a 2xx (including transport errors).
  std::optional<std::uint64_t> first_failure_at(std::uint64_t since_us = 0) const;
  std::uint64_t requests() const { return requests_; }
  std::uint64_t failures() const { return failures_; }

 private:
  void run();

  std::uint16_t port_;
  std::string target_;
  std::chrono::microseconds interval_;
  std::chrono::seconds max_duration_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> requests_{0};
  std::atomic<std::uint64_t> failures_{0};
  mutable std::mutex mutex_;
  std::vector<change> changes_;
  std::thread thread_;
};

}  // namespace sandbox
