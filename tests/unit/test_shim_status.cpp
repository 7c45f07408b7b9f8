#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <map>
#include <sstream>

#include "http/http_answer.hpp"
#include "http/prometheus_metrics.hpp"
#include "http/readiness_server.hpp"
#include "readiness/shim_status.hpp"
#include "readiness_server_test_support.hpp"

namespace shim {
namespace {

using readiness_test::answer_to;
using namespace std::chrono_literals;
using state = logind_row::inhibitor_state;

shim_status bound(state inhibitor) {
  shim_status s;
  s.listener_bound = true;
  s.logind.inhibitor = inhibitor;
  s.hold_needed = 135s;
  return s;
}

const shim_status::check* find(const std::vector<shim_status::check>& checks,
                               const std::string& name) {
  for (const auto& c : checks) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

TEST(ShimStatus, NotReadyUntilListenerBoundAndFirstLockAttemptDone) {
  shim_status s;
  EXPECT_FALSE(s.ready());
  s.listener_bound = true;
  EXPECT_FALSE(s.ready()) << "the first lock attempt is still pending";
  s.logind.inhibitor = state::held;
  EXPECT_TRUE(s.ready());
}

TEST(ShimStatus, TransientLockFaultsDoNotChangeReadiness) {
  EXPECT_TRUE(bound(state::retrying).ready());
  EXPECT_TRUE(bound(state::disabled).ready());
  auto s = bound(state::retrying);
  s.logind.inhibitor_detail = "system bus lost";
  auto checks = s.checks();
  ASSERT_NE(find(checks, "inhibitor"), nullptr);
  EXPECT_TRUE(find(checks, "inhibitor")->ok);
  EXPECT_THAT(find(checks, "inhibitor")->detail, testing::HasSubstr("system bus lost"));
}

TEST(ShimStatus, DrainingIsUnreadyWithTheCause) {
  auto s = bound(state::held);
  s.phase = {.what = hold_phase::kind::holding, .cause = "SIGTERM"};
  EXPECT_FALSE(s.ready());
  auto checks = s.checks();
  auto shutdown = find(checks, "shutdown");
  ASSERT_NE(shutdown, nullptr);
  EXPECT_FALSE(shutdown->ok);
  EXPECT_THAT(shutdown->detail, testing::StartsWith("draining since"));
  EXPECT_THAT(shutdown->detail, testing::HasSubstr("SIGTERM"));
}

// The phase is the sequence's; its start by the wall clock is read once, when it is first seen, so
// that every scrape and every `status` shows one value.
TEST(ShimStatus, ThePhasesWallTimeIsReadOnceWhenItBegins) {
  shim_status s;
  const auto unready = std::chrono::steady_clock::now() - std::chrono::seconds(5);
  const auto before = std::chrono::system_clock::now();
  s.set_phase({.what = hold_phase::kind::holding, .cause = "SIGTERM", .since = unready});
  const auto wall = s.phase_since_wall;
  EXPECT_LE(wall, before - std::chrono::seconds(5) + std::chrono::seconds(1));
  EXPECT_GE(wall, before - std::chrono::seconds(6));
  EXPECT_THAT(find(s.checks(), "shutdown")->detail,
              testing::HasSubstr("draining since " + format_wall_time(wall) + " (SIGTERM)"));
  // The same phase again (the next batch), then released: the same moment, the same reading.
  s.set_phase({.what = hold_phase::kind::holding, .cause = "SIGTERM", .since = unready});
  s.set_phase({.what = hold_phase::kind::released, .cause = "SIGTERM", .since = unready});
  EXPECT_EQ(s.phase_since_wall, wall);
  EXPECT_EQ(s.phase.name(), "released");
  EXPECT_THAT(status_line(s), testing::StartsWith("hold over, unready: SIGTERM"));
}

TEST(ShimStatus, WaitingForTargetIsUnready) {
  auto s = bound(state::held);
  s.phase.what = hold_phase::kind::awaiting_target;
  EXPECT_FALSE(s.ready());
  auto checks = s.checks();
  ASSERT_NE(find(checks, "target"), nullptr);
  EXPECT_FALSE(find(checks, "target")->ok);
}

TEST(ShimStatus, LogindDelayShorterThanTheHoldIsWarnedWithTheFix) {
  auto s = bound(state::held);
  EXPECT_FALSE(s.logind_delay_warning()) << "unknown is not too short";
  s.logind.delay_max_usec = 5'000'000;
  EXPECT_TRUE(s.logind_delay_too_short());
  auto warning = s.logind_delay_warning();
  ASSERT_TRUE(warning);
  EXPECT_THAT(*warning, testing::HasSubstr("InhibitDelayMaxSec="));
  EXPECT_THAT(*warning, testing::HasSubstr("logind.conf.d"));
  EXPECT_THAT(*warning, testing::HasSubstr("5s"));
  EXPECT_THAT(*warning, testing::HasSubstr("2m15s"));
  EXPECT_TRUE(s.ready()) << "a configuration warning, not a readiness failure";
  EXPECT_NE(find(s.checks(), "logind-inhibit-delay"), nullptr);  // compared, not dereferenced

  s.logind.delay_max_usec = 135'000'000;
  EXPECT_FALSE(s.logind_delay_too_short()) << "exactly enough is enough";
  EXPECT_EQ(find(s.checks(), "logind-inhibit-delay"), nullptr);

  s.logind.delay_max_usec = std::numeric_limits<std::uint64_t>::max();
  EXPECT_FALSE(s.logind_delay_too_short()) << "InhibitDelayMaxSec=infinity";
}

TEST(ShimStatus, EnsureOutcomeShowsInTheLogindCheck) {
  auto s = bound(state::held);
  s.logind.delay_max_usec = 5'000'000;
  s.logind.delay_ensure = "raising it to 2m29s: wrote /etc/x.conf, reloading logind";
  auto checks = s.checks();
  auto check = find(checks, "logind-inhibit-delay");
  ASSERT_NE(check, nullptr);
  EXPECT_TRUE(check->ok);
  EXPECT_THAT(check->detail, testing::StartsWith("warning: "));
  EXPECT_THAT(check->detail, testing::HasSubstr("; raising it to 2m29s"));

  s.logind.delay_max_usec = 149'000'000;
  s.logind.delay_ensure = "raised from 5s to 2m29s by /etc/x.conf";
  checks = s.checks();
  check = find(checks, "logind-inhibit-delay");
  ASSERT_NE(check, nullptr);
  EXPECT_EQ(check->detail, "raised from 5s to 2m29s by /etc/x.conf");
}

// The STATUS= line that `systemctl status` shows, in each state the daemon can be in.
TEST(ShimStatus, StatusLineSaysWhatTheShimIsDoing) {
  struct row {
    std::string name;
    shim_status status;
    std::string want;
  };
  auto draining = bound(state::held);
  draining.phase = {.what = hold_phase::kind::holding,
                    .cause = "PrepareForShutdown(true) from :1.3"};
  auto released = draining;
  released.logind.inhibitor = state::released;
  released.phase.what = hold_phase::kind::released;
  auto waiting = bound(state::held);
  waiting.phase.what = hold_phase::kind::awaiting_target;
  auto retrying = bound(state::retrying);
  retrying.logind.inhibitor_detail = "the system bus is down: Connection reset by peer";
  auto short_delay = bound(state::held);
  short_delay.hold_needed = std::chrono::seconds(135);
  short_delay.logind.delay_max_usec = 5'000'000;
  shim_status starting;
  const std::vector<row> rows = {
      {"held", bound(state::held), "ready; holding a logind delay lock"},
      {"off", bound(state::disabled), "ready; no logind lock (--inhibit=off)"},
      {"retrying", retrying,
       "ready; no logind lock (the system bus is down: Connection reset by peer)"},
      {"draining", draining, "draining, reboot on hold: PrepareForShutdown(true) from :1.3"},
      {"released", released, "hold over, unready: PrepareForShutdown(true) from :1.3"},
      {"waiting", waiting,
       "unready; target failed: shutdown cancelled after the signal; waiting for a target that "
       "did not have it"},
      {"starting", starting,
       "unready; listener failed: not bound yet; inhibitor failed: taking the logind delay lock"},
      {"too short", short_delay,
       "ready; holding a logind delay lock; WARNING: logind InhibitDelayMaxSec too short"},
  };
  for (const auto& r : rows) EXPECT_EQ(status_line(r.status), r.want) << r.name;
}

// ---------------------------------------------------------------------------------------------
// One table: /readyz (with and without ?exclude), ?verbose, /metrics and STATUS= agree in every
// state, and the upstream check's hysteresis meets the shutdown as it should (on a fake clock: the
// outcomes carry their own time).

const upstream_status::time_point t0 = upstream_status::time_point{} + 1'700'000'000s;

upstream_status upstream(unsigned fall = 3, unsigned rise = 2) {
  return upstream_status("https://127.0.0.1:6443/readyz", fall, rise, 1s);
}

void probe(upstream_status& u, bool pass, int second, std::string error = "status 500") {
  u.record({.failure = pass ? probe_failure::none : probe_failure::status,
            .error = pass ? "" : error,
            .duration = 2ms},
           t0 + second * 1s);
}

upstream_status passed_upstream() {
  auto u = upstream();
  probe(u, true, 0);
  probe(u, true, 1);
  return u;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The states a table-driven run goes through: every check failing and passing, alone and together.
std::map<std::string, shim_status> table_states() {
  std::map<std::string, shim_status> out;
  out["starting"] = shim_status{};
  out["ready"] = bound(state::held);
  out["no lock, retrying"] = bound(state::retrying);
  out["draining"] = bound(state::held);
  out["draining"].phase = {.what = hold_phase::kind::holding, .cause = "SIGTERM"};
  out["released"] = out["draining"];
  out["released"].logind.inhibitor = state::released;
  out["released"].phase.what = hold_phase::kind::released;
  out["waiting for the target"] = bound(state::held);
  out["waiting for the target"].phase.what = hold_phase::kind::awaiting_target;
  out["target found"] = bound(state::held);
  out["target found"].target = {true, true, "kube-apiserver (pid 812)"};
  out["target not found"] = bound(state::held);
  out["target not found"].target = {true, false, "not found yet: no process named x"};
  out["target lost"] = bound(state::held);
  out["target lost"].target = {true, false,
                               "kube-apiserver (pid 812) exited, killed by SIGKILL (exit code "
                               "137) at 2023-11-14T22:13:20.000000Z"};
  out["upstream not probed"] = out["target found"];
  out["upstream not probed"].upstream = upstream();
  out["upstream passed"] = out["target found"];
  out["upstream passed"].upstream = passed_upstream();
  out["upstream riding out a failure"] = out["upstream passed"];
  probe(*out["upstream riding out a failure"].upstream, false, 2);
  out["upstream failed"] = out["upstream passed"];
  for (int i = 2; i < 5; ++i) probe(*out["upstream failed"].upstream, false, i);
  out["upstream passed, draining"] = out["upstream passed"];
  out["upstream passed, draining"].phase = {.what = hold_phase::kind::holding,
                                            .cause = "PrepareForShutdown(true) from :1.3"};
  out["upstream passed, draining"].upstream->pause();
  out["logind warning"] = out["upstream passed"];
  out["logind warning"].logind.delay_max_usec = 5'000'000;
  out["previous shutdown cut short"] = out["upstream passed"];
  out["previous shutdown cut short"].previous.emplace();
  out["previous shutdown cut short"].previous->verdict = shutdown_verdict::cut_short;
  out["everything failing"] = out["upstream failed"];
  out["everything failing"].listener_bound = false;
  out["everything failing"].logind.inhibitor = state::pending;
  out["everything failing"].phase.what = hold_phase::kind::holding;
  out["everything failing"].target = {true, false, "not found yet"};
  return out;
}

TEST(ReadinessTable, ReadyzVerboseMetricsAndStatusAgreeInEveryState) {
  const std::vector<std::string> names = {"listener",         "inhibitor", "logind-inhibit-delay",
                                          "shutdown",         "target",    "upstream",
                                          "previous-shutdown"};
  for (const auto& [state_name, status] : table_states()) {
    SCOPED_TRACE(state_name);
    const auto checks = status.checks();
    std::map<std::string, bool> ok;
    for (const auto& c : checks) ok[std::string(c.name)] = c.ok;
    // Every exclusion: none, each check alone, an unknown name, and all of them at once.
    std::vector<std::vector<std::string>> exclusions = {{}, {"no-such-check"}, names};
    for (const auto& n : names) exclusions.push_back({n});
    for (const auto& excluded : exclusions) {
      std::string query;
      for (const auto& e : excluded) query += "&exclude=" + e;
      SCOPED_TRACE("exclude:" + query);
      bool want_ready = true;
      for (const auto& [name, passes] : ok) {
        if (!passes && std::find(excluded.begin(), excluded.end(), name) == excluded.end()) {
          want_ready = false;
        }
      }
      std::vector<std::string_view> excluded_views(excluded.begin(), excluded.end());
      EXPECT_EQ(status.ready(excluded_views), want_ready);

      http_request_counts counts;
      http_request plain{boost::beast::http::verb::get, "/readyz?" + query, 11};
      const auto answer = answer_to(status, counts, plain);
      EXPECT_EQ(answer.result_int(), want_ready ? 200u : 503u);

      http_request verbose{boost::beast::http::verb::get, "/readyz?verbose" + query, 11};
      const auto body = lines(answer_to(status, counts, verbose).body());
      ASSERT_FALSE(body.empty());
      EXPECT_EQ(body.back(), want_ready ? "readyz check passed" : "readyz check failed");
      std::size_t row = 0;
      for (const auto& c : checks) {
        ASSERT_LT(row, body.size());
        const std::string& line = body[row++];
        const std::string name(c.name);
        if (std::find(excluded.begin(), excluded.end(), name) != excluded.end()) {
          EXPECT_EQ(line, "[+]" + name + " excluded: ok");
        } else if (c.ok) {
          EXPECT_EQ(line, "[+]" + name + " ok" + (c.detail.empty() ? "" : ": " + c.detail));
        } else {
          EXPECT_EQ(line, "[-]" + name + " failed" + (c.detail.empty() ? "" : ": " + c.detail));
        }
      }
      // Names of no check that applies now are ignored, and said in one line, as kube does.
      std::string unmatched;
      for (const auto& e : excluded) {
        if (!ok.count(e)) unmatched += (unmatched.empty() ? "\"" : ",\"") + e + "\"";
      }
      EXPECT_EQ(body.size(), checks.size() + 1 + (unmatched.empty() ? 0 : 1));
      if (!unmatched.empty()) {
        EXPECT_EQ(body[checks.size()],
                  "warn: some health checks cannot be excluded: no matches for " + unmatched);
      }
    }

    // /metrics and STATUS= know no exclusions: they show the table as it is.
    const auto metrics = lines(render_metrics(status, {}));
    const bool ready = status.ready();
    EXPECT_NE(std::find(metrics.begin(), metrics.end(),
                        std::string("shutdown_shim_ready ") + (ready ? "1" : "0")),
              metrics.end());
    std::size_t gauges = 0;
    for (const auto& line : metrics) {
      if (line.starts_with("shutdown_shim_check{")) ++gauges;
    }
    EXPECT_EQ(gauges, checks.size());
    const std::string status_text = status_line(status);
    EXPECT_EQ(status_text.starts_with("ready;"), ready) << status_text;
    for (const auto& c : checks) {
      const std::string gauge =
          fmt::format("shutdown_shim_check{{name=\"{}\"}} {}", c.name, c.ok ? 1 : 0);
      EXPECT_NE(std::find(metrics.begin(), metrics.end(), gauge), metrics.end()) << gauge;
      if (c.name == "shutdown") {
        // STATUS= says the drain in the hold's words, first.
        EXPECT_EQ(!c.ok,
                  status_text.starts_with("draining") || status_text.starts_with("hold over"))
            << status_text;
      } else {
        EXPECT_EQ(!c.ok,
                  status_text.find("; " + std::string(c.name) + " failed") != std::string::npos)
            << status_text;
      }
    }
  }
}

// A query of a thousand unknown names (a 4 KiB request holds about that many) gets an answer of
// bounded size: at most 16 names are kept and reported, the rest as "..." (fuzz_http_session
// found the answer and the parse growing with the query).
TEST(ReadinessTable, ManyExcludedNamesAreBounded) {
  const auto s = bound(state::held);
  std::string target = "/readyz?verbose";
  for (int i = 0; i < 1000; ++i) target += "&exclude=n" + std::to_string(i);
  http_request_counts counts;
  http_request request{boost::beast::http::verb::get, target, 11};
  const auto body = lines(answer_to(s, counts, request).body());
  ASSERT_FALSE(body.empty());
  const std::string& warn = body[body.size() - 2];
  EXPECT_EQ(warn.rfind("warn: some health checks cannot be excluded: no matches for \"n0\",", 0),
            0u)
      << warn;
  EXPECT_NE(warn.find("\"n15\",..."), std::string::npos) << warn;
  EXPECT_EQ(warn.find("\"n16\""), std::string::npos) << warn;
  EXPECT_LT(warn.size(), 300u);
}

TEST(ReadinessTable, TheUpstreamCheckExistsOnlyWithTheFlag) {
  auto s = bound(state::held);
  EXPECT_EQ(find(s.checks(), "upstream"), nullptr);
  s.upstream = upstream();
  ASSERT_NE(find(s.checks(), "upstream"), nullptr);
  EXPECT_FALSE(s.ready()) << "the check starts failed";
}

TEST(ReadinessTable, TheTargetCheckExistsOnlyWithATarget) {
  auto s = bound(state::held);
  EXPECT_EQ(find(s.checks(), "target"), nullptr);
  EXPECT_TRUE(s.ready());
  s.target = {true, false, "not found yet: no process named kube-apiserver owned by uid 0"};
  EXPECT_FALSE(s.ready()) << "503 until a target is found";
  EXPECT_EQ(find(s.checks(), "target")->detail, s.target.detail);
  s.target.running = true;
  EXPECT_TRUE(s.ready());
}

TEST(UpstreamWithShutdown, FailPassAlternatingStaysReadyAndThreeFailuresFlip) {
  auto s = bound(state::held);
  s.upstream = passed_upstream();
  ASSERT_TRUE(s.ready());
  for (int i = 2; i < 13; ++i) {  // pass, fail, pass, ... pass
    probe(*s.upstream, i % 2 == 0, i);
    EXPECT_TRUE(s.ready()) << "one transient failure at a time never moves the node: " << i;
  }
  probe(*s.upstream, false, 20, "timeout after 1s");
  probe(*s.upstream, false, 21, "connection refused");
  EXPECT_TRUE(s.ready()) << "two failures with fall=3";
  EXPECT_THAT(find(s.checks(), "upstream")->detail,
              testing::StartsWith("2 consecutive failures (fails at 3)"));
  probe(*s.upstream, false, 22, "status 500");
  EXPECT_FALSE(s.ready());
  EXPECT_EQ(find(s.checks(), "upstream")->detail,
            "3 consecutive failures, last: status 500 at 2023-11-14T22:13:42.000000Z");
  probe(*s.upstream, true, 23);
  EXPECT_FALSE(s.ready()) << "one pass is not rise=2";
  probe(*s.upstream, true, 24);
  EXPECT_TRUE(s.ready());
}

TEST(UpstreamWithShutdown, AShutdownWinsAtOnceAndACancelNeedsRisePassesAgain) {
  auto s = bound(state::held);
  s.upstream = passed_upstream();
  ASSERT_TRUE(s.ready());
  // PrepareForShutdown: unready in the same iteration, whatever the upstream says.
  s.phase = {.what = hold_phase::kind::holding, .cause = "PrepareForShutdown(true) from :1.3"};
  s.upstream->pause();
  EXPECT_FALSE(s.ready());
  EXPECT_TRUE(find(s.checks(), "upstream")->ok) << "the upstream did not fail; the shutdown did";
  EXPECT_THAT(find(s.checks(), "upstream")->detail, testing::HasSubstr("not probed during"));
  // Cancelled: the shutdown check passes again, but the upstream starts from failed.
  s.phase = {};
  s.upstream->restart();
  EXPECT_FALSE(s.ready());
  EXPECT_EQ(find(s.checks(), "upstream")->detail, "not probed yet");
  probe(*s.upstream, true, 30);
  EXPECT_FALSE(s.ready());
  probe(*s.upstream, true, 31);
  EXPECT_TRUE(s.ready());
}

TEST(UpstreamWithShutdown, StartUpNeedsRisePasses) {
  auto s = bound(state::held);
  s.upstream = upstream(3, 3);
  for (int i = 0; i < 2; ++i) {
    probe(*s.upstream, true, i);
    EXPECT_FALSE(s.ready()) << i;
  }
  probe(*s.upstream, true, 2);
  EXPECT_TRUE(s.ready());
}

// A D-Bus error text can span lines (dbus-daemon's AccessDenied lists the matched rules on its
// own lines); /readyz?verbose must stay one line per check and STATUS= one line in all.
TEST(ShimStatus, MultiLineErrorTextsAreShownOnOneLine) {
  constexpr std::string_view kError =
      "org.freedesktop.DBus.Error.AccessDenied: Rejected send message, 2 matched rules;\n"
      "  type=\"method_call\", sender=\":1.5\" (uid=1000 pid=812)\r\n"
      "  interface=\"org.freedesktop.login1.Manager\" member=\"Inhibit\"\n\n";
  auto s = bound(state::retrying);
  s.logind.inhibitor_detail = kError;
  s.target = {true, false, "kube-apiserver (pid 812) exited:\nkilled by SIGKILL"};
  const std::string one =
      "org.freedesktop.DBus.Error.AccessDenied: Rejected send message, 2 matched rules; "
      "type=\"method_call\", sender=\":1.5\" (uid=1000 pid=812) "
      "interface=\"org.freedesktop.login1.Manager\" member=\"Inhibit\"";

  http_request_counts counts;
  const auto verbose =
      answer_to(s, counts, {boost::beast::http::verb::get, "/readyz?verbose", 11}).body();
  const auto body = lines(verbose);
  EXPECT_NE(std::find(body.begin(), body.end(), "[+]inhibitor ok: not held, retrying: " + one),
            body.end())
      << verbose;
  EXPECT_NE(std::find(body.begin(), body.end(),
                      "[-]target failed: kube-apiserver (pid 812) exited: killed by SIGKILL"),
            body.end())
      << verbose;
  EXPECT_EQ(body.size(), s.checks().size() + 1) << verbose;
  for (const auto& c : s.checks()) {
    EXPECT_EQ(c.detail.find_first_of("\r\n"), std::string::npos) << c.name << ": " << c.detail;
  }

  const std::string status = status_line(s);
  EXPECT_EQ(status.find_first_of("\r\n"), std::string::npos) << status;

  s.logind.inhibitor = state::held;
  s.phase = {.what = hold_phase::kind::holding,
             .cause = "PrepareForShutdown(true) from :1.3\nsecond line"};
  const std::string draining = status_line(s);
  EXPECT_EQ(draining.find_first_of("\r\n"), std::string::npos) << draining;
  EXPECT_THAT(draining, testing::StartsWith(
                            "draining, reboot on hold: PrepareForShutdown(true) from :1.3 second"));

  // And capped: a detail of any length is cut, on a UTF-8 boundary, ending in "...". 2 KiB: the
  // kubelet-shutdown line runs to 1233 bytes (KubeletOutlook.TheLongestLineIsNotCut).
  s.logind.inhibitor = state::retrying;
  s.logind.inhibitor_detail = std::string(100'000, 'x');
  for (const auto& c : s.checks()) EXPECT_LE(c.detail.size(), 2048u) << c.name;
  EXPECT_LE(status_line(s).size(), 1024u);
}

}  // namespace
}  // namespace shim
