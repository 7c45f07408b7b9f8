#include "lb/health_checker_watch.hpp"

#include <algorithm>

namespace shim {
namespace {

using address = health_checker_watch::address;

// A dual-stack listener sees an IPv4 checker as ::ffff:a.b.c.d: one checker, one address.
address plain(const address& a) {
  if (a.is_v6() && a.to_v6().is_v4_mapped()) {
    return boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, a.to_v6());
  }
  return a;
}

}  // namespace

void health_checker_watch::record(const address& from, clock::time_point at, bool ready,
                                  bool kubelet_probe) {
  peer* found = find_or_add(plain(from), at);
  if (found == nullptr) return;
  peer& p = *found;
  p.kubelet = p.kubelet || kubelet_probe;
  const probe pr{.at = at, .ready = ready};
  p.recent[p.next] = pr;
  p.next = static_cast<std::uint8_t>((p.next + 1) % kRecentProbes);
  if (p.count < kRecentProbes) ++p.count;
  if (at > p.last_seen) p.last_seen = at;
  // A checker's index outlives its session (end() leaves the peers as they are).
  if (session_ && p.checker >= 0 && at >= session_->t0) {
    count(session_->checkers[static_cast<std::size_t>(p.checker)], pr);
  }
}

health_checker_watch::peer* health_checker_watch::find_or_add(const address& from,
                                                              clock::time_point at) {
  for (peer& p : peers_) {
    if (p.from == from) return &p;
  }
  peer fresh{.from = from, .last_seen = at, .checker = checker_index(from)};
  if (peers_.size() < kMaxAddresses) return &peers_.emplace_back(fresh);
  // Full: the least recently seen of those that do not probe regularly gives way. A checker
  // forgotten so keeps its figures in the session (they are kept apart), and is found again
  // there if it comes back.
  const auto regular = [at](const peer& p) {
    return p.count >= kRegularProbes && p.last_seen >= at - kCheckerWindow;
  };
  peer* oldest = nullptr;
  for (peer& p : peers_) {
    if (!regular(p) && (oldest == nullptr || p.last_seen < oldest->last_seen)) oldest = &p;
  }
  if (oldest == nullptr) {
    last_dropped_ = at;
    return nullptr;
  }
  *oldest = fresh;
  return oldest;
}

int health_checker_watch::checker_index(const address& from) const {
  if (!session_) return -1;
  for (std::size_t i = 0; i < session_->checkers.size(); ++i) {
    if (session_->checkers[i].address == from.to_string()) return static_cast<int>(i);
  }
  return -1;
}

void health_checker_watch::count(checker_observation::checker& f, const probe& pr) const {
  ++f.probes_since;
  if (pr.ready) {
    f.unready_run = 0;
    return;
  }
  const auto offset = pr.at - session_->t0;
  if (!f.first_unready) f.first_unready = offset;
  ++f.unready_run;
  if (f.unready_run == session_->fall && !f.fell) f.fell = offset;
}

std::optional<checker_observation::duration> health_checker_watch::median_interval(
    const peer& p, clock::time_point t0, unsigned& probes_before) {
  std::array<clock::time_point, kRecentProbes> times{};
  std::size_t n = 0;
  for (std::size_t i = 0; i < p.count; ++i) {
    const auto at = p.recent[i].at;
    if (at < t0 && at >= t0 - kCheckerWindow) times[n++] = at;
  }
  probes_before = static_cast<unsigned>(n);
  if (n < 2) return std::nullopt;
  std::sort(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(n));
  std::array<checker_observation::duration, kRecentProbes> gaps{};
  for (std::size_t i = 1; i < n; ++i) gaps[i - 1] = times[i] - times[i - 1];
  const std::size_t mid = (n - 1) / 2;
  std::nth_element(gaps.begin(), gaps.begin() + static_cast<std::ptrdiff_t>(mid),
                   gaps.begin() + static_cast<std::ptrdiff_t>(n - 1));
  return gaps[mid];
}

void health_checker_watch::begin(clock::time_point t0, unsigned fall) {
  session_ = session{.t0 = t0, .fall = fall, .checkers = {}, .not_counted = {}};
  for (peer& p : peers_) {
    p.checker = -1;
    unsigned before = 0;
    const auto interval = median_interval(p, t0, before);
    if (before == 0) continue;
    // One request is no health check: a curl's single answer never counts (issue 35, item 2).
    if (p.kubelet || !interval) {
      session_->not_counted.push_back(
          p.from.to_string() + (p.kubelet
                                    ? " (kubelet's readinessProbe, User-Agent kube-probe)"
                                    : " (one request in the minute before, not a regular probe)"));
      continue;
    }
    p.checker = static_cast<int>(session_->checkers.size());
    auto& c = session_->checkers.emplace_back(checker_observation::checker{
        .address = p.from.to_string(), .interval = *interval, .probes_before = before});
    // Answers already recorded since t0 (begin() came a little late), oldest first.
    for (std::size_t i = 0; i < p.count; ++i) {
      const probe& pr = p.recent[(p.next + kRecentProbes - p.count + i) % kRecentProbes];
      if (pr.at >= t0) count(c, pr);
    }
  }
}

std::optional<checker_observation> health_checker_watch::observe(clock::time_point now) const {
  if (!session_) return std::nullopt;
  const bool full = last_dropped_ && *last_dropped_ >= session_->t0 - kCheckerWindow;
  return checker_observation(session_->fall, now - session_->t0, session_->checkers,
                             session_->not_counted, full);
}

}  // namespace shim
