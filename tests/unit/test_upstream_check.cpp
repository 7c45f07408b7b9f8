// upstream_check against a fake probe (as kubelet tests its dbusInhibiter with a fake D-Bus): each
// outcome into the status table, /readyz?verbose and /metrics, the log and the event log, and the
// probing stopped for a drain and started again from failed after a cancel. The probe itself runs
// against a stand-in apiserver in tests/integration/test_upstream_probe.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "http/http_answer.hpp"
#include "http/prometheus_metrics.hpp"
#include "http/readiness_server.hpp"
#include "log/event_recorder.hpp"
#include "log/logger.hpp"
#include "log_test_support.hpp"
#include "readiness/shim_status.hpp"
#include "readiness_server_test_support.hpp"
#include "upstream/upstream_check.hpp"

namespace shim {
namespace {

using readiness_test::answer_to;
using namespace std::chrono_literals;
using testing::HasSubstr;
using testing::StartsWith;

// Records what the check asks of its probe; the test delivers the outcomes.
struct fake_probe_calls {
  unsigned starts = 0;
  unsigned stops = 0;
  std::function<void(const probe_outcome&)> probed;
  bool running = false;
};

class fake_probe : public upstream_check::probe {
 public:
  explicit fake_probe(fake_probe_calls& calls) : calls_(calls) {}
  void start() override {
    ++calls_.starts;
    calls_.running = true;
  }
  void stop() override {
    ++calls_.stops;
    calls_.running = false;
  }

 private:
  fake_probe_calls& calls_;
};

probe_outcome pass() { return {.error = "", .status = 200, .duration = 2ms}; }
probe_outcome failure(probe_failure f, std::string error) {
  return {.failure = f, .error = std::move(error), .status = 0, .duration = 3ms};
}

class UpstreamCheck : public ::testing::Test {
 protected:
  UpstreamCheck() {
    settings.url = parse_upstream_url("https://127.0.0.1:6443/readyz").value();
    status.listener_bound = true;
    status.logind.inhibitor = logind_row::inhibitor_state::disabled;
  }

  std::unique_ptr<upstream_check> make() {
    return std::make_unique<upstream_check>(
        settings, log, events, status.upstream,
        upstream_check::handlers{.changed = [this] { ++changes; }},
        [this](std::function<void(const probe_outcome&)> probed) {
          calls.probed = std::move(probed);
          return std::make_unique<fake_probe>(calls);
        });
  }
  void deliver(const probe_outcome& o) {
    ASSERT_TRUE(calls.running) << "an outcome from a probe that is not running";
    calls.probed(o);
  }

  shim_status::check upstream_row() const {
    for (const auto& c : status.checks()) {
      if (c.name == "upstream") return c;
    }
    ADD_FAILURE() << "no upstream row in the table";
    return {};
  }
  std::string verbose_readyz() const {
    http_request_counts counts;
    const http_request request{boost::beast::http::verb::get, "/readyz?verbose", 11};
    return answer_to(status, counts, request).body();
  }
  std::vector<test::json_object> event_records() const {
    std::vector<test::json_object> out;
    for (const auto& line : test::split_lines(test::read_file(event_path))) {
      out.push_back(test::parse_object(line));
    }
    return out;
  }
  std::vector<std::string> log_lines() const { return test::split_lines(log_output.text()); }

