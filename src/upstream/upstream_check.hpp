#pragma once

#include <boost/asio/io_context.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "log/event_recorder.hpp"
#include "log/logger.hpp"
#include "upstream/upstream_settings.hpp"
#include "upstream/upstream_status.hpp"

namespace shim {

// The upstream check (--upstream-readyz): the probe of kube-apiserver's own /readyz and all that
// follows from its outcomes. Each outcome goes from here into the check's row of the status table
// (its hysteresis and statistics, upstream_status), into the log and the event log; the daemon
// hears only that the check changed state. It owns no other state of the shim.
//
// Probing stops for a drain (pause): kube-apiserver turns its own /readyz to 500 once it has the
// signal, so probes would only count expected failures, load a server that is draining, and fill
// the log. After a cancel (resume) it starts again from failed, so the node rejoins the load
// balancer only after --upstream-rise passes, whatever the apiserver went through meanwhile.
class upstream_check {
 public:
  struct handlers {
    // The check passed or failed (the row changed its verdict): STATUS= is due again.
    std::function<void()> changed;
  };
  // What the check drives: upstream_probe on the loop, a fake in the tests. The first probe starts
  // at once; outcomes go to the handler the probe was made with, never from inside start().
  class probe {
   public:
    virtual ~probe() = default;
    virtual void start() = 0;
    virtual void stop() = 0;
  };
  using make_probe =
      std::function<std::unique_ptr<probe>(std::function<void(const probe_outcome&)> probed)>;

  // Puts the check's row into the status table (row), failed until --upstream-rise passes.
  upstream_check(boost::asio::io_context& io, const upstream_settings& settings, logger& log,
                 event_recorder& events, std::optional<upstream_status>& row, handlers h);
  upstream_check(const upstream_settings& settings, logger& log, event_recorder& events,
                 std::optional<upstream_status>& row, handlers h, const make_probe& make);
  ~upstream_check();
  upstream_check(const upstream_check&) = delete;
  upstream_check& operator=(const upstream_check&) = delete;

  // The first probe starts at once.
  void start();
  // For a drain: no probe until resume(); the row says why.
  void pause();
  // After a cancelled shutdown: probing again from failed; nothing when not paused.
  void resume();
  // For good (the shim stops).
  void stop();

 private:
  void probed(const probe_outcome& outcome);

  logger& log_;
  event_recorder& events_;
  upstream_status& row_;
  handlers handlers_;
  std::string problem_;  // the file problem last warned about
  std::unique_ptr<probe> probe_;
};

}  // namespace shim
