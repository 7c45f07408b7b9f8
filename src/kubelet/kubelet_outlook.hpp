#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kubelet/kubelet_shutdown.hpp"
#include "log/log_line.hpp"
#include "util/result.hpp"

namespace shim {

// What kubelet's graceful node shutdown (GNS) will do to kube-apiserver at the next shutdown, and
// the shim's one policy about it (issues 13 and 19). Pure: the shim feeds it kubelet's lock as
// logind lists it and the files as read; the check `kubelet-shutdown`, the metrics, the log and
// the events are rendered from it.
//
// A second SIGTERM is always worse than a later first one: kube-apiserver exits at once on it,
// dropping every request in flight, while a first one from kubelet at +T still starts its graceful
// termination (its shutdown delay keeps it serving while the load balancer drains), and the shim's
// /readyz is unready from +0 whoever signals. So the policy, in attach and sidecar modes:
//  - kubelet will SIGTERM kube-apiserver at +a..+b, in whichever group its priority puts it
//    (kubelet's lock listed, config and manifest read, GNS on): the shim sends none, counts
//    kubelet's as the one and holds as ever; if kubelet's lock goes while the target still runs
//    (kubelet crashed, was stopped, gave up), the shim sends one SIGTERM at once;
//  - not known (no lock listed, a config that turns GNS off, no manifest: kube-apiserver not known
//    as its pod, a file unreadable, no config): the shim signals at +0 (with the lock listed: a
//    warning).
// In wrapper mode kubelet's SIGTERM reaches the shim, which forwards it once.
// In every mode a SIGKILL before drain-delay + exit-timeout, or one that cuts the pod's own
// terminationGracePeriodSeconds (the group's grace is shorter), is reported as a cut drain, with
// the kubelet setting that fixes it: in an OpenShift KubeletConfig when an operator renders the
// manifest (an openshift- namespace), else in kubelet's config file; never an edit of what an
// operator owns.
//
// The residual risk: kubelet sends its SIGTERM and then its lock goes before kube-apiserver has
// exited (kubelet crashes or is restarted in between, or its group's grace runs out while the pod
// still runs). The shim cannot see another process's signal, so it takes the lost lock for a
// signal that never came and sends its own: a second one, on which kube-apiserver exits at once.
// It is the one case left with two signals; without the fallback, a kubelet that died before its
// group's turn would leave kube-apiserver with none until the reboot kills it.
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
  // The kubelet that held the lock still runs without it (issue 32): it closed it itself, at the
  // end of its handling of a shutdown (its last group's timer), or by its stale close after a
  // cancel (it closes the old lock's fd number, which may be the new lock's). Its graceful node
  // shutdown is on all the same: it still stops kube-apiserver at its group's turn.
  void set_lockless(std::optional<std::uint32_t> kubelet_pid);
  // The files as read (a failure: why they cannot be used); a file not given is a success with
  // nothing in it. kubelet_dropin_usec: 99-kubelet.conf's InhibitDelayMaxSec, kubelet's total (a
  // failure is worded where the value would be).
  // etcd: its static pod, when --static-pod-manifest is kubelet's directory and it is there.
  void set_files(const result<kubelet_shutdown_config>& config,
                 const result<static_pod_priority>& manifest,
                 const result<std::optional<std::uint64_t>>& kubelet_dropin_usec,
                 const std::optional<static_pod_priority>& etcd = std::nullopt);

  // Anything to say: kubelet's lock is listed (or its kubelet runs on), or a file was given.
  bool applies() const {
    return kubelet_pid() || settings_.config_given || settings_.manifest_given;
  }
  // The pid holding kubelet's lock, as logind last listed it; none when it is not listed.
  const std::optional<std::uint32_t>& lock_pid() const { return lock_pid_; }
  const std::optional<std::uint32_t>& lockless_pid() const { return lockless_pid_; }
  // The kubelet whose graceful node shutdown is on: holding its lock, or running on without it.
  std::optional<std::uint32_t> kubelet_pid() const { return lock_pid_ ? lock_pid_ : lockless_pid_; }
  // kube-apiserver's container's command in its manifest; empty when not read.
  const std::vector<std::string>& manifest_command() const { return manifest_command_; }
  // kubelet's stop of kube-apiserver, when its lock is listed and both files are known.
  const std::optional<kubelet_stop_plan>& plan() const { return active_plan_; }

  // The policy: the shim sends no signal of its own, and counts kubelet's.
  bool leaves_signal_to_kubelet() const;
  // kubelet's SIGKILL may come before drain-delay + exit-timeout, or cut the pod's own grace.
  bool cuts_drain() const;
  // The shim signals at +0 while kubelet's lock is listed but its plan is not known: if
  // kube-apiserver is kubelet's pod, kubelet's SIGTERM will be a second one. Never when the plan
  // is known (the shim then leaves the signal to kubelet), nor in wrapper mode.
  bool second_signal() const;

  // One line for the check and the events: what kubelet will do and what the shim does.
  std::string summary() const;
  // The same in a few words, for the log line of a normal outlook: who signals, and where
  // summary() is.
  std::string headline() const;
  // The same when it is a problem an operator must fix (logged as a WARNING), else nothing.
  std::optional<std::string> warning() const;
  // For the event recorded at a shutdown.
  log_fields fields() const;
  // kubelet's SIGTERM and SIGKILL windows, in seconds from the shutdown; empty without a plan.
  log_fields window_fields() const;
  // kubelet stops etcd no later than kube-apiserver (kubeadm gives both the same priority): every
  // request kube-apiserver needs etcd for fails during its drain. Known only with kubelet's plan
  // and etcd's manifest (--static-pod-manifest naming kubelet's directory).
  std::optional<bool> stops_etcd_with_apiserver() const;

 private:
  std::string plan_words() const;
  std::string cut_words() const;
  std::string group_fix(std::int64_t seconds) const;
  std::string etcd_words() const;
  std::int64_t hold_seconds() const;          // drain-delay + exit-timeout, whole seconds up
  std::int64_t group_needed_seconds() const;  // what kube-apiserver's group must give it
  void update();

  settings settings_;
  std::optional<std::uint32_t> lock_pid_;
  std::optional<std::uint32_t> lockless_pid_;
  std::vector<std::string> manifest_command_;
  std::optional<kubelet_stop_plan> etcd_plan_;  // what the files say of etcd's pod
  std::optional<kubelet_stop_plan> file_plan_;  // what the files say, lock or not
  std::string file_error_;                      // why they cannot be used
  bool gns_off_ = false;                        // the config given turns GNS off
  bool operator_manifest_ = false;              // static_pod_priority::rendered_by_operator()
  std::optional<std::uint64_t> dropin_usec_;
  std::string dropin_error_;  // 99-kubelet.conf could not be read
  std::optional<kubelet_stop_plan> active_plan_;
};

}  // namespace shim
