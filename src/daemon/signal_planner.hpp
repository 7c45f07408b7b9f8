#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <string>
#include <vector>

#include "core/shutdown_sequence.hpp"
#include "daemon/systemd_notifier.hpp"
#include "log/logger.hpp"
#include "readiness/shim_status.hpp"

namespace shim {

// When the one SIGTERM goes (issue 32), kept up to date in the readiness table's signal-plan row
// from what the edges learn: kube-apiserver's shutdown flags (the running target's command line,
// which wins, or the static pod manifest's until a target has run), kubelet's SIGTERM window, and
// whether a load balancer probes the shim. Each trigger takes its timing from here.
class signal_planner {
 public:
  signal_planner(boost::asio::io_context& io, shim_status& status, systemd_notifier& notifier,
                 logger& log)
      : status_(status), notifier_(notifier), log_(log), lb_check_timer_(io) {}

  // Once the listener answers: whether a load balancer checks this shim is known only after a
  // window of its probes.
  void start();
  void stop() { lb_check_timer_.cancel(); }

  // Who signals the next shutdown and when, as the plan says now; decision: the caller's.
  shutdown_sequence::signal_timing timing(shutdown_sequence::forward_decision decision) const;
  // Who signals at a logind shutdown: kubelet, where its graceful node shutdown will.
  shutdown_sequence::forward_decision decision() const;

  void command_line(const std::vector<std::string>& argv, const std::string& source, bool running);
  // The kubelet row changed; manifest_source: where the manifest's command came from.
  void kubelet_changed(const std::string& manifest_source);

 private:
  void lb_known();

  shim_status& status_;
  systemd_notifier& notifier_;
  logger& log_;
  boost::asio::steady_timer lb_check_timer_;
  bool from_process_ = false;  // the plan's settings came from a running target
};

}  // namespace shim
