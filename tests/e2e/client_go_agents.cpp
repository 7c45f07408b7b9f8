#include "client_go_agents.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <fstream>
#include <numeric>
#include <sstream>

#include "node_sandbox.hpp"

extern char** environ;

namespace e2e {

client_go_agents::client_go_agents(const api_server& server, const std::filesystem::path& nodeagent,
                                   const std::filesystem::path& dir, std::uint16_t fe_port,
                                   const std::vector<std::string>& nodes) {
  for (const std::string policy : {"naive", "retry"}) {
    for (const auto& node : nodes) {
      agent a;
      a.verdict.node = node;
      a.verdict.policy = policy;
      const std::string base = fmt::format("client-go-{}-{}", node, policy);
      a.csv = dir / (base + ".csv");
      a.transitions = dir / (base + ".transitions");
      std::error_code ec;
      std::filesystem::remove(a.csv, ec);
      std::filesystem::remove(a.transitions, ec);
      sandbox::spawn_options o;
      for (char** e = environ; e && *e; ++e) o.env.emplace_back(*e);
      o.stdout_path = dir / (base + ".log");
      a.process = sandbox::child_process(
          base,
          {nodeagent.string(), fmt::format("--server=https://127.0.0.1:{}", fe_port),
           "--token=" + server.token(), "--certificate-authority=" + server.ca.string(),
           "--node=" + node, "--policy=" + policy, "--csv=" + a.csv.string(),
           "--transition-log=" + a.transitions.string()},
          o);
      agents_.push_back(std::move(a));
    }
  }
}

bool client_go_agents::wait_sending(std::chrono::milliseconds timeout) const {
  return wait_until(
      [&] {
        return std::all_of(agents_.begin(), agents_.end(), [](const agent& a) {
          std::ifstream csv(a.csv);
          std::string header, row;
          return std::getline(csv, header) && std::getline(csv, row);
        });
      },
      timeout, std::chrono::milliseconds(50));
}

void client_go_agents::stop() {
  for (auto& a : agents_) {
    if (a.process.started() && a.process.running()) a.process.signal(SIGTERM);
  }
  // An agent ends once its request in flight is answered (bounded by its 10 s request timeout).
  for (auto& a : agents_) {
    if (a.process.started()) a.process.stop(std::chrono::milliseconds(15'000));
  }
}

std::vector<go_agent_verdict> client_go_agents::verdicts() const {
  std::vector<go_agent_verdict> out;
  for (const auto& a : agents_) {
    go_agent_verdict v = a.verdict;
    // conn,send_s,latency_ms,status,error,backend,retried,failed,request
    std::ifstream csv(a.csv);
    std::string line;
    std::getline(csv, line);  // the header
    while (std::getline(csv, line)) {
      std::vector<std::string> cells;
      std::istringstream in(line);
      for (std::string cell; std::getline(in, cell, ',');) cells.push_back(cell);
      if (cells.size() < 9) continue;
      ++v.requests;
      v.retried += std::stoul(cells[6]);
      v.failed += cells[7] == "1";
    }
    for (const auto& l : sandbox::read_timed_lines(a.transitions))
      v.degraded += l.word == "DEGRADED";
    out.push_back(v);
  }
  return out;
}

std::size_t go_agents_failed(const std::vector<go_agent_verdict>& verdicts) {
  return std::accumulate(verdicts.begin(), verdicts.end(), std::size_t{0},
                         [](std::size_t n, const auto& v) { return n + v.failed; });
}

std::size_t go_agents_degraded(const std::vector<go_agent_verdict>& verdicts,
                               const std::string& policy) {
  std::size_t n = 0;
  for (const auto& v : verdicts) n += v.policy == policy ? v.degraded : 0;
  return n;
}

std::string go_agents_text(const std::vector<go_agent_verdict>& verdicts,
                           const std::string& policy) {
  std::size_t requests = 0, failed = 0;
  for (const auto& v : verdicts) {
    if (v.policy != policy) continue;
    requests += v.requests;
    failed += v.failed;
  }
  if (requests == 0) return "-";
  return fmt::format("{} of {} / {}", failed, requests, go_agents_degraded(verdicts, policy));
}

}  // namespace e2e
