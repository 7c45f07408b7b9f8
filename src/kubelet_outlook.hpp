#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "kubelet_shutdown.hpp"
#include "log_line.hpp"
#include "result.hpp"

namespace shim {

// What kubelet's graceful node shutdown (GNS) will do to kube-apiserver at the next shutdown, and
// the shim's one policy about it (issue 13). Pure: the shim feeds it kubelet's lock as logind lists
// it and the files as read; the check `kubelet-shutdown`, the metric, the log and the events are
// rendered from it.
//
// The policy:
//   | mode            | what kubelet will do (its lock listed, the files read)  | the shim      |
//   |-----------------|---------------------------------------------------------|---------------|
//   | attach, sidecar | SIGTERM at +0 (a static pod in kubelet's first group)   | sends none:   |
//   |                 |                                                         | kubelet's is  |
//   |                 |                                                         | the one       |
//   | attach, sidecar | SIGTERM later (a priority puts it in a later group)     | signals at +0 |
//   |                 |                                                         | and reports   |
//   |                 |                                                         | kubelet's as a|
//   |                 |                                                         | second one    |
//   | attach, sidecar | not known (no lock, or no usable --kubelet-config)      | signals at +0 |
//   | wrapper         | anything: kubelet's SIGTERM reaches the shim, which     | signals at +0 |
//   |                 | forwards once                                           |               |
// In every mode a SIGKILL before drain-delay + exit-timeout is reported as a cut drain.
class kubelet_outlook {
 public:
  struct settings {
    bool wrapper = false;
    std::chrono::nanoseconds drain_delay{0};
    std::chrono::nanoseconds hold_needed{0};  // drain-delay + exit-timeout
    bool config_given = false;                // --kubelet-config
    bool manifest_given = false;              // --static-pod-manifest
  };
  kubelet_outlook() = default;
  explicit kubelet_outlook(settings s) : settings_(s) {}

  // kubelet's delay lock in logind's list: the pid holding it, or none.
  void set_lock(std::optional<std::uint32_t> kubelet_pid);
  // The files as read (a failure: why they cannot be used); a file not given is a success with
  // nothing in it. kubelet_dropin_usec: 99-kubelet.conf's InhibitDelayMaxSec, kubelet's total.
  void set_files(const result<kubelet_shutdown_config>& config,
                 const result<static_pod_priority>& manifest,
                 std::optional<std::uint64_t> kubelet_dropin_usec);

  // Anything to say: kubelet's lock is listed, or a file was given.
  bool applies() const { return lock_pid_ || settings_.config_given || settings_.manifest_given; }
  // The pid holding kubelet's lock, as logind last listed it; none when it is not listed.
  const std::optional<std::uint32_t>& lock_pid() const { return lock_pid_; }
  // kubelet's stop of kube-apiserver, when its lock is listed and its config known.
  const std::optional<kubelet_stop_plan>& plan() const { return active_plan_; }

  // The policy: the shim sends no signal of its own, and counts kubelet's.
  bool leaves_signal_to_kubelet() const;
  // kubelet's SIGKILL may come before drain-delay + exit-timeout.
  bool cuts_drain() const;
  // kubelet's SIGTERM will be a second one after the shim's (attach or sidecar, a later group).
  bool second_signal() const;

  // One line for the check and the events: what kubelet will do and what the shim does.
  std::string summary() const;
  // The same when it is a problem an operator must fix (logged as a WARNING), else nothing.
  std::optional<std::string> warning() const;
  // For the event recorded at a shutdown.
  log_fields fields() const;

 private:
  std::string plan_words() const;
  std::string cut_words() const;
  void update();

  settings settings_;
  std::optional<std::uint32_t> lock_pid_;
  std::optional<kubelet_stop_plan> file_plan_;  // what the files say, lock or not
  std::string file_error_;                      // why they cannot be used
  bool gns_off_ = false;                        // the config given turns GNS off
  std::optional<std::uint64_t> dropin_usec_;
  std::optional<kubelet_stop_plan> active_plan_;
};

}  // namespace shim
