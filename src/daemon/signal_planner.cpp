#include "daemon/signal_planner.hpp"

#include "apiserver/apiserver_flags.hpp"

namespace shim {

namespace {
using seq = shutdown_sequence;
}

void signal_planner::start() {
  status_.listening_since = seq::clock::now();
  if (!status_.plan.applies()) return;
  lb_check_timer_.expires_after(shim_status::kLbProbeWindow);
  lb_check_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) lb_known();
  });
}

seq::signal_timing signal_planner::timing(seq::forward_decision decision) const {
  const auto& plan = status_.kubelet.plan();
  return {.decision = decision,
          .signal_delay = std::chrono::duration_cast<seq::duration>(status_.plan.signal_delay()),
          .kubelet_by = plan ? std::chrono::duration_cast<seq::duration>(plan->sigterm_latest)
                             : seq::duration(0)};
}

seq::forward_decision signal_planner::decision() const {
  return status_.kubelet.leaves_signal_to_kubelet() ? seq::forward_decision::kubelet_signals
                                                    : seq::forward_decision::forward;
}

void signal_planner::command_line(const std::vector<std::string>& argv, const std::string& source,
                                  bool running) {
  if (!running && from_process_) return;
  from_process_ = from_process_ || running;
  if (!status_.plan.set_apiserver(read_apiserver_flags(argv), source)) return;
  const auto lb = status_.lb_checks_shim(seq::clock::now());
  if (status_.plan.stops_accepting_early(lb)) {
    log_.warning(status_.plan.line(lb));
  } else {
    log_.notice("signal plan: " + status_.plan.line(lb));
  }
  notifier_.status();
}

void signal_planner::kubelet_changed(const std::string& manifest_source) {
  const auto& plan = status_.kubelet.plan();
  status_.plan.set_kubelet(
      status_.kubelet.leaves_signal_to_kubelet() && plan
          ? std::optional(signal_plan::kubelet_window{plan->sigterm_earliest, plan->sigterm_latest})
          : std::nullopt);
  const auto& manifest = status_.kubelet.manifest_command();
  if (!manifest.empty()) command_line(manifest, manifest_source, /*running=*/false);
  notifier_.status();
}

// A minute after start: an LB that does not probe the shim checks kube-apiserver itself, and with
// a delay shorter than the drain no signal time keeps its clients whole. Said once, as a WARNING;
// the check signal-plan, STATUS= and the metric go on saying it while it lasts.
void signal_planner::lb_known() {
  const auto lb = status_.lb_checks_shim(seq::clock::now());
  if (lb == false && status_.plan.stops_accepting_early(lb)) log_.warning(status_.plan.line(lb));
  notifier_.status();
}

}  // namespace shim
