#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <filesystem>
#include <string>

#include "control/control_routes.hpp"
#include "control/status_document.hpp"
#include "core/sequence_runner.hpp"
#include "http/control_server.hpp"
#include "lb/load_balancer_watch.hpp"
#include "log/event_recorder.hpp"
#include "log/logger.hpp"
#include "readiness/shim_status.hpp"

namespace shim {

// The control socket's side of the daemon (issue 23): it answers `status` and the drill's
// requests, asks the sequence for a drill, and keeps what a drill did (its fall, its outcome) for
// the next `drill` and `status`.
class control_desk {
 public:
  struct settings {
    std::chrono::nanoseconds drain_delay{0};
    std::chrono::nanoseconds exit_timeout{0};
    std::string signal;          // what the target gets: "SIGTERM"
    std::string sigterm_policy;  // what a SIGTERM to the shim does
  };

  control_desk(boost::asio::io_context& io, settings s, sequence_runner& runner,
               load_balancer_watch& lb, shim_status& status, logger& log, event_recorder& events);
  control_desk(const control_desk&) = delete;
  control_desk& operator=(const control_desk&) = delete;

  // Listens at dir/control.sock (dir: the claimed state directory). Not a reason to stop: the
  // shim works without it, and says why there is none.
  void listen(const std::filesystem::path& dir);
  void stop() { server_.stop(); }

  // The sequence's start_drill and end_drill actions.
  void drill_started(const shutdown_sequence::action& a);
  void drill_ended(const shutdown_sequence::action& a);

 private:
  control_reply status(bool json) const;
  control_reply start_drill(const drill_request& request);
  control_reply drill(bool json) const;
  control_reply stop_drill(bool json);
  std::string drill_progress() const;

  settings settings_;
  sequence_runner& runner_;
  load_balancer_watch& lb_;
  shim_status& status_;
  logger& log_;
  event_recorder& events_;
  control_server server_;
  unsigned drill_fall_ = load_balancer_watch::kDefaultFall;  // the drill's --lb-fall
  std::string last_drill_;  // how the last drill ended and what the load balancer did
};

}  // namespace shim
