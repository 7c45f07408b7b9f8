#pragma once

namespace shim {

// What signal_watch tells the daemon.
class signal_events {
 public:
  virtual void trigger_signal(int signal) = 0;  // SIGTERM, SIGINT
  // Any other caught signal. own: it speaks of the receiving process's own limits and
  // profiling, and is never passed on (Go programs such as kube-apiserver crash on SIGSYS).
  virtual void stray_signal(int signal, bool own) = 0;

 protected:
  ~signal_events() = default;
};

}  // namespace shim
