#pragma once

namespace shim {

// What the kubelet edge (kubelet_watch) tells the daemon.
class kubelet_events {
 public:
  // The kubelet that held the lock will not act on this shutdown any more (a new one, if any,
  // took no lock while the shutdown ran, and runs without graceful node shutdown).
  virtual void kubelet_gone() = 0;
  virtual void kubelet_changed() = 0;  // the outlook changed what it says

 protected:
  ~kubelet_events() = default;
};

}  // namespace shim
