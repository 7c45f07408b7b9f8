#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kubelet/kubelet_events.hpp"
#include "kubelet/kubelet_outlook.hpp"
#include "log/logger.hpp"
#include "logind/logind_inhibitor.hpp"
#include "util/exit_watcher.hpp"
#include "util/process_identity.hpp"

namespace shim {

// kubelet as the shim follows it: its delay lock in logind's list, its files read again whenever
// that lock is taken anew (kubelet reads its config and takes its lock when it starts, so what
// they say then is what that kubelet runs with), the kubelet process itself, and what
// kubelet_outlook concludes, logged once per change. It writes the kubelet-shutdown row of
// shim_status (the outlook it is given).
//
// A lock gone is not a kubelet gone (issue 32): kubelet closes its lock itself when its last
// priority group's timer fires, while the runtime's SIGKILL of a pod of that group is still to
// land, and after a cancelled shutdown its stale close of the old lock's fd number may close the
// new lock; in both cases it runs on with its graceful node shutdown on. So the process that held
// the lock is watched through a pidfd, when the shim shares logind's PID namespace (its own lock
// is listed with its own PID; in a pod it may not be, and logind's PIDs are then not its own):
// while it runs, kubelet counts as there (the outlook's lockless kubelet); `gone` comes when its
// lock went and the process is gone too, or cannot be watched.
class kubelet_watch {
 public:
  struct settings {
    std::string kubelet_config;       // --kubelet-config; empty: not read
    std::string static_pod_manifest;  // --static-pod-manifest; empty: not read
    std::string logind_conf_dir;      // where kubelet's logind drop-in is looked for
    bool bus = true;                  // false with --inhibit=off: no list of locks will come
  };

  kubelet_watch(boost::asio::io_context& io, settings cfg, logger& log, kubelet_outlook& outlook,
                kubelet_events& on)
      : cfg_(std::move(cfg)), log_(log), outlook_(outlook), on_(on), watcher_(io) {}

  // With --kubelet-config or --static-pod-manifest, reads them now; without, there is nothing to
  // read until kubelet's lock shows. What the outlook is, is logged once logind's locks are first
  // listed (at once with --inhibit=off), then at each change.
  void start();
  void locks_listed(const std::vector<logind_inhibitor::listed_lock>& locks);
  // logind's locks were listed at least once, so a lock not listed is not held.
  bool listed() const { return listed_; }
  void stop() { watcher_.clear(); }

 private:
  void read_files();
  void said();
  void watch_process(std::uint32_t pid);
  void on_process_exit();

  const settings cfg_;
  logger& log_;
  kubelet_outlook& outlook_;
  kubelet_events& on_;
  exit_watcher watcher_;
  bool listed_ = false;
  // The kubelet process that held the lock, while it runs (watched through its pidfd).
  std::optional<process_identity> process_;
  std::string said_;  // the summary last logged
};

}  // namespace shim
