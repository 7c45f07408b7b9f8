#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "apiserver/apiserver_flags.hpp"
#include "util/result.hpp"

namespace shim {

// When the one SIGTERM reaches kube-apiserver, worked out from kube-apiserver's own settings
// (issue 32), and what the shim cannot fix. Pure: the daemon feeds it what it reads (the target's
// command line, the static pod's manifest), who signals (kubelet's outlook) and whether a load
// balancer checks the shim's /readyz; the check `signal-plan`, STATUS=, `status`, the metrics and
// the events are rendered from it.
//
// kube-apiserver stops accepting new connections --shutdown-delay-duration after its SIGTERM
// (k8s.io/apiserver's default is 0, and kubeadm sets none). Which process the load balancer
// checks decides what must happen when (../shared/reference/real-node.md, measured against the
// real server behind HAProxy):
//   | the LB checks                  | SIGTERM at              | clients                          |
//   |--------------------------------|-------------------------|----------------------------------|
//   | the shim's /readyz (+0 unready)| drain - delay (>= 0)    | whole: accepting until the drain |
//   | kube-apiserver's own /readyz   | any                     | whole only if delay >= the drain |
// So by default the shim signals at max(0, drain - delay): at +0 when the delay covers the drain
// (an LB checking either process drains in time), else once the load balancer has drained.
// --signal-delay given explicitly wins. When the delay is not known (OpenShift keeps it in a file;
// nothing read yet) the shim signals at +0, as before issue 32, and says so.
class signal_plan {
 public:
  using duration = std::chrono::nanoseconds;
  struct settings {
    duration drain_delay{0};
    duration exit_timeout{0};
    std::optional<duration> signal_delay{};  // --signal-delay, when given
    bool has_target = false;
  };
  // kubelet's graceful node shutdown sends the signal: its SIGTERM window from the shutdown.
  struct kubelet_window {
    std::chrono::seconds earliest{0};
    std::chrono::seconds latest{0};
    friend bool operator==(const kubelet_window&, const kubelet_window&) = default;
  };

  signal_plan() = default;
  explicit signal_plan(settings s) : settings_(s) {}

  // kube-apiserver's settings as read (a failure says why they are not known), and from where:
  // "pid 812's command line", "--static-pod-manifest=PATH". True when the settings (or why they are
  // not known) changed, not only where they were read (a restarted kube-apiserver's new pid).
  bool set_apiserver(const result<apiserver_shutdown>& read, const std::string& source);
  // Who signals: kubelet (its window), or the shim (nullopt).
  void set_kubelet(std::optional<kubelet_window> kubelet) { kubelet_ = kubelet; }

  // There is a target to plan for.
  bool applies() const { return settings_.has_target; }
  // The shim's signal, from the unready moment.
  duration signal_delay() const;
  bool kubelet_signals() const { return kubelet_.has_value(); }
  const std::optional<apiserver_shutdown>& apiserver() const { return apiserver_; }

  // kube-apiserver stops accepting before the load balancer can have drained it: kubelet's SIGTERM
  // or an explicit --signal-delay too early, or (lb_checks_shim false: no load balancer probes the
  // shim, so it checks kube-apiserver itself) a delay shorter than the drain. lb_checks_shim
  // nullopt: not known yet, taken as the documented set-up (the LB checks the shim).
  bool stops_accepting_early(std::optional<bool> lb_checks_shim) const;

  // One line: who sends the SIGTERM when, from which settings; a problem with its fix.
  std::string line(std::optional<bool> lb_checks_shim) const;
  // The same plan in a few words, for STATUS=: "SIGTERM at +70s (kube-apiserver
  // --shutdown-delay-duration=0s)".
  std::string headline() const;

 private:
  std::string settings_words() const;
  std::string problem_words(std::optional<bool> lb_checks_shim) const;
  duration accepting_until() const;  // when kube-apiserver stops accepting, the earliest

  settings settings_;
  std::optional<apiserver_shutdown> apiserver_;
  std::string source_;   // where apiserver_ was read
  std::string unknown_;  // why it is not known; empty before anything was read
  std::optional<kubelet_window> kubelet_;
};

}  // namespace shim
