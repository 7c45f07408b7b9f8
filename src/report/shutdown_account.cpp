#include "report/shutdown_account.hpp"

#include <fmt/format.h>

namespace shim {
namespace {

// The shim's KubeletShutdown words: at most 1233 bytes (shim_status.cpp).
constexpr std::size_t kMaxKubeletWords = 2048;

std::optional<double> seconds_between(const std::optional<std::int64_t>& from,
                                      const std::optional<std::int64_t>& to) {
  if (!from || !to) return std::nullopt;
  return static_cast<double>(*to - *from) / 1e6;
}

}  // namespace

shutdown_account::shutdown_account(const event_record& initiated, bool target_gone)
    : wall_(initiated.wall),
      trigger_(initiated.cause),
      holder_pid_(initiated.pid),
      delay_max_usec_(initiated.inhibit_delay_max_usec),
      target_gone_(target_gone),
      unready_us_(initiated.monotonic_us),
      last_us_(initiated.monotonic_us) {}

void shutdown_account::add(const event_record& r) {
  const bool holder = r.pid == holder_pid_;
  if (holder && r.monotonic_us && (!last_us_ || *r.monotonic_us > *last_us_)) {
    last_us_ = r.monotonic_us;
  }
  if (r.event == "SignalForwarded" || r.event == "SignalLeftToKubelet") {
    // The first one counts, but for the shim's own after one left to kubelet: kubelet's lock went
    // first, and the shim's signal was the one.
    const bool taken_back = r.event == "SignalForwarded" && signal_by_kubelet_;
    if (!signal_us_ || taken_back) {
      signal_us_ = r.monotonic_us;
      signal_by_kubelet_ = r.event == "SignalLeftToKubelet";
      taken_back_ = taken_back;
    }
  } else if (r.event == "TargetRestarted") {
    if (!released_us_) ++targets_restarted_;
  } else if (r.event == "KubeletGone") {
    if (holder && kubelet_gone_.empty()) kubelet_gone_ = r.message.substr(0, kMaxKubeletWords);
  } else if (r.event == "KubeletShutdown") {
    // The shim's own words, a few hundred bytes; bounded all the same, one per boot is kept.
    if (holder && kubelet_.empty()) kubelet_ = r.message.substr(0, kMaxKubeletWords);
  } else if (r.event == "TargetExited") {
    // Several targets: the last exit within the hold; after it, the first one.
    if (signal_us_ && (!released_us_ || !target_exit_us_)) target_exit_us_ = r.monotonic_us;
  } else if (r.event == "DrainElapsed") {
    if (holder && !released_us_) {
      drain_elapsed_ = true;
      // The shim's own line, bounded all the same, as kubelet's.
      lb_ = r.lb.substr(0, kMaxKubeletWords);
    }
  } else if (r.event == "InhibitorReleased") {
    if (holder && !released_us_ && restarted_pid_ == 0) released_us_ = r.monotonic_us;
  } else if (r.event == "ShutdownCancelled") {
    if (!cancel_cause_) cancel_cause_ = r.cause;
  } else if (r.event == "Started") {
    if (!holder && !released_us_ && restarted_pid_ == 0) restarted_pid_ = r.pid;
  }
  if (!delay_max_usec_ && r.inhibit_delay_max_usec) delay_max_usec_ = r.inhibit_delay_max_usec;
}

shutdown_verdict shutdown_account::verdict(bool boot_over) const {
  using v = shutdown_verdict;
  if (cancel_cause_) return v::cancelled;
  if (!signal_us_ && target_gone_) return v::no_signal;
  if (released_us_) {
    if (signal_us_) return drain_elapsed_ ? v::clean : v::cut_short;
    return drain_elapsed_ ? v::no_signal : v::restart;
  }
  if (boot_over || restarted_pid_ != 0) return v::cut_short;
  return v::in_progress;
}

std::string shutdown_account::detail(bool boot_over) const {
  switch (verdict(boot_over)) {
    case shutdown_verdict::clean:
      if (signal_by_kubelet_) {
        return "the signal was left to kubelet (the shim sent none), the drain ran in full, then "
               "the lock was released";
      }
      return taken_back_ ? "kubelet's lock went before kube-apiserver had exited and the shim "
                           "sent the signal, the drain ran in full, then the lock was released"
                         : "signal forwarded, the drain ran in full, then the lock was released";
    case shutdown_verdict::cancelled:
      return *cancel_cause_;
    case shutdown_verdict::no_signal:
      return target_gone_ ? "the target had exited before the shutdown"
                          : "no target had the signal; the drain ran, then the lock was released";
    case shutdown_verdict::restart:
      return "the shim's " + trigger_ + " was not passed on; the lock was released at once";
    case shutdown_verdict::cut_short: {
      if (released_us_) return "the lock was released before the drain had elapsed";
      const std::string span =
          records_span() ? fmt::format(" {:.1f} s into the hold", *records_span()) : "";
      if (restarted_pid_ != 0) {
        return fmt::format(
            "the shim (pid {}) stopped{} without releasing the lock; pid {} started after it",
            holder_pid_, span, restarted_pid_);
      }
      return fmt::format("the records of the shim (pid {}) stop{}, before the lock was released",
                         holder_pid_, span);
    }
    case shutdown_verdict::in_progress:
      return "no end recorded yet in this boot";
    case shutdown_verdict::untrusted:
      break;  // never a verdict of the records themselves (shutdown_history::boot)
  }
  return {};
}

std::optional<double> shutdown_account::unready_to_signal() const {
  return seconds_between(unready_us_, signal_us_);
}

std::optional<double> shutdown_account::signal_to_target_exit() const {
  return seconds_between(signal_us_, target_exit_us_);
}

std::optional<double> shutdown_account::hold() const {
  return seconds_between(unready_us_, released_us_);
}

std::optional<double> shutdown_account::records_span() const {
  return seconds_between(unready_us_, last_us_);
}

}  // namespace shim
