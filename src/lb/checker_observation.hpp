#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "log/log_line.hpp"

namespace shim {

// What the load balancer's health checkers made of /readyz turning unready at t0 (a drill's or a
// shutdown's unready moment), as health_checker_watch saw it by `elapsed` after t0: for each
// checker (an address that probed /readyz at least twice in the minute before t0) its probe
// interval and when it had seen the first not-ready answer and `fall` of them in a row. Offsets
// are from t0.
class checker_observation {
 public:
  using duration = std::chrono::nanoseconds;
  struct checker {
    std::string address;
    duration interval{};         // the median before t0 (a checker probed at least twice)
    unsigned probes_before = 0;  // in the minute before t0
    unsigned probes_since = 0;   // since t0
    unsigned unready_run = 0;    // not-ready answers in a row, the last one included
    std::optional<duration> first_unready = {};
    std::optional<duration> fell = {};  // the fall-th not-ready answer in a row
  };

  // checkers in any order: they are kept slowest first (not fallen yet, then the latest fall).
  // not_counted: the addresses that probed but are no checker, each "ADDRESS (why)"; table_full:
  // some address was not followed since a minute before t0, the table being full.
  checker_observation(unsigned fall, duration elapsed, std::vector<checker> checkers,
                      std::vector<std::string> not_counted = {}, bool table_full = false);

  const std::vector<checker>& checkers() const { return checkers_; }
  const std::vector<std::string>& not_counted() const { return not_counted_; }
  bool table_full() const { return table_full_; }
  std::size_t fallen() const;
  // When the last checker had seen `fall` not-ready answers in a row; nullopt while some have not
  // (or there is no checker).
  std::optional<duration> all_fell() const;

  // One line for the log and the CLI, against the configured drain-delay:
  //   "3 checkers saw 3 x 503 by +2.1 s; drain-delay 70 s leaves 67.9 s for propagation"
  //   "1 of 2 checkers saw 3 x 503 by +4.0 s; not yet by +6.0 s: 10.0.0.9 (1 x 503 in a row, ...)"
  //   "no remote checker probed /readyz in the minute before: ..."
  // then, when there are any, "; not counted: 10.0.0.3 (kubelet's readinessProbe, ...)" and
  // "; the table of probing addresses was full: ...".
  std::string summary(duration drain_delay) const;
  // One checker: "10.0.0.5 every 2.0 s: 6 probes since, first 503 at +0.4 s, 3 x 503 at +4.4 s".
  static std::string describe(const checker& c, unsigned fall);

  // Flat key/values for an event record (durations in whole milliseconds, signed):
  // lb_fall, lb_elapsed_ms, lb_checkers, lb_checkers_fallen, lb_fell_ms and lb_drain_left_ms (when
  // all fell), and for the first kListedCheckers checkers lb_checker<i>_{address,interval_ms,
  // probes_before,probes_since,first_unready_ms,fell_ms} (i from 1; absent figures left out);
  // lb_not_counted (how many) and lb_not_counted_list (the first kListedCheckers), lb_table_full.
  static constexpr std::size_t kListedCheckers = 8;
  log_fields fields(duration drain_delay) const;

 private:
  // The summary's part about the counted checkers.
  std::string checkers_summary(duration drain_delay) const;

  unsigned fall_;
  duration elapsed_;
  std::vector<checker> checkers_;
  std::vector<std::string> not_counted_;
  bool table_full_ = false;
};

}  // namespace shim
