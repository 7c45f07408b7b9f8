#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "control/status_document.hpp"
#include "report/flat_json.hpp"

namespace shim {
namespace {

using namespace std::chrono_literals;
using testing::HasSubstr;
using testing::Not;
using state = logind_row::inhibitor_state;

shim_status ready_status() {
  shim_status s;
  s.listener_bound = true;
  s.logind.inhibitor = state::held;
  s.drain_delay = 70s;
  s.hold_needed = 135s;
  s.target = {.configured = true, .running = true, .detail = "pid 812 (kube-apiserver)"};
  return s;
}

status_snapshot snapshot(const shim_status& s) {
  return {.status = s,
          .version = "0.3.0",
          .signal = "SIGTERM",
          .sigterm_policy = "attach mode: forwarding only if PID 1's manager is stopping",
          .signal_delay = 0s,
          .exit_timeout = 65s};
}

TEST(StatusDocument, IdleSaysWhatTheNextShutdownDoes) {
  const auto s = ready_status();
  const std::string text = status_text(snapshot(s));
  EXPECT_THAT(text, HasSubstr("shutdown-shim 0.3.0: ready; holding a logind delay lock\n"));
  EXPECT_THAT(text, HasSubstr("phase          idle\n"));
  EXPECT_THAT(text, HasSubstr("lock           held\n"));
  EXPECT_THAT(text, HasSubstr("the shim sends SIGTERM at once; the reboot is held for the "
                              "drain-delay 1m10s and then up to --exit-timeout 1m5s"));
  EXPECT_THAT(text, HasSubstr("[+]target ok: pid 812 (kube-apiserver)"));
  EXPECT_THAT(text, Not(HasSubstr("drill")));
  EXPECT_THAT(text, Not(HasSubstr("\n  shutdown ")));
}

TEST(StatusDocument, JsonIsOneObjectWithTheSameFacts) {
  const auto s = ready_status();
  const std::string json = status_json(snapshot(s));
  EXPECT_EQ(json.back(), '\n');
  EXPECT_THAT(json, HasSubstr("\"ready\":true,\"version\":\"0.3.0\",\"phase\":\"idle\","
                              "\"lock\":\"held\""));
  EXPECT_THAT(json, HasSubstr("{\"name\":\"target\",\"ok\":true,\"detail\":\"pid 812 "
                              "(kube-apiserver)\"}"));
  EXPECT_THAT(json, HasSubstr("\"drain_delay_seconds\":70.000,\"signal_delay_seconds\":0.000,"
                              "\"exit_timeout_seconds\":65.000,\"hold_needed_seconds\":135.000"));
  EXPECT_THAT(json, Not(HasSubstr("\"shutdown\":{")));
  EXPECT_THAT(json, Not(HasSubstr(",,")));
}

TEST(StatusDocument, AHoldShowsWhatIsElapsedAndLeft) {
  auto s = ready_status();
  s.phase = {.what = hold_phase::kind::holding, .cause = "PrepareForShutdown(true) from :1.3"};
  s.phase_since_wall = std::chrono::system_clock::time_point(std::chrono::seconds(1'700'000'000));
  auto snap = snapshot(s);
  snap.elapsed = 12s;
  snap.signal_sent = true;
  const std::string text = status_text(snap);
  EXPECT_THAT(text, HasSubstr("shutdown       12s since 2023-11-14T22:13:20.000000Z "
                              "(PrepareForShutdown(true) from :1.3); "
                              "signal sent; drain 58s left; the target's exit awaited at most "
                              "2m3s more"));
  const std::string json = status_json(snap);
  EXPECT_THAT(json, HasSubstr("\"ready\":false"));
  EXPECT_THAT(json, HasSubstr("\"elapsed_seconds\":12.000,\"signal_sent\":true,"
                              "\"drain_left_seconds\":58.000,\"hold_left_seconds\":123.000"));
}

TEST(StatusDocument, ADrillFailsItsCheckAndShowsWhatIsLeft) {
  auto s = ready_status();
  const auto now = std::chrono::steady_clock::now();
  s.phase = {.what = hold_phase::kind::drilling,
             .cause = "shutdown-shim drill (uid 0, pid 4242)",
             .since = now - 10s,
             .ends = now + 60s};
  EXPECT_FALSE(s.ready());
  EXPECT_THAT(status_line(s), HasSubstr("drill, unready for the load balancer: a drill since "));
  EXPECT_THAT(status_line(s), Not(HasSubstr("drill failed"))) << "said once";
  auto snap = snapshot(s);
  snap.drill_elapsed = 10s;
  snap.drill_left = 60s;
  snap.lb_line = "checkers saw 3 x 503 by +2.1s";
  const std::string text = status_text(snap);
  EXPECT_THAT(text, HasSubstr("drill          10s elapsed, 1m0s left\n"));
  EXPECT_THAT(text, HasSubstr("load balancer  checkers saw 3 x 503 by +2.1s\n"));
  EXPECT_THAT(text, HasSubstr("[-]drill failed: a drill since "));
  EXPECT_THAT(text, HasSubstr("`shutdown-shim drill --stop` ends it"));
  const std::string json = status_json(snap);
  EXPECT_THAT(json, HasSubstr("\"cause\":\"shutdown-shim drill (uid 0, pid 4242)\","
                              "\"elapsed_seconds\":10.000,\"left_seconds\":60.000}"));
  EXPECT_THAT(json, HasSubstr("\"load_balancer\":{\"summary\":\"checkers saw 3 x 503 by +2.1s\"}"));
}

TEST(StatusDocument, KubeletsSignalIsNamedAsKubelets) {
  auto s = ready_status();
  s.target.configured = false;
  EXPECT_THAT(status_text(snapshot(s)), HasSubstr("no target: the shim only turns unready"));
}

}  // namespace
}  // namespace shim