  upstream_settings settings;
  shim_status status;
  test::temp_dir dir;
  const std::string event_path = dir.path() + "/events.jsonl";
  test::captured_output log_output;
  logger log{log_format::text, log_output.fd(), false};
  event_recorder events{log, event_path};
  fake_probe_calls calls;
  unsigned changes = 0;
};

TEST_F(UpstreamCheck, ItsRowIsInTheTableFromTheStartAndFailed) {
  const auto check = make();
  ASSERT_TRUE(status.upstream.has_value());
  EXPECT_EQ(status.upstream->url(), "https://127.0.0.1:6443/readyz");
  EXPECT_EQ(calls.starts, 0u) << "no probe before start()";
  EXPECT_FALSE(upstream_row().ok);
  EXPECT_EQ(upstream_row().detail, "not probed yet");
  EXPECT_FALSE(status.ready());
  check->start();
  EXPECT_EQ(calls.starts, 1u);
}

TEST_F(UpstreamCheck, PassesReachReadyzAfterRise) {
  const auto check = make();
  check->start();
  deliver(pass());
  EXPECT_FALSE(status.ready());
  EXPECT_EQ(upstream_row().detail, "1 of 2 passes needed");
  EXPECT_EQ(changes, 0u);
  deliver(pass());
  EXPECT_TRUE(status.ready());
  EXPECT_TRUE(upstream_row().ok);
  EXPECT_EQ(changes, 1u) << "STATUS= once, at the flip";
  EXPECT_THAT(verbose_readyz(), HasSubstr("[+]upstream ok\n"));
  EXPECT_EQ(status.upstream->probes(), 2u);
  EXPECT_DOUBLE_EQ(status.upstream->duration_sum_seconds(), 0.004);

  const auto records = event_records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(test::get(records[0], "event").text, "UpstreamPassed");
  EXPECT_EQ(test::get(records[0], "cause").text, "rise");
  EXPECT_EQ(test::get(records[0], "message").text, "the upstream /readyz passed 2 times in a row");
  EXPECT_EQ(test::get(records[0], "url").text, "https://127.0.0.1:6443/readyz");
  EXPECT_EQ(test::get(records[0], "consecutive").text, "2");
}

TEST_F(UpstreamCheck, FallFailuresFailItWithTheLastReason) {
  const auto check = make();
  check->start();
  deliver(pass());
  deliver(pass());
  deliver(failure(probe_failure::status, "status 500"));
  deliver(failure(probe_failure::refused, "connection refused"));
  EXPECT_TRUE(status.ready()) << "two failures ride out a fall of 3";
  EXPECT_THAT(upstream_row().detail,
              StartsWith("2 consecutive failures (fails at 3), last: connection refused at "));
  EXPECT_EQ(changes, 1u);
  deliver(failure(probe_failure::timeout, "timeout after 1s"));
  EXPECT_FALSE(status.ready());
  EXPECT_EQ(changes, 2u);
  EXPECT_THAT(verbose_readyz(),
              HasSubstr("[-]upstream failed: 3 consecutive failures, last: timeout after 1s at "));

  const auto records = event_records();
  ASSERT_EQ(records.size(), 2u);
  const auto& failed = records[1];
  EXPECT_EQ(test::get(failed, "event").text, "UpstreamFailed");
  EXPECT_EQ(test::get(failed, "cause").text, "timeout after 1s");
  EXPECT_EQ(test::get(failed, "message").text,
            "the upstream /readyz failed 3 times in a row, last: timeout after 1s");
  EXPECT_EQ(test::get(failed, "consecutive").text, "3");
  EXPECT_EQ(test::get(failed, "reason").text, "timeout");
  EXPECT_EQ(test::get(failed, "error").text, "timeout after 1s");
}

TEST_F(UpstreamCheck, FailureReasonsAreTheProbesTable) {
  const auto check = make();
  const auto reasons = probe_failure_reasons();
  const auto& failures = status.upstream->failures();
  ASSERT_EQ(failures.size(), reasons.size());
  for (std::size_t i = 0; i < reasons.size(); ++i) {
    EXPECT_EQ(failures[i].first, reasons[i]);
    EXPECT_EQ(failures[i].second, 0u) << "labels known in advance are shown at 0";
  }
  check->start();
  // Every reason once, tls twice; none goes uncounted.
  for (std::size_t i = 0; i < reasons.size(); ++i) {
    deliver(failure(static_cast<probe_failure>(i + 1), std::string(reasons[i]) + " went wrong"));
  }
  deliver(failure(probe_failure::tls, "certificate verify failed: certificate has expired"));
  for (const auto& [reason, count] : status.upstream->failures()) {
    EXPECT_EQ(count, reason == "tls" ? 2u : 1u) << reason;
  }
  http_request_counts counts;
  const std::string metrics = render_metrics(status, counts);
  EXPECT_THAT(metrics,
              HasSubstr("shutdown_shim_upstream_probe_failures_total{reason=\"tls\"} 2\n"));
  EXPECT_THAT(metrics,
              HasSubstr("shutdown_shim_upstream_probe_failures_total{reason=\"config\"} 1\n"));
}

TEST_F(UpstreamCheck, AFileProblemIsWarnedOncePerProblem) {
  const auto check = make();
  check->start();
  const auto missing = failure(probe_failure::config, "/etc/ca.crt: No such file or directory");
  deliver(missing);
  deliver(missing);
  deliver(missing);
  deliver(failure(probe_failure::config, "token file /t: empty"));
  deliver(pass());
  deliver(missing);  // back after a pass: said again
  std::vector<std::string> warnings;
  for (const auto& line : log_lines()) {
    if (line.find("the upstream check cannot probe") != std::string::npos) warnings.push_back(line);
  }
  ASSERT_EQ(warnings.size(), 3u) << log_output.text();
  EXPECT_THAT(warnings[0], HasSubstr("error=\"/etc/ca.crt: No such file or directory\""));
  EXPECT_THAT(warnings[1], HasSubstr("error=\"token file /t: empty\""));
  EXPECT_THAT(warnings[2], HasSubstr("error=\"/etc/ca.crt: No such file or directory\""));
  EXPECT_EQ(status.upstream->failures().back().first, "config");
  EXPECT_EQ(status.upstream->failures().back().second, 5u);
}

TEST_F(UpstreamCheck, ADrainStopsProbingAndACancelStartsAgainFromFailed) {
  const auto check = make();
  check->start();
  deliver(pass());
  deliver(pass());
  ASSERT_TRUE(status.ready());
  check->pause();
  EXPECT_EQ(calls.stops, 1u);
  EXPECT_FALSE(calls.running);
  EXPECT_TRUE(status.upstream->paused());
  EXPECT_EQ(upstream_row().detail, "not probed during a shutdown");

  check->resume();
  EXPECT_EQ(calls.starts, 2u);
  EXPECT_FALSE(status.upstream->paused());
  EXPECT_FALSE(upstream_row().ok) << "after a cancel the node rejoins only after rise passes";
  EXPECT_EQ(upstream_row().detail, "not probed yet");
  check->resume();
  EXPECT_EQ(calls.starts, 2u) << "resume() when not paused starts nothing";
  deliver(pass());
  deliver(pass());
  EXPECT_TRUE(upstream_row().ok);
  EXPECT_EQ(events.recorded(event_kind::UpstreamPassed), 2u);

  check->stop();
  EXPECT_EQ(calls.stops, 2u);
}

TEST_F(UpstreamCheck, InsecureSkipVerifyIsWarnedOnce) {
  settings.insecure_skip_verify = true;
  const auto check = make();
  check->start();
  deliver(pass());
  unsigned warned = 0;
  for (const auto& line : log_lines()) {
    warned += line.find("--upstream-insecure-skip-verify") != std::string::npos;
  }
  EXPECT_EQ(warned, 1u) << log_output.text();
}

TEST_F(UpstreamCheck, NoWarningWhenVerified) {
  const auto check = make();
  check->start();
  deliver(pass());
  EXPECT_EQ(log_output.text(), "");
}

}  // namespace
}  // namespace shim
