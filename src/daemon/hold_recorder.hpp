#pragma once

#include <string>

#include "config/config.hpp"
#include "core/shutdown_sequence.hpp"
#include "lb/load_balancer_watch.hpp"
#include "log/event_recorder.hpp"
#include "log/logger.hpp"
#include "process/target_watch.hpp"
#include "readiness/shim_status.hpp"

namespace shim {

// The daemon's own records in the event log, the ones `shutdown-shim report` reads after the
// reboot: Started, the start of a hold (ShutdownInitiated, ShutdownResumed, or a Restart of the
// shim itself, with KubeletShutdown), its end (InhibitorReleased) and the sequence's notes
// (DrainElapsed).
class hold_recorder {
 public:
  hold_recorder(const config& cfg, logger& log, event_recorder& events, const shim_status& status,
                target_watch& target)
      : cfg_(cfg), log_(log), events_(events), status_(status), target_(target) {}

  void started();
  // The sequence's become_unready or record_start (a become_unready without an event waits for
  // PID 1's answer: only logged).
  void hold_began(const shutdown_sequence::action& a);
  // The sequence's release_inhibitor, before the lock closes: logind goes on at once, and in the
  // system suite's ensure case its "System is rebooting" came before a record written after.
  void released(const shutdown_sequence::action& a);
  // The sequence's note: logged, or recorded when it is an event (DrainElapsed with what the load
  // balancer did in the drain, for `report` after the reboot).
  void note(const shutdown_sequence::action& a, const load_balancer_watch& lb);

  // For the Restart record: what PID 1 said, and why a SIGTERM is passed on.
  void system_state(const std::string& state) { system_state_ = state; }
  void forward_why(const std::string& why) { forward_why_ = why; }

 private:
  const config& cfg_;
  logger& log_;
  event_recorder& events_;
  const shim_status& status_;
  target_watch& target_;
  std::string system_state_;  // empty: not asked
  std::string forward_why_;
};

}  // namespace shim
