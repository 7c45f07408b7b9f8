#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string_view>
#include <utility>

namespace shim {

// Which endpoint answered: the handler label of shutdown_shim_http_requests_total, so that LB
// probes (/readyz), liveness probes and scrapes can be told apart. "other": an unknown path, or a
// request refused before it was routed (malformed, too large, a body).
enum class http_handler { readyz, livez, healthz, metrics, other };

inline constexpr std::array<std::string_view, 5> kHttpHandlerNames{"readyz", "livez", "healthz",
                                                                   "metrics", "other"};

constexpr std::string_view to_string(http_handler h) {
  return kHttpHandlerNames[static_cast<std::size_t>(h)];
}

// Responses sent, by handler and status code: the server's own counters, rendered into /metrics.
// Every handler starts with every code the shim can answer at 0, so that increase() sees the first
// 503 (a series that appears with its first sample has no increase).
class http_request_counts {
 public:
  static constexpr std::array<unsigned, 7> kCodes{200, 400, 404, 405, 413, 431, 503};

  http_request_counts();

  void add(http_handler handler, unsigned code);
  std::uint64_t count(http_handler handler, unsigned code) const;
  // Over every handler.
  std::uint64_t count(unsigned code) const;

  // Ordered by handler, then code.
  using key = std::pair<http_handler, unsigned>;
  const std::map<key, std::uint64_t>& all() const { return counts_; }

  bool operator==(const http_request_counts&) const = default;

 private:
  std::map<key, std::uint64_t> counts_;
};

}  // namespace shim
