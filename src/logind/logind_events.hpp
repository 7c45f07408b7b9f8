#pragma once

#include <string>
#include <vector>

#include "logind/logind_inhibitor.hpp"
#include "util/result.hpp"

namespace shim {

// What the system bus edge (logind_edge) tells the daemon.
class logind_events {
 public:
  virtual void prepare_for_shutdown(bool active, const std::string& cause) = 0;
  // PreparingForShutdown as read after each (re)connect.
  virtual void preparing_read(bool preparing) = 0;
  // Once: the first attempt to take the lock is over (held, or why not).
  virtual void first_attempt_done(const result<>& outcome) = 0;
  // PID 1's SystemState, as ask_system_state() read it.
  virtual void system_state_read(const result<std::string>& state) = 0;
  virtual void delay_locks_listed(const std::vector<logind_inhibitor::listed_lock>& locks) = 0;
  // --ensure-inhibit-delay=required could not raise logind's delay.
  virtual void ensure_failed(const std::string& error) = 0;
  virtual void row_changed() = 0;  // a row changed

 protected:
  ~logind_events() = default;
};

}  // namespace shim
