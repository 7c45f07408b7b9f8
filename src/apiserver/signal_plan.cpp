#include "apiserver/signal_plan.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "util/duration_text.hpp"

namespace shim {

namespace {

using std::chrono::seconds;

// "+70s", "+2.5s": offsets from the unready moment.
std::string at(std::chrono::nanoseconds d) { return "+" + format_duration(d); }

// A value for a flag that must be at least d: whole seconds, rounded up.
std::string whole_seconds(std::chrono::nanoseconds d) {
  return fmt::format("{}s", std::chrono::ceil<seconds>(d).count());
}

}  // namespace

bool signal_plan::set_apiserver(const result<apiserver_shutdown>& read, const std::string& source) {
  const std::optional<apiserver_shutdown> known = read ? std::optional(read.value()) : std::nullopt;
  const std::string unknown = read ? std::string() : read.error();
  const bool changed = known != apiserver_ || unknown != unknown_;
  apiserver_ = known;
  unknown_ = unknown;
  source_ = source;
  return changed;
}

signal_plan::duration signal_plan::signal_delay() const {
  if (settings_.signal_delay) return *settings_.signal_delay;
  if (!apiserver_) return duration(0);
  return std::max(settings_.drain_delay - apiserver_->delay, duration(0));
}

signal_plan::duration signal_plan::accepting_until() const {
  const duration signal = kubelet_ ? duration(kubelet_->earliest) : signal_delay();
  return signal + (apiserver_ ? apiserver_->delay : duration(0));
}

bool signal_plan::stops_accepting_early(std::optional<bool> lb_checks_shim) const {
  if (!settings_.has_target || !apiserver_) return false;
  if (accepting_until() < settings_.drain_delay) return true;
  return lb_checks_shim == false && apiserver_->delay < settings_.drain_delay;
}

std::string signal_plan::settings_words() const {
  if (apiserver_) {
    return fmt::format(
        "kube-apiserver --shutdown-delay-duration={}{} ({})", format_duration(apiserver_->delay),
        apiserver_->send_retry_after ? " --shutdown-send-retry-after=true" : "", source_);
  }
  if (!unknown_.empty()) {
    return "kube-apiserver's --shutdown-delay-duration is not known: " + unknown_ + " (" + source_ +
           ")";
  }
  return "kube-apiserver's --shutdown-delay-duration is not known yet (read from its command line "
         "once it runs)";
}

std::string signal_plan::problem_words(std::optional<bool> lb_checks_shim) const {
  if (!stops_accepting_early(lb_checks_shim)) return {};
  const duration drain = settings_.drain_delay;
  const duration delay = apiserver_->delay;
  // The fix kube-apiserver takes: its flag, in its manifest or through kubeadm.
  const auto delay_fix = [](duration needed) {
    const std::string v = whole_seconds(needed);
    return fmt::format(
        "--shutdown-delay-duration={} (kube-apiserver's static pod manifest; kubeadm: "
        "ClusterConfiguration apiServer.extraArgs shutdown-delay-duration: \"{}\")",
        v, v);
  };
  if (accepting_until() < drain) {
    const std::string when = at(accepting_until());
    if (kubelet_) {
      return fmt::format(
          "; WARNING: kube-apiserver stops accepting from {}, before the drain ({}) is over: "
          "requests sent to it meanwhile fail; give kube-apiserver {}",
          when, format_duration(drain), delay_fix(drain - duration(kubelet_->earliest)));
    }
    return fmt::format(
        "; WARNING: kube-apiserver stops accepting at {}, before the drain ({}) is over: requests "
        "sent to it meanwhile fail; drop --signal-delay (the shim then signals at {}), or give "
        "kube-apiserver {}",
        when, format_duration(drain), at(std::max(drain - delay, duration(0))),
        delay_fix(drain - signal_delay()));
  }
  return fmt::format(
      "; WARNING: no load balancer probed this shim's /readyz in the last minute: one that checks "
      "kube-apiserver's own /readyz cannot drain it, since kube-apiserver stops accepting {} after "
      "its SIGTERM, sooner than the drain ({}); no signal time helps: give kube-apiserver {}, or "
      "point the load balancer's health check at this shim's /readyz",
      format_duration(delay), format_duration(drain), delay_fix(drain));
}

std::string signal_plan::line(std::optional<bool> lb_checks_shim) const {
  if (!settings_.has_target) return {};
  std::string text;
  if (kubelet_) {
    const std::string window = kubelet_->earliest == kubelet_->latest
                                   ? at(kubelet_->earliest)
                                   : at(kubelet_->earliest) + ".." + at(kubelet_->latest);
    text = fmt::format("kubelet's graceful node shutdown sends the SIGTERM at {}; {}", window,
                       settings_words());
  } else if (settings_.signal_delay) {
    text = fmt::format("--signal-delay={}: SIGTERM at {}; {}",
                       format_duration(*settings_.signal_delay), at(*settings_.signal_delay),
                       settings_words());
  } else if (!apiserver_) {
    text = settings_words() +
           ": SIGTERM at +0s; if its delay is shorter than the drain, give "
           "--signal-delay=DRAIN-DELAY minus it";
  } else if (apiserver_->delay >= settings_.drain_delay) {
    text = fmt::format("{} covers the drain ({}): SIGTERM at +0s", settings_words(),
                       format_duration(settings_.drain_delay));
  } else {
    text = fmt::format("{}: SIGTERM at {}, once the load balancer has drained", settings_words(),
                       at(signal_delay()));
  }
  if (apiserver_) {
    text += fmt::format("; it stops accepting at {}{}", at(accepting_until()),
                        apiserver_->send_retry_after
                            ? " and answers 429 + Retry-After until its requests drain"
                            : "");
    const duration bound = settings_.drain_delay + settings_.exit_timeout;
    if (accepting_until() >= bound) {
      text += fmt::format(
          ", after the hold's bound (drain-delay + exit-timeout = {}): raise --exit-timeout",
          format_duration(bound));
    }
  }
  return text + problem_words(lb_checks_shim);
}

std::string signal_plan::headline() const {
  if (!settings_.has_target) return {};
  const std::string who = kubelet_ ? "kubelet's SIGTERM" : "SIGTERM at " + at(signal_delay());
  if (!apiserver_) return who + " (kube-apiserver's shutdown delay not known)";
  return fmt::format("{} (kube-apiserver --shutdown-delay-duration={})", who,
                     format_duration(apiserver_->delay));
}

}  // namespace shim
