#include "kubelet/kubelet_outlook.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "logind/logind_config.hpp"
#include "util/duration_text.hpp"
#include "util/joined.hpp"

namespace shim {

void kubelet_outlook::set_files(const result<kubelet_shutdown_config>& config,
                                const result<static_pod_priority>& manifest,
                                const result<std::optional<std::uint64_t>>& kubelet_dropin_usec,
                                const std::optional<static_pod_priority>& etcd) {
  file_plan_.reset();
  etcd_plan_.reset();
  manifest_command_ = manifest ? manifest.value().command : std::vector<std::string>{};
  file_error_.clear();
  dropin_usec_ = kubelet_dropin_usec.value_or(std::nullopt);
  dropin_error_ = kubelet_dropin_usec ? std::string() : kubelet_dropin_usec.error();
  if (!config) file_error_ = config.error();
  if (!manifest) file_error_ += (file_error_.empty() ? "" : "; ") + manifest.error();
  gns_off_ = config && settings_.config_given && config.value().groups().empty();
  operator_manifest_ = manifest && manifest.value().rendered_by_operator();
  // Only the manifest says that kube-apiserver is kubelet's static pod at all, and in which group.
  if (file_error_.empty() && settings_.config_given && settings_.manifest_given) {
    file_plan_ = plan_kubelet_stop(config.value(), manifest.value());
    if (etcd) etcd_plan_ = plan_kubelet_stop(config.value(), *etcd);
  }
  update();
}

void kubelet_outlook::set_lock(std::optional<std::uint32_t> kubelet_pid) {
  lock_pid_ = kubelet_pid;
  update();
}

void kubelet_outlook::set_lockless(std::optional<std::uint32_t> kubelet_pid) {
  lockless_pid_ = kubelet_pid;
  update();
}

void kubelet_outlook::update() { active_plan_ = kubelet_pid() ? file_plan_ : std::nullopt; }

std::optional<bool> kubelet_outlook::stops_etcd_with_apiserver() const {
  if (!active_plan_ || !etcd_plan_) return std::nullopt;
  return etcd_plan_->group_index <= active_plan_->group_index;
}

std::int64_t kubelet_outlook::hold_seconds() const {
  return std::chrono::ceil<std::chrono::seconds>(settings_.hold_needed).count();
}

// kubelet kills at the shorter of the group's grace and the pod's: the group must cover both the
// hold and the pod's own grace. An operator's pod grace is not the node's to raise: then the shim's
// hold must fit in it instead.
std::int64_t kubelet_outlook::group_needed_seconds() const {
  const std::int64_t pod = active_plan_->pod_grace.count();
  return operator_manifest_ ? pod : std::max(hold_seconds(), pod);
}

// etcd's group against kube-apiserver's, and the settings that give kube-apiserver a group of its
// own before etcd's, as long as cut_words() would want it.
std::string kubelet_outlook::etcd_words() const {
  const auto& api = *active_plan_;
  const auto& etcd = *etcd_plan_;
  const std::string where =
      etcd.group_index == api.group_index
          ? fmt::format("in kube-apiserver's group (group {} of {}), together with it",
                        api.group_index + 1, api.groups.size())
          : fmt::format("in group {} of {}, before kube-apiserver's ({})", etcd.group_index + 1,
                        api.groups.size(), api.group_index + 1);
  const std::int64_t hold = group_needed_seconds();
  const std::int64_t etcd_grace = etcd.groups[etcd.group_index].grace_seconds;
  std::string fix;
  if (etcd.pod_priority > api.pod_priority) {
    fix = fmt::format(
        "give etcd a group after kube-apiserver's: kubelet's shutdownGracePeriodByPodPriority "
        "with {{priority: {}, shutdownGracePeriodSeconds: {}}} and {{priority: {}, "
        "shutdownGracePeriodSeconds: {}}}",
        api.pod_priority, hold, etcd.pod_priority, etcd_grace);
  } else {
    // The same priority (kubeadm's 2000001000 for both): kube-apiserver's must go down, to the
    // other system class's, since a mirror pod's priority must match its class.
    fix = fmt::format(
        "give kube-apiserver a group of its own before etcd's: its manifest's priorityClassName: "
        "system-cluster-critical with priority: {} (kubeadm: a patch in --patches), and kubelet's "
        "shutdownGracePeriodByPodPriority with {{priority: {}, shutdownGracePeriodSeconds: {}}} "
        "and {{priority: {}, shutdownGracePeriodSeconds: {}}}",
        kSystemCriticalPriority, kSystemCriticalPriority, hold, etcd.pod_priority, etcd_grace);
  }
  return fmt::format(
      "kubelet stops etcd (priority {}) {}: every request kube-apiserver needs etcd for fails "
      "during its drain; {}",
      etcd.pod_priority, where, fix);
}

bool kubelet_outlook::leaves_signal_to_kubelet() const {
  return !settings_.wrapper && active_plan_.has_value();
}

bool kubelet_outlook::cuts_drain() const {
  return active_plan_ && (active_plan_->sigkill_earliest() < settings_.hold_needed ||
                          active_plan_->group_cuts_pod_grace());
}

bool kubelet_outlook::second_signal() const {
  return !settings_.wrapper && kubelet_pid() && !active_plan_;
}

std::string kubelet_outlook::plan_words() const {
  std::string words = active_plan_->describe();
  if (settings_.wrapper) return words + ": its SIGTERM reaches the shim, which forwards one at +0s";
  return words +
         ": the shim sends no signal of its own, kubelet's is the one; if kubelet's lock goes "
         "before kube-apiserver has exited, the shim signals it at once";
}

// The kubelet settings that give kube-apiserver's group `seconds`: the one entry of
// shutdownGracePeriodByPodPriority, or the two periods migrateConfig() makes its groups of.
std::string kubelet_outlook::group_fix(std::int64_t seconds) const {
  const auto& p = *active_plan_;
  const auto& g = p.groups[p.group_index];
  std::string fields;
  if (p.by_pod_priority) {
    fields = fmt::format(
        "shutdownGracePeriodByPodPriority: its entry {{priority: {}, shutdownGracePeriodSeconds: "
        "{}}}, now {}",
        g.priority, seconds, g.grace_seconds);
  } else if (p.group_index == 1) {
    fields = fmt::format("shutdownGracePeriod: {}s, shutdownGracePeriodCriticalPods: {}s",
                         p.groups[0].grace_seconds + seconds, seconds);
  } else {
    const auto critical = p.groups[1].grace_seconds;
    fields = fmt::format("shutdownGracePeriod: {}s, shutdownGracePeriodCriticalPods: {}s",
                         critical + seconds, critical);
  }
  if (operator_manifest_) {
    // MCO renders kubelet's config on OpenShift too: a KubeletConfig is how to change it.
    return fmt::format(
        "give kube-apiserver's group {}s with an OpenShift KubeletConfig for the master pool "
        "(apiVersion: machineconfiguration.openshift.io/v1, kind: KubeletConfig, "
        "spec.machineConfigPoolSelector.matchLabels: "
        "{{pools.operator.machineconfiguration.openshift.io/master: \"\"}}, spec.kubeletConfig: "
        "{{{}}})",
        seconds, fields);
  }
  return fmt::format("give kube-apiserver's group {}s in kubelet's config file ({})", seconds,
                     fields);
}

std::string kubelet_outlook::cut_words() const {
  const auto& p = *active_plan_;
  const auto kill = p.sigkill_earliest();
  std::vector<std::string> cuts;
  if (kill < settings_.hold_needed) {
    cuts.push_back(kill < settings_.drain_delay
                       ? fmt::format("the drain from {} to {}",
                                     format_duration(settings_.drain_delay), format_duration(kill))
                       : fmt::format("kube-apiserver's exit to {} after the drain",
                                     format_duration(kill - settings_.drain_delay)));
  }
  if (p.group_cuts_pod_grace()) {
    cuts.push_back(fmt::format("the pod's terminationGracePeriodSeconds from {}s to {}s",
                               p.pod_grace.count(), p.grace.count()));
  }
  const std::int64_t hold = hold_seconds();
  const std::int64_t pod = p.pod_grace.count();
  const std::int64_t group_needed = group_needed_seconds();
  std::vector<std::string> fixes;
  if (p.groups[p.group_index].grace_seconds < group_needed) {
    fixes.push_back(group_fix(group_needed));
  }
  if (pod < hold) {
    fixes.push_back(
        operator_manifest_
            ? fmt::format("keep --drain-delay + --exit-timeout within the pod's {}s "
                          "(its terminationGracePeriodSeconds is its operator's)",
                          pod)
            : fmt::format("give the static pod's manifest terminationGracePeriodSeconds: {}",
                          hold));
  }
  return fmt::format("kubelet's SIGKILL cuts {} (drain-delay + exit-timeout is {}): {}",
                     joined(cuts, " and "), format_duration(settings_.hold_needed),
                     joined(fixes, "; and "));
}

std::string kubelet_outlook::summary() const {
  std::string text;
  if (!kubelet_pid()) {
    text =
        "kubelet holds no graceful-node-shutdown lock (not running, or its shutdown manager did "
        "not start): the shim signals kube-apiserver itself";
    if (!file_error_.empty()) return text + "; " + file_error_;
    if (gns_off_) return text + "; --kubelet-config turns graceful node shutdown off";
    if (file_plan_) text += "; once its lock is listed: " + file_plan_->describe();
    return text;
  }
  text = lock_pid_
             ? fmt::format("kubelet (pid {}) holds a graceful-node-shutdown delay lock", *lock_pid_)
             : fmt::format(
                   "kubelet (pid {}) runs on without its graceful-node-shutdown lock, which "
                   "it closed itself (the end of its handling of a shutdown, or its stale "
                   "close after a cancel): it still stops its pods at a shutdown",
                   *lockless_pid_);
  if (dropin_usec_) {
    text += fmt::format(" for {} (99-kubelet.conf)", describe_usec(*dropin_usec_));
  } else if (!dropin_error_.empty()) {
    text += " (" + dropin_error_ + ")";
  }
  const std::string unknown_end =
      settings_.wrapper ? "; in wrapper mode its SIGTERM reaches the shim, which forwards one"
                        : "; if kube-apiserver is its static pod, kubelet's SIGTERM will be a "
                          "second one";
  if (!file_error_.empty()) {
    return text + "; " + file_error_ + ": the shim signals kube-apiserver itself" + unknown_end;
  }
  if (gns_off_) {
    return text +
           ", but --kubelet-config turns graceful node shutdown off: it is not the config kubelet "
           "runs with; the shim signals kube-apiserver itself" +
           unknown_end;
  }
  if (!settings_.config_given || !settings_.manifest_given) {
    const std::string missing = !settings_.config_given && !settings_.manifest_given
                                    ? "--kubelet-config and --static-pod-manifest"
                                : !settings_.config_given ? "--kubelet-config"
                                                          : "--static-pod-manifest";
    return text + "; without " + missing +
           " the shim cannot tell whether and when kubelet stops kube-apiserver, and signals it "
           "itself" +
           unknown_end + (settings_.wrapper ? "" : ": give " + missing);
  }
  text += "; " + plan_words();
  if (cuts_drain()) text += "; " + cut_words();
  if (stops_etcd_with_apiserver() == true) text += "; WARNING: " + etcd_words();
  const auto requested =
      std::chrono::duration_cast<std::chrono::microseconds>(active_plan_->period_requested).count();
  if (dropin_usec_ && *dropin_usec_ != static_cast<std::uint64_t>(requested)) {
    // Only a hint: kubelet rewrites the file only when logind's value is too short for it, so an
    // earlier config's value may linger there.
    text += fmt::format(
        "; 99-kubelet.conf asks logind for {}, --kubelet-config adds up to {}: is it the file "
        "kubelet runs with?",
        describe_usec(*dropin_usec_), format_duration(active_plan_->period_requested));
  }
  return text;
}

std::string kubelet_outlook::headline() const {
  std::string text =
      kubelet_pid() ? fmt::format("kubelet (pid {})", *kubelet_pid()) : std::string("kubelet");
  if (leaves_signal_to_kubelet()) {
    text += " sends kube-apiserver its SIGTERM, the shim none";
  } else {
    text += lock_pid_ ? " holds a shutdown lock" : " holds no shutdown lock";
    text +=
        settings_.wrapper ? ": the shim forwards one SIGTERM" : ": the shim signals kube-apiserver";
  }
  return text + " (detail: /readyz?verbose)";
}

std::optional<std::string> kubelet_outlook::warning() const {
  if (!cuts_drain() && !second_signal() && stops_etcd_with_apiserver() != true) {
    return std::nullopt;
  }
  return summary();
}

log_fields kubelet_outlook::window_fields() const {
  log_fields f;
  if (!active_plan_) return f;
  const auto& p = *active_plan_;
  f.emplace_back("kubelet_sigterm_earliest_s", std::to_string(p.sigterm_earliest.count()));
  f.emplace_back("kubelet_sigterm_latest_s", std::to_string(p.sigterm_latest.count()));
  f.emplace_back("kubelet_sigkill_earliest_s", std::to_string(p.sigkill_earliest().count()));
  f.emplace_back("kubelet_sigkill_latest_s", std::to_string(p.sigkill_latest().count()));
  return f;
}

log_fields kubelet_outlook::fields() const {
  log_fields f;
  if (kubelet_pid()) f.emplace_back("kubelet_pid", std::to_string(*kubelet_pid()));
  if (!lock_pid_ && lockless_pid_) f.emplace_back("kubelet_lock", "closed by kubelet");
  for (auto& w : window_fields()) f.push_back(std::move(w));
  if (active_plan_) {
    f.emplace_back("kubelet_pod_priority", std::to_string(active_plan_->pod_priority));
  }
  f.emplace_back("shim_signals", leaves_signal_to_kubelet() ? "false" : "true");
  f.emplace_back("kubelet_cuts_drain", cuts_drain() ? "true" : "false");
  if (const auto etcd = stops_etcd_with_apiserver()) {
    f.emplace_back("kubelet_stops_etcd_with_apiserver", *etcd ? "true" : "false");
  }
  return f;
}

}  // namespace shim
