// /metrics: render_metrics' families and samples in each state of the shim, Prometheus' promtool
// on them, and the endpoint through answer_to.

#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>

#include "http/http_answer.hpp"
#include "http/prometheus_metrics.hpp"
#include "readiness_server_test_support.hpp"

namespace shim::readiness_test {
namespace {

// Every handler with every code the shim can answer, from the start: increase() over a series
// that appears with its first 503 misses that 503.
TEST(RenderMetrics, RequestCountsStartAtZeroForEveryHandlerAndCode) {
  const auto text = render_metrics(ready_status(), {});
  int series = 0;
  for (const char* handler : {"readyz", "livez", "healthz", "metrics", "other"}) {
    for (const char* code : {"200", "400", "404", "405", "413", "431", "503"}) {
      EXPECT_TRUE(has_line(text, fmt::format("shutdown_shim_http_requests_total{{code=\"{}\","
                                             "handler=\"{}\"}} 0",
                                             code, handler)))
          << code << " " << handler << "\n"
          << text;
      ++series;
    }
  }
  EXPECT_EQ(series, 35);
}

TEST(RenderMetrics, ReadyNode) {
  auto status = ready_status();
  status.target.signals_forwarded = 0;
  const auto text = render_metrics(status, {});
  for (const auto* line : {
           "shutdown_shim_ready 1",
           "shutdown_shim_draining 0",
           "shutdown_shim_inhibitor_held 1",
           "shutdown_shim_shutdown_start_time_seconds 0",
           "shutdown_shim_drain_delay_seconds 70",
           "shutdown_shim_signals_forwarded_total 0",
           "shutdown_shim_events_total{event=\"Started\"} 0",
           "shutdown_shim_events_total{event=\"PreviousShutdown\"} 0",
           // A restart is counted as its own kind, never as a ShutdownInitiated (issue 22).
           "shutdown_shim_events_total{event=\"Restart\"} 0",
           "# TYPE shutdown_shim_ready gauge",
           "# TYPE shutdown_shim_signals_forwarded_total counter",
           "# TYPE shutdown_shim_http_requests_total counter",
       }) {
    EXPECT_TRUE(has_line(text, line)) << line << "\n" << text;
  }
  // Unknown until logind has been asked, and unknown is absent: neither the value nor whether it
  // is too short.
  EXPECT_EQ(text.find("shutdown_shim_logind_inhibit_delay_max_seconds"), std::string::npos);
  EXPECT_EQ(text.find("shutdown_shim_logind_inhibit_delay_too_short"), std::string::npos);
}

TEST(RenderMetrics, DrainingNodeWithShortLogindDelay) {
  auto status = ready_status();
  start_drain(status);
  status.logind.inhibitor = logind_row::inhibitor_state::released;
  status.logind.delay_max_usec = 5'000'000;
  status.target.signals_forwarded = 2;
  status.drain_delay = 1500ms;
  http_request_counts counts;
  for (int i = 0; i < 7; ++i) counts.add(http_handler::readyz, 200);
  for (int i = 0; i < 3; ++i) counts.add(http_handler::readyz, 503);
  counts.add(http_handler::other, 431);
  const auto text = render_metrics(status, counts);
  for (const auto* line : {
           "shutdown_shim_ready 0",
           "shutdown_shim_draining 1",
           "shutdown_shim_inhibitor_held 0",
           "shutdown_shim_shutdown_start_time_seconds 1700000000",
           "shutdown_shim_drain_delay_seconds 1.5",
           "shutdown_shim_logind_inhibit_delay_max_seconds 5",
           "shutdown_shim_logind_inhibit_delay_too_short 1",
           "shutdown_shim_signals_forwarded_total 2",
           "shutdown_shim_http_requests_total{code=\"200\",handler=\"readyz\"} 7",
           "shutdown_shim_http_requests_total{code=\"431\",handler=\"other\"} 1",
           "shutdown_shim_http_requests_total{code=\"503\",handler=\"readyz\"} 3",
           "shutdown_shim_http_requests_total{code=\"503\",handler=\"metrics\"} 0",
       }) {
    EXPECT_TRUE(has_line(text, line)) << line << "\n" << text;
  }
}

// Issue 23: a drill is unready, not draining; the drills are counted.
TEST(RenderMetrics, ADrillIsUnreadyAndCounted) {
  auto status = ready_status();
  const auto idle = render_metrics(status, {});
  EXPECT_TRUE(has_line(idle, "shutdown_shim_drilling 0")) << idle;
  EXPECT_TRUE(has_line(idle, "shutdown_shim_drills_total 0")) << idle;
  EXPECT_TRUE(has_line(idle, "# TYPE shutdown_shim_drills_total counter")) << idle;
  const auto now = std::chrono::steady_clock::now();
  status.phase = {.what = hold_phase::kind::drilling,
                  .cause = "shutdown-shim drill, pid 42",
                  .since = now,
                  .ends = now + 70s};
  status.drills = 2;
  const auto text = render_metrics(status, {});
  for (const auto* line : {
           "shutdown_shim_ready 0",
           "shutdown_shim_draining 0",
           "shutdown_shim_drilling 1",
           "shutdown_shim_drills_total 2",
           "shutdown_shim_check{name=\"drill\"} 0",
           "shutdown_shim_inhibitor_held 1",
       }) {
    EXPECT_TRUE(has_line(text, line)) << line << "\n" << text;
  }
}

TEST(RenderMetrics, EveryFamilyHasHelpAndType) {
  auto status = ready_status();
  status.logind.delay_max_usec = 200'000'000;
  const auto text = render_metrics(status, {});
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  std::string help_for, type_for;
  int samples = 0;
  for (const auto& line : lines_of(text)) {
    ASSERT_FALSE(line.empty());
    if (line.rfind("# HELP ", 0) == 0) {
      help_for = line.substr(7, line.find(' ', 7) - 7);
    } else if (line.rfind("# TYPE ", 0) == 0) {
      type_for = line.substr(7, line.find(' ', 7) - 7);
      EXPECT_EQ(type_for, help_for) << line;
      const auto type = line.substr(line.rfind(' ') + 1);
      EXPECT_TRUE(type == "gauge" || type == "counter") << line;
    } else {
      const auto name = line.substr(0, line.find_first_of("{ "));
      EXPECT_EQ(name, type_for) << line;
      EXPECT_TRUE(name.starts_with("shutdown_shim_") || name.starts_with("process_")) << line;
      ++samples;
    }
  }
  EXPECT_GE(samples, 9);
  // client_golang's process collector, read from /proc now.
  for (const char* family : {"process_cpu_seconds_total", "process_open_fds", "process_max_fds",
                             "process_resident_memory_bytes", "process_start_time_seconds"}) {
    EXPECT_TRUE(
        has_line(text, std::string("# TYPE ") + family +
                           (std::string_view(family).ends_with("_total") ? " counter" : " gauge")))
        << family << "\n"
        << text;
  }
  EXPECT_TRUE(has_line(text, "shutdown_shim_logind_inhibit_delay_max_seconds 200"));
}

// Prometheus' own parser and linter on every family, the upstream check's histogram and labelled
// counters included (issue 9). promtool is in Debian's prometheus package; PROMTOOL names it (the
// meson test sets it when promtool is on PATH).
// promtool's output on `text` (empty when clean), and its exit status.
std::pair<int, std::string> promtool_check(const char* promtool, const std::string& text) {
  char path[] = "/tmp/shim-metrics-XXXXXX";
  const int fd = ::mkstemp(path);
  if (fd < 0) return {-1, "mkstemp failed"};
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  std::string output;
  FILE* pipe = ::popen(fmt::format("'{}' check metrics <'{}' 2>&1", promtool, path).c_str(), "r");
  if (pipe == nullptr || !written) {
    ::unlink(path);
    return {-1, "cannot run promtool"};
  }
  std::array<char, 4096> buffer{};
  while (const std::size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe)) {
    output.append(buffer.data(), n);
  }
  const int status_code = ::pclose(pipe);
  ::unlink(path);
  return {status_code, output};
}

// The shim's states as /metrics sees them, from start-up to the end of a hold.
std::map<std::string, shim_status> metric_states() {
  using state = logind_row::inhibitor_state;
  std::map<std::string, shim_status> out;
  shim_status idle;  // just started: nothing bound, the lock not asked for yet, logind unknown
  idle.drain_delay = 70s;
  idle.hold_needed = 135s;
  out["idle"] = idle;
  out["ready"] = ready_status();
  out["ready"].logind.delay_max_usec = 200'000'000;
  out["ready"].target = {true, true, "kube-apiserver (pid 812)"};
  previous_shutdown previous;
  previous.verdict = shutdown_verdict::clean;
  previous.hold = 3.25;
  previous.unready_to_signal = 1.5;
  out["ready"].previous = previous;
  out["draining"] = out["ready"];
  start_drain(out["draining"]);
  out["draining"].target.signals_forwarded = 1;
  out["released"] = out["draining"];
  out["released"].logind.inhibitor = state::released;
  out["released"].phase.what = hold_phase::kind::released;
  out["released"].target = {true, false, "kube-apiserver (pid 812) exited"};
  out["bus lost"] = out["ready"];
  out["bus lost"].logind.inhibitor = state::retrying;
  out["bus lost"].logind.inhibitor_detail = "the system bus connection was lost";
  out["bus lost"].logind.delay_max_usec = 5'000'000;  // the last value logind gave
  out["bus lost"].previous->verdict = shutdown_verdict::cut_short;
  out["bus lost"].previous->hold.reset();
  return out;
}

// Prometheus' own parser and linter on every family, the upstream check's histogram and labelled
// counters included (issue 9), in every state. promtool is in Debian's prometheus package;
// PROMTOOL names it (the meson test sets it when promtool is on PATH).
TEST(RenderMetrics, PassesPromtool) {
  const char* promtool = std::getenv("PROMTOOL");
  if (promtool == nullptr || *promtool == '\0') {
    const char* ci = std::getenv("CI");
    if (ci != nullptr && std::string_view(ci) == "true") FAIL() << "no promtool under CI";
    GTEST_SKIP() << "no promtool: install Debian's prometheus package or set PROMTOOL";
  }
  http_request_counts counts;
  for (int i = 0; i < 3; ++i) counts.add(http_handler::readyz, 200);
  counts.add(http_handler::readyz, 503);
  for (auto [name, status] : metric_states()) {
    SCOPED_TRACE(name);
    const auto [code, output] = promtool_check(promtool, render_metrics(status, counts));
    EXPECT_EQ(code, 0) << output << "\n" << render_metrics(status, counts);
    EXPECT_EQ(output, "") << "promtool's lint: " << output;
  }

  auto status = ready_status();
  status.logind.delay_max_usec = 5'000'000;
  status.target = {true, false, "kube-apiserver (pid 812) exited at 2023-11-14T22:13:20Z"};
  status.upstream.emplace("https://127.0.0.1:6443/readyz", 3, 1, 1s);
  status.upstream->record({.duration = 2ms}, {});
  status.upstream->record(
      {.failure = probe_failure::status, .error = "status 500", .duration = 40ms}, {});
  status.upstream->record(
      {.failure = probe_failure::timeout, .error = "timeout after 1s", .duration = 1s}, {});
  const std::string text = render_metrics(status, counts);
  const auto [code, output] = promtool_check(promtool, text);
  EXPECT_EQ(code, 0) << output << "\n" << text;
  EXPECT_EQ(output, "") << "promtool's lint: " << output << "\n" << text;
  EXPECT_TRUE(
      has_line(text, "shutdown_shim_upstream_probe_duration_seconds_bucket{le=\"+Inf\"} 3"));
  EXPECT_TRUE(has_line(text, "shutdown_shim_upstream_probe_duration_seconds_count 3"));
  EXPECT_TRUE(
      has_line(text, "shutdown_shim_upstream_probe_duration_seconds_bucket{le=\"0.005\"} 1"));
  EXPECT_TRUE(has_line(text, "shutdown_shim_upstream_probe_duration_seconds_bucket{le=\"1\"} 3"))
      << "the timeout is the last bound, and a probe that took it counts in it";
  EXPECT_TRUE(has_line(text, "shutdown_shim_upstream_probe_failures_total{reason=\"refused\"} 0"));
  EXPECT_TRUE(has_line(text, "shutdown_shim_upstream_probe_failures_total{reason=\"status\"} 1"));
  EXPECT_TRUE(has_line(text, "shutdown_shim_upstream_consecutive_failures 2"));
  EXPECT_TRUE(has_line(text, "shutdown_shim_check{name=\"target\"} 0"));
  EXPECT_TRUE(has_line(text, "shutdown_shim_check{name=\"upstream\"} 1"));
}

TEST_F(HandleRequest, MetricsEndpoint) {
  auto status = ready_status();
  answer_to(status, counts, make_request(http::verb::get, "/readyz"));
  const auto response = answer_to(status, counts, make_request(http::verb::get, "/metrics"));
  EXPECT_EQ(response.result(), http::status::ok);
  EXPECT_EQ(response[http::field::content_type], "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(response[http::field::cache_control], "no-store");
  EXPECT_TRUE(has_line(response.body(), "shutdown_shim_ready 1")) << response.body();
  EXPECT_TRUE(has_line(response.body(),
                       "shutdown_shim_http_requests_total{code=\"200\",handler=\"readyz\"} 1"))
      << response.body();
  EXPECT_TRUE(has_line(response.body(),
                       "shutdown_shim_http_requests_total{code=\"200\",handler=\"metrics\"} 0"))
      << response.body();
  // The scrape itself is counted once it is answered.
  EXPECT_EQ(counts.count(http_handler::metrics, 200), 1u);
}

}  // namespace
}  // namespace shim::readiness_test
