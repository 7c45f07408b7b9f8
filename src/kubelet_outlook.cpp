#include "kubelet_outlook.hpp"

#include <fmt/format.h>

#include "config.hpp"
#include "logind_config.hpp"

namespace shim {

namespace {

// kube-apiserver exits at once (exit 1) on a second SIGTERM, so a later group's signal after the
// shim's cuts its shutdown delay short: in ShimKubelet it exited at +3.0 s, when kubelet's came,
// instead of +6.3 s. Either fix leaves exactly one signal.
constexpr std::string_view kSecondSignalFix =
    "remove the static pod's priority so that kubelet stops it first and the shim leaves the "
    "signal to kubelet, or run the shim as the container's wrapper";

}  // namespace

void kubelet_outlook::set_files(const result<kubelet_shutdown_config>& config,
                                const result<static_pod_priority>& manifest,
                                std::optional<std::uint64_t> kubelet_dropin_usec) {
  file_plan_.reset();
  file_error_.clear();
  gns_off_ = false;
  dropin_usec_ = kubelet_dropin_usec;
  if (!config) file_error_ = config.error();
  if (!manifest) file_error_ += (file_error_.empty() ? "" : "; ") + manifest.error();
  if (file_error_.empty() && settings_.config_given) {
    file_plan_ = plan_kubelet_stop(config.value(), manifest.value());
    gns_off_ = !file_plan_;
  }
  update();
}

void kubelet_outlook::set_lock(std::optional<std::uint32_t> kubelet_pid) {
  lock_pid_ = kubelet_pid;
  update();
}

void kubelet_outlook::update() { active_plan_ = lock_pid_ ? file_plan_ : std::nullopt; }

bool kubelet_outlook::leaves_signal_to_kubelet() const {
  return !settings_.wrapper && active_plan_ && active_plan_->stops_at_start();
}

bool kubelet_outlook::cuts_drain() const {
  return active_plan_ && active_plan_->sigkill_earliest() < settings_.hold_needed;
}

bool kubelet_outlook::second_signal() const {
  return !settings_.wrapper && active_plan_ && !active_plan_->stops_at_start();
}

std::string kubelet_outlook::plan_words() const {
  const auto& p = *active_plan_;
  std::string words = p.describe();
  if (settings_.wrapper) {
    words += ": its SIGTERM reaches the shim, which forwards one at +0s";
  } else if (p.stops_at_start()) {
    words += ": the shim sends no signal of its own, kubelet's is the one";
  } else {
    words += fmt::format(
        ": the shim signals at +0s, so kubelet's SIGTERM will be a second one, on which "
        "kube-apiserver exits at once; {}",
        kSecondSignalFix);
  }
  return words;
}

std::string kubelet_outlook::cut_words() const {
  const auto& p = *active_plan_;
  const auto kill = p.sigkill_earliest();
  const std::string what =
      kill < settings_.drain_delay
          ? fmt::format("cuts the drain from {} to {}", format_duration(settings_.drain_delay),
                        format_duration(kill))
          : fmt::format("cuts kube-apiserver's exit to {} after the drain",
                        format_duration(kill - settings_.drain_delay));
  const auto needed = std::chrono::ceil<std::chrono::seconds>(settings_.hold_needed).count();
  return fmt::format(
      "kubelet's SIGKILL {} (drain-delay + exit-timeout is {}): give kube-apiserver's priority "
      "group (shutdownGracePeriodByPodPriority) a shutdownGracePeriodSeconds of at least {} and "
      "the static pod a terminationGracePeriodSeconds of at least {}",
      what, format_duration(settings_.hold_needed), needed, needed);
}

std::string kubelet_outlook::summary() const {
  std::string text;
  if (!lock_pid_) {
    text =
        "kubelet holds no graceful-node-shutdown lock (not running, or its shutdown manager did "
        "not start): the shim signals kube-apiserver itself";
    if (!file_error_.empty()) return text + "; " + file_error_;
    if (gns_off_) return text + "; --kubelet-config turns graceful node shutdown off";
    if (file_plan_) text += "; once its lock is listed: " + file_plan_->describe();
    return text;
  }
  text = fmt::format("kubelet (pid {}) holds a graceful-node-shutdown delay lock", *lock_pid_);
  if (dropin_usec_) {
    text += fmt::format(" for {} (99-kubelet.conf)", describe_usec(*dropin_usec_));
  }
  const std::string unknown_end =
      settings_.wrapper ? "; in wrapper mode its SIGTERM reaches the shim, which forwards one"
                        : "; if kube-apiserver is its static pod without priority, kubelet's "
                          "SIGTERM at +0s is a second one";
  if (!file_error_.empty()) {
    return text + "; " + file_error_ + ": the shim signals kube-apiserver itself" + unknown_end;
  }
  if (!settings_.config_given) {
    return text +
           "; without --kubelet-config the shim cannot tell when kubelet stops kube-apiserver, "
           "and signals it itself" +
           unknown_end +
           (settings_.wrapper ? "" : ": give --kubelet-config and --static-pod-manifest");
  }
  if (gns_off_) {
    return text +
           ", but --kubelet-config turns graceful node shutdown off: it is not the config kubelet "
           "runs with; the shim signals kube-apiserver itself" +
           unknown_end;
  }
  text += "; " + plan_words();
  if (cuts_drain()) text += "; " + cut_words();
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

std::optional<std::string> kubelet_outlook::warning() const {
  const bool unknown = lock_pid_ && !active_plan_ && !settings_.wrapper;
  if (!cuts_drain() && !second_signal() && !unknown) return std::nullopt;
  return summary();
}

log_fields kubelet_outlook::fields() const {
  log_fields f;
  if (lock_pid_) f.emplace_back("kubelet_pid", std::to_string(*lock_pid_));
  if (active_plan_) {
    const auto& p = *active_plan_;
    f.emplace_back("kubelet_sigterm_latest_s", std::to_string(p.sigterm_latest.count()));
    f.emplace_back("kubelet_sigkill_earliest_s", std::to_string(p.sigkill_earliest().count()));
    f.emplace_back("kubelet_pod_priority", std::to_string(p.pod_priority));
  }
  f.emplace_back("shim_signals", leaves_signal_to_kubelet() ? "false" : "true");
  f.emplace_back("kubelet_cuts_drain", cuts_drain() ? "true" : "false");
  return f;
}

}  // namespace shim
