#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "e2e_common.hpp"
#include "process.hpp"

namespace e2e {

// What one client-go agent (tests/realapi's nodeagent) saw, from its CSV and transition log.
struct go_agent_verdict {
  std::string node;
  std::string policy;  // naive or retry
  std::size_t requests = 0;
  std::size_t failed = 0;    // requests that ended in an error after client-go's own retries
  std::size_t degraded = 0;  // DEGRADED transitions
  std::size_t retried = 0;   // client-go's extra attempts (a Retry-After waited out, a GET resent)
};

// The client-go node agents of a run against realapi: per node a naive one and one that retries
// (Degraded after 10 s of errors), each writing its node every second through the load balancer
// over HTTP/2, verifying the servers' certificate with the run's CA. Started by PID, stopped with
// SIGTERM (an agent then stops sending; a request the stop cuts is not recorded).
class client_go_agents {
 public:
  client_go_agents(const api_server& server, const std::filesystem::path& nodeagent,
                   const std::filesystem::path& dir, std::uint16_t fe_port,
                   const std::vector<std::string>& nodes);
  // Every agent has a request recorded, so its kept-alive connection is open: until then an
  // agent's dial moves the load balancer's round robin under connections placed by it.
  bool wait_sending(std::chrono::milliseconds timeout) const;
  void stop();
  // After stop(): one per agent, in the order started.
  std::vector<go_agent_verdict> verdicts() const;

 private:
  struct agent {
    go_agent_verdict verdict;
    std::filesystem::path csv, transitions;
    sandbox::child_process process;
  };
  std::vector<agent> agents_;
};

// Failed requests and Degraded transitions of the agents of one policy: "3 / 1"; "-" for none.
std::string go_agents_text(const std::vector<go_agent_verdict>& verdicts,
                           const std::string& policy);
std::size_t go_agents_failed(const std::vector<go_agent_verdict>& verdicts);
std::size_t go_agents_degraded(const std::vector<go_agent_verdict>& verdicts,
                               const std::string& policy);

}  // namespace e2e
