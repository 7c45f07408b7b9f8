#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "report/event_line_reader.hpp"
#include "report/shutdown_verdict.hpp"

namespace shim {

// One shutdown as the event log tells it, from its ShutdownInitiated to the end of its boot's
// records, and the verdict those records give. Pure: records in, figures and a verdict out.
//
// The run that recorded ShutdownInitiated (its pid) held logind's lock; the lock went when that
// process closed it or died. So only that run's InhibitorReleased ends the hold: a shim restarted
// mid-hold (its Started, then ShutdownResumed) holds no lock (logind refuses one while the
// shutdown runs), and whatever it records after does not make the hold whole again.
//
// The rules, first match wins:
//   | the records of the shutdown                                      | verdict       |
//   |------------------------------------------------------------------|---------------|
//   | ShutdownCancelled after ShutdownInitiated                        | cancelled     |
// SignalLeftToKubelet (the signal left to kubelet's graceful node shutdown) counts as
// SignalForwarded; a SignalForwarded after it (kubelet's lock went first) is the signal then.
// TargetRestarted (a kube-apiserver kubelet started again during the hold, given its own signal)
// is counted; the first signal stays the shutdown's.
//   | no SignalForwarded; the run's record before ShutdownInitiated is | no signal     |
//   |   TargetExited (wrapper mode: the child ended on its own)        |               |
//   | InhibitorReleased by the holding run, after SignalForwarded and  | clean         |
//   |   DrainElapsed                                                   |               |
//   | InhibitorReleased by the holding run, DrainElapsed, no           | no signal     |
//   |   SignalForwarded (no target, or every one had exited)           |               |
//   | InhibitorReleased by the holding run, neither (an older shim's   | restart       |
//   |   record of its own SIGTERM, not passed on: released at once,    |               |
//   |   before any drain; today's shim records a Restart instead)      |               |
//   | InhibitorReleased by the holding run, SignalForwarded, no        | cut short     |
//   |   DrainElapsed (not written by today's shim)                     |               |
//   | no InhibitorReleased by the holding run, and its boot is over or | cut short     |
//   |   another run Started (a SIGKILL, a crash, or logind's timeout   |               |
//   |   followed by the stop of the unit)                              |               |
//   | none of the above: this boot, the holding run may still be at it | in progress   |
// A cancelled shutdown followed by another one in the same boot is judged by the later one. A
// restart is no shutdown: shutdown_history counts it apart, and the boot keeps the shutdown
// before it.
class shutdown_account {
 public:
  // initiated: the ShutdownInitiated record. target_gone: the same run's record just before it
  // was TargetExited.
  shutdown_account(const event_record& initiated, bool target_gone);

  // The next record of the same boot, in log order.
  void add(const event_record& r);

  // boot_over: the log's records of this boot are all in (a later boot follows, or the boot is
  // not the one running now).
  shutdown_verdict verdict(bool boot_over) const;
  // One line saying what the records show, for the report.
  std::string detail(bool boot_over) const;

  const std::string& wall() const { return wall_; }
  const std::string& trigger() const { return trigger_; }
  std::int64_t holder_pid() const { return holder_pid_; }
  std::optional<std::int64_t> unready_us() const { return unready_us_; }
  std::optional<std::uint64_t> inhibit_delay_max_usec() const { return delay_max_usec_; }
  // Seconds, when the records hold both ends.
  std::optional<double> unready_to_signal() const;
  std::optional<double> signal_to_target_exit() const;
  std::optional<double> hold() const;  // unready to the holding run's InhibitorReleased
  // Unready to the holding run's last record: how far into the hold its records go.
  std::optional<double> records_span() const;
  // What kubelet's graceful node shutdown was expected to do (the KubeletShutdown record), when
  // the shim saw kubelet; whether the signal counted was left to kubelet (SignalLeftToKubelet,
  // with no SignalForwarded after it).
  const std::string& kubelet() const { return kubelet_; }
  bool signal_by_kubelet() const { return signal_by_kubelet_; }
  // What the load balancer's health checkers did in the drain (DrainElapsed's lb), when the shim
  // measured it; empty otherwise.
  const std::string& load_balancer() const { return lb_; }
  // kube-apiserver processes that ran again during the hold (kubelet restarted the container) and
  // got their own one signal (TargetRestarted), and what became of kubelet when it was to signal
  // and went (KubeletGone's words).
  int targets_restarted() const { return targets_restarted_; }
  const std::string& kubelet_gone() const { return kubelet_gone_; }

 private:
  std::string wall_;
  std::string trigger_;
  std::int64_t holder_pid_ = 0;
  std::optional<std::uint64_t> delay_max_usec_;
  bool target_gone_ = false;
  std::optional<std::int64_t> unready_us_;
  std::optional<std::int64_t> signal_us_;
  std::optional<std::int64_t> target_exit_us_;
  std::optional<std::int64_t> released_us_;
  std::optional<std::int64_t> last_us_;
  bool drain_elapsed_ = false;
  std::optional<std::string> cancel_cause_;
  std::int64_t restarted_pid_ = 0;  // another run that Started while the hold was open
  std::string kubelet_;
  std::string lb_;
  bool signal_by_kubelet_ = false;
  bool taken_back_ = false;  // the shim's signal after one left to kubelet
  int targets_restarted_ = 0;
  std::string kubelet_gone_;
};

}  // namespace shim
