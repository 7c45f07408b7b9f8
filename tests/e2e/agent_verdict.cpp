#include "agent_verdict.hpp"

#include <algorithm>
#include <optional>

namespace e2e {

std::string to_string(agent_policy p) { return p == agent_policy::naive ? "naive" : "retry"; }

bool lost_to_idle_close(const request_record& last_answer, const request_record& r,
                        const stop_times& stopped) {
  const bool closed_under_it = r.error == "eof" || r.error == "reset" || r.error == "broken_pipe" ||
                               r.error == "tls_truncated";
  if (r.status != 0 || !closed_under_it) return false;
  const auto it = stopped.find(last_answer.backend);
  if (it == stopped.end()) return false;
  const std::uint64_t idle_since = last_answer.send_us + last_answer.latency_us;
  return std::any_of(it->second.begin(), it->second.end(), [&](std::uint64_t t) {
    return t >= idle_since && t <= r.send_us + r.latency_us;
  });
}

agent_verdict judge(std::vector<request_record> records, agent_policy policy,
                    double degraded_after_s, const stop_times& stopped) {
  std::sort(records.begin(), records.end(),
            [](const auto& a, const auto& b) { return a.send_us < b.send_us; });
  agent_verdict v;
  bool degraded = false;
  std::optional<std::uint64_t> run_start;
  const request_record* last_answer = nullptr;
  for (const auto& r : records) {
    if (!r.failed()) {
      degraded = false;
      run_start.reset();
      last_answer = &r;
      continue;
    }
    ++v.errors;
    if (last_answer && lost_to_idle_close(*last_answer, r, stopped)) {
      ++v.idle_close_losses;
      last_answer = nullptr;  // that connection is gone: one loss at most
      continue;
    }
    if (!run_start) run_start = r.send_us;
    const std::uint64_t end = r.send_us + r.latency_us;
    v.longest_error_run_s =
        std::max(v.longest_error_run_s, static_cast<double>(end - *run_start) / 1e6);
    const bool persists = static_cast<double>(end - *run_start) >= degraded_after_s * 1e6;
    if (!degraded && (policy == agent_policy::naive || persists)) {
      degraded = true;
      ++v.degraded;
    }
  }
  return v;
}

}  // namespace e2e
