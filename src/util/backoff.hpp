#pragma once

#include <algorithm>
#include <chrono>
#include <random>

namespace shim {

// Capped exponential backoff with jitter, so that a lost bus or a missing target is retried without
// spinning and without every node retrying in step.
class backoff {
 public:
  using duration = std::chrono::milliseconds;
  backoff(duration first, duration cap) : first_(first), cap_(cap), rng_(std::random_device{}()) {}

  // The next delay: the ceiling doubles each time up to the cap; the delay is drawn from
  // [ceiling/2, ceiling].
  duration next() {
    duration ceiling = std::min<duration>(cap_, first_ * (1LL << std::min(attempts_, 20)));
    ++attempts_;
    std::uniform_int_distribution<duration::rep> pick(ceiling.count() / 2, ceiling.count());
    return duration(pick(rng_));
  }
  void reset() { attempts_ = 0; }

 private:
  duration first_;
  duration cap_;
  int attempts_ = 0;
  std::minstd_rand rng_;
};

}  // namespace shim
