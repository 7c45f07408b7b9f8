// The system bus edge without a bus: logind_edge driven as logind_inhibitor drives it (its events
// interface), the daemon's side a fake logind_events, a real logger and event log. What logind
// says must land in the rows and reach the daemon once; the bus itself is the integration suite's.

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "log_test_support.hpp"
#include "logind/logind_edge.hpp"

namespace shim {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::Not;
using lock = logind_inhibitor::lock_state;
using shown = logind_row::inhibitor_state;

// The daemon as the edge sees it: what it heard, in order.
struct fake_daemon final : logind_events {
  void prepare_for_shutdown(bool active, const std::string& cause) override {
    heard.push_back(fmt::format("prepare {} {}", active, cause));
  }
  void preparing_read(bool preparing) override {
    heard.push_back(fmt::format("preparing {}", preparing));
  }
  void first_attempt_done(const result<>& outcome) override {
    heard.push_back(outcome ? "first ok" : "first failed: " + outcome.error());
  }
  void system_state_read(const result<std::string>& state) override {
    heard.push_back("state " + state.value_or("?"));
  }
  void delay_locks_listed(const std::vector<logind_inhibitor::listed_lock>& locks) override {
    heard.push_back(fmt::format("locks {}", locks.size()));
  }
  void ensure_failed(const std::string& error) override { heard.push_back("ensure " + error); }
  void row_changed() override { ++row_changes; }

  std::vector<std::string> heard;
  int row_changes = 0;
};

struct edge_run {
  explicit edge_run(logind_settings cfg = {.drain_delay = 30s, .exit_timeout = 90s})
      : edge(io, std::move(cfg), log, events, row, daemon) {}

  // The causes of the event log's records of one kind.
  std::vector<std::string> causes(std::string_view kind) const {
    std::vector<std::string> out;
    for (const auto& r : test::event_records(events_path, kind)) {
      out.push_back(test::get(r, "cause").text);
    }
    return out;
  }

  boost::asio::io_context io;
  test::captured_output log_output;
  logger log{log_format::text, log_output.fd(), false};
  test::temp_dir dir;
  std::string events_path = dir.path() + "/events.jsonl";
  event_recorder events{log, events_path};
  logind_row row;
  fake_daemon daemon;
  logind_edge edge;
};

TEST(LogindEdge, UntilTheFirstAttemptEndsTheLockIsPendingThenATransientFault) {
  edge_run run;
  EXPECT_EQ(run.row.inhibitor, shown::pending);
  run.edge.lock_changed(lock::retrying, "org.freedesktop.login1 is not on the bus");
  EXPECT_EQ(run.row.inhibitor, shown::pending) << "the check fails until the first attempt ends";
  EXPECT_EQ(run.row.lock_word(), "pending");
  run.edge.first_attempt_done(result<>::failure("org.freedesktop.login1 is not on the bus"));
  EXPECT_EQ(run.row.inhibitor, shown::retrying);
  EXPECT_EQ(run.row.lock_detail(), "not held, retrying: org.freedesktop.login1 is not on the bus");
  // Once: a later end of an attempt is not the first.
  run.edge.first_attempt_done(result<>::success());
  EXPECT_EQ(run.daemon.heard,
            std::vector<std::string>{"first failed: org.freedesktop.login1 is not on the bus"});

  run.edge.lock_changed(lock::held, "");
  EXPECT_EQ(run.row.inhibitor, shown::held);
  EXPECT_EQ(run.row.lock_detail(), "");
  EXPECT_EQ(run.causes("InhibitorTaken"), std::vector<std::string>{"re-taken"});
  run.edge.lock_changed(lock::retrying, "lost the system bus");
  EXPECT_EQ(run.row.inhibitor, shown::retrying) << "a lost lock after the first attempt";
  EXPECT_EQ(run.daemon.row_changes, 3);
}

TEST(LogindEdge, TheLockTakenAtStartIsRecordedOnceAndReleasedIsNotRecordedHere) {
  edge_run run;
  run.edge.lock_changed(lock::held, "");
  run.edge.first_attempt_done(result<>::success());
  EXPECT_EQ(run.causes("InhibitorTaken"), std::vector<std::string>{"start"});
  run.edge.lock_changed(lock::released, "");
  EXPECT_EQ(run.row.inhibitor, shown::released);
  EXPECT_EQ(run.row.lock_word(), "released");
  // The daemon's release_inhibitor action records the release: it alone knows why.
  EXPECT_TRUE(run.causes("InhibitorReleased").empty());
  EXPECT_EQ(run.daemon.heard, std::vector<std::string>{"first ok"});
}

TEST(LogindEdge, ATooShortInhibitDelayIsShownAndWarnedAtOnce) {
  edge_run run;  // drain 30s + exit 90s
  run.edge.inhibit_delay_read(5'000'000);
  EXPECT_EQ(run.row.delay_max_usec, 5'000'000u);
  ASSERT_TRUE(run.row.delay_warning(120s));
  EXPECT_THAT(run.log_output.text(), HasSubstr("logind's InhibitDelayMaxUSec is 5s but"));
  EXPECT_EQ(run.daemon.row_changes, 1);

  edge_run enough;
  enough.edge.inhibit_delay_read(150'000'000);
  EXPECT_FALSE(enough.row.delay_warning(120s));
  EXPECT_THAT(enough.log_output.text(), Not(HasSubstr("InhibitDelayMaxUSec")));
}

TEST(LogindEdge, WhatLogindSaysOfShutdownsAndLocksReachesTheDaemonAsSaid) {
  edge_run run;
  run.edge.prepare_for_shutdown(true, "PrepareForShutdown(true) from :1.3");
  run.edge.preparing_read(false);
  run.edge.delay_locks_listed({{.what = "shutdown",
                                .who = "kubelet",
                                .why = "Kubelet needs time",
                                .mode = "delay",
                                .uid = 0,
                                .pid = 812}});
  run.edge.prepare_for_shutdown(false, "PrepareForShutdown(false) from :1.3");
  EXPECT_EQ(run.daemon.heard,
            (std::vector<std::string>{"prepare true PrepareForShutdown(true) from :1.3",
                                      "preparing false", "locks 1",
                                      "prepare false PrepareForShutdown(false) from :1.3"}));
  EXPECT_EQ(run.daemon.row_changes, 0) << "no row of the edge's changes with these";
}

}  // namespace
}  // namespace shim
