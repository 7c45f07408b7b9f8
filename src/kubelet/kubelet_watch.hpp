#pragma once

#include <functional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "kubelet/kubelet_outlook.hpp"
#include "log/logger.hpp"
#include "logind/logind_inhibitor.hpp"

namespace shim {

// kubelet as the shim follows it: its delay lock in logind's list, its files read again whenever
// that lock is taken anew (kubelet reads its config and takes its lock when it starts, so what
// they say then is what that kubelet runs with), and what kubelet_outlook concludes, logged once
// per change. It writes the kubelet-shutdown row of shim_status (the outlook it is given).
class kubelet_watch {
 public:
  struct handlers {
    // The lock kubelet held is no longer listed: that kubelet will not act on this shutdown any
    // more (a new one, if any, took its lock after the shutdown began and never saw it).
    std::function<void()> gone;
    std::function<void()> changed;  // the outlook changed what it says
  };

  kubelet_watch(const config& cfg, logger& log, kubelet_outlook& outlook, handlers on)
      : cfg_(cfg), log_(log), outlook_(outlook), on_(std::move(on)) {}

  // With --kubelet-config or --static-pod-manifest, reads them now; without, there is nothing to
  // read until kubelet's lock shows. What the outlook is, is logged once logind's locks are first
  // listed (at once with --inhibit=off), then at each change.
  void start();
  void locks_listed(const std::vector<logind_inhibitor::listed_lock>& locks);
  // logind's locks were listed at least once, so a lock not listed is not held.
  bool listed() const { return listed_; }

 private:
  void read_files();
  void said();

  const config& cfg_;
  logger& log_;
  kubelet_outlook& outlook_;
  handlers on_;
  bool listed_ = false;
  std::string said_;  // the summary last logged
};

}  // namespace shim
