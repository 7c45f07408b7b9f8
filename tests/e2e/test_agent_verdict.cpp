// The node agents' verdicts (agent_verdict.hpp): which errors are net/http's idle-close race and
// which are the shim's to answer for.

#include <gtest/gtest.h>

#include "agent_verdict.hpp"

namespace e2e {
namespace {

constexpr std::uint64_t kMs = 1000;

request_record answer(std::uint64_t at_ms, const std::string& backend) {
  request_record r;
  r.reused = true;
  r.send_us = at_ms * kMs;
  r.latency_us = 15 * kMs;
  r.status = 200;
  r.backend = backend;
  return r;
}

request_record error(std::uint64_t at_ms, const std::string& kind) {
  request_record r;
  r.reused = true;
  r.send_us = at_ms * kMs;
  r.latency_us = 1 * kMs;
  r.error = kind;
  return r;
}

// As CI met it (2026-12-04): the connection idle on node-2 after an answer, node-2 stops
// listening (its Shutdown closes the idle connection) as the next PATCH is written, an eof.
TEST(AgentVerdict, APatchLostAsTheServerClosesTheIdleConnectionIsCountedApart) {
  const stop_times stopped{{"node-2", {200 * kMs + 500}}};
  for (const auto policy : {agent_policy::naive, agent_policy::retry}) {
    const auto v =
        judge({answer(0, "node-2"), error(200, "eof"), answer(400, "node-3")}, policy, 10, stopped);
    EXPECT_EQ(v.errors, 1u);
    EXPECT_EQ(v.idle_close_losses, 1u);
    EXPECT_EQ(v.degraded, 0u);
    EXPECT_EQ(v.longest_error_run_s, 0);
  }
  const auto reset =
      judge({answer(0, "node-2"), error(200, "reset")}, agent_policy::naive, 10, stopped);
  EXPECT_EQ(reset.idle_close_losses, 1u);
}

TEST(AgentVerdict, WithoutTheNodesStopBetweenTheAnswerAndTheErrorTheErrorCounts) {
  const std::vector<request_record> records{answer(0, "node-2"), error(200, "eof")};
  for (const stop_times& stopped : {
           stop_times{}, stop_times{{"node-3", {200 * kMs + 500}}},  // another node stopped
           stop_times{{"node-2", {10 * kMs}}},   // while the last answer was on its way
           stop_times{{"node-2", {300 * kMs}}},  // after the error
       }) {
    const auto v = judge(records, agent_policy::naive, 10, stopped);
    EXPECT_EQ(v.errors, 1u);
    EXPECT_EQ(v.idle_close_losses, 0u);
    EXPECT_EQ(v.degraded, 1u);
  }
}

TEST(AgentVerdict, OnlyAConnectionClosedUnderTheRequestIsTheRace) {
  const stop_times stopped{{"node-2", {200 * kMs + 500}}};
  for (const std::string kind : {"timeout", "refused", "partial"}) {
    const auto v = judge({answer(0, "node-2"), error(200, kind)}, agent_policy::naive, 10, stopped);
    EXPECT_EQ(v.idle_close_losses, 0u) << kind;
    EXPECT_EQ(v.degraded, 1u) << kind;
  }
  request_record unavailable = answer(200, "node-2");
  unavailable.status = 503;
  const auto v = judge({answer(0, "node-2"), unavailable}, agent_policy::naive, 10, stopped);
  EXPECT_EQ(v.idle_close_losses, 0u);
  EXPECT_EQ(v.degraded, 1u);
}

// One connection is closed once: the errors after the loss (the re-dial refused) are the
// shim's, and a retrying agent whose errors then last is Degraded.
TEST(AgentVerdict, OneLossPerConnectionAndTheErrorsAfterItCount) {
  const stop_times stopped{{"node-2", {200 * kMs + 500}}};
  std::vector<request_record> records{answer(0, "node-2"), error(200, "eof")};
  for (std::uint64_t at = 400; at <= 12'400; at += 3'000) records.push_back(error(at, "refused"));
  const auto v = judge(records, agent_policy::retry, 10, stopped);
  EXPECT_EQ(v.errors, 6u);
  EXPECT_EQ(v.idle_close_losses, 1u);
  EXPECT_EQ(v.degraded, 1u);
  EXPECT_NEAR(v.longest_error_run_s, 12.001, 1e-9);
}

}  // namespace
}  // namespace e2e
