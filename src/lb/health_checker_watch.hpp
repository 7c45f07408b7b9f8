#pragma once

#include <array>
#include <boost/asio/ip/address.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lb/checker_observation.hpp"

namespace shim {

// A model of the load balancer's health checkers, fed every /readyz answer of the TCP readiness
// server: who probes, how often, and once /readyz turns unready at t0 (a drill, a shutdown), when
// each checker saw its first not-ready answer and `fall` in a row. No I/O and no clock: every
// input carries its steady_clock time.
//
// Memory is bounded whatever the peers do: kMaxAddresses addresses (the least recently seen is
// forgotten for a new one), each with its last kRecentProbes probes, enough for the interval
// before t0. From begin(t0) the checkers' figures are counted as the answers come, so that the
// minute before t0 need not be kept, however long the drill or the hold.
class health_checker_watch {
 public:
  using clock = std::chrono::steady_clock;
  using address = boost::asio::ip::address;
  static constexpr std::size_t kMaxAddresses = 64;
  static constexpr std::size_t kRecentProbes = 16;
  // A checker probed in this time before t0.
  static constexpr std::chrono::seconds kCheckerWindow{60};

  // One /readyz answer to a probe from `from` (an IPv4-mapped IPv6 address counts as the IPv4
  // one): ready is a 200, anything else not ready. kubelet_probe: the request said User-Agent
  // kube-probe/..., kubelet's readinessProbe, which takes no node out of a load balancer: such an
  // address is listed apart and never counts as a checker (the shipped DaemonSet's probe made a
  // drill pass with no load balancer at all; issue 35, item 2). Cheap: a scan of at most
  // kMaxAddresses. When the table is full, a new address takes the place of the least recently
  // seen one that does not probe regularly (kRegularProbes in kCheckerWindow), or is not followed
  // when they all do: a flood of new addresses cannot push a checker out (issue 35, item 3).
  void record(const address& from, clock::time_point at, bool ready, bool kubelet_probe = false);
  static constexpr unsigned kRegularProbes = 2;

  // /readyz turned unready at t0 (fall >= 1, --lb-fall): the checkers are the addresses that probed
  // at least kRegularProbes times in the minute before (one request, a curl's, is listed apart);
  // answers recorded since t0 (kept among their recent probes) are counted at once. A second
  // begin() starts over.
  void begin(clock::time_point t0, unsigned fall);
  void end() { session_.reset(); }
  std::optional<clock::time_point> t0() const {
    return session_ ? std::optional(session_->t0) : std::nullopt;
  }

  // What the checkers made of it by now; nullopt before begin().
  std::optional<checker_observation> observe(clock::time_point now) const;

  std::size_t addresses() const { return peers_.size(); }

 private:
  struct probe {
    clock::time_point at;
    bool ready = false;
  };
  struct peer {
    address from;
    clock::time_point last_seen;
    std::array<probe, kRecentProbes> recent{};  // a ring, oldest at next once full
    std::uint8_t count = 0;
    std::uint8_t next = 0;
    int checker = -1;      // index into session_->checkers, or -1
    bool kubelet = false;  // its probes said User-Agent kube-probe/...
  };
  struct session {
    clock::time_point t0;
    unsigned fall = 0;
    std::vector<checker_observation::checker> checkers;
    std::vector<std::string> not_counted;  // "ADDRESS (why)"
  };

  // nullptr: the table is full of regular probers, and `from` is not followed.
  peer* find_or_add(const address& from, clock::time_point at);
  int checker_index(const address& from) const;
  void count(checker_observation::checker& c, const probe& pr) const;
  static std::optional<checker_observation::duration> median_interval(const peer& p,
                                                                      clock::time_point t0,
                                                                      unsigned& probes_before);

  std::vector<peer> peers_;
  std::optional<session> session_;
  // When an address was last not followed, the table being full.
  std::optional<clock::time_point> last_dropped_;
};

}  // namespace shim
