#pragma once

#include <string>
#include <vector>

namespace shim {

// What the target edge (target_watch) tells the daemon.
class target_events {
 public:
  virtual void row_changed() = 0;                             // the target row changed
  virtual void target_exited(const std::string& detail) = 0;  // every signalled target has gone
  virtual void target_missed(const std::string& why) = 0;     // the signal found no target
  virtual void target_running_again() = 0;                    // one runs while one is waited for
  // During a hold: a target process that did not have the signal runs (restarted).
  virtual void target_started() = 0;
  virtual void child_exited(int exit_code) = 0;  // wrapper: after target_exited
  // The command line of the target found (attach mode: /proc/PID/cmdline; wrapper mode: the
  // command), and where it was read: "pid 812's command line".
  virtual void target_command_line(const std::vector<std::string>& argv,
                                   const std::string& source) = 0;

 protected:
  ~target_events() = default;
};

}  // namespace shim
