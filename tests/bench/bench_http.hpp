// /readyz under load: wrk against the shim (with and without its upstream check), nginx and
// HAProxy, interleaved round by round.

#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "bench_options.hpp"
#include "node_sandbox.hpp"

namespace bench {

struct wrk_result {
  double requests_per_s = NAN, p50_ms = NAN, p99_ms = NAN;
  std::uint64_t socket_errors = 0, non_2xx = 0;
  std::uint64_t requests = 0;
  double server_cpu = NAN;  // share of one core used by the server's processes during the run
  // The server's CPU time per request: the figure that depends least on what else the shared
  // machine is doing.
  double cpu_us_per_request = NAN;
};

inline constexpr const char* kPollingServer = "shutdown-shim, upstream check on";

struct http_report {
  // mode ("keep-alive" / "new connections") -> server -> one result per round
  std::map<std::string, std::map<std::string, std::vector<wrk_result>>> results;
  std::vector<std::string> servers;
  std::uint64_t shim_hwm_before_kb = 0, shim_hwm_after_kb = 0;
};

http_report run_http(sandbox::node_sandbox& sb, const options& o);

}  // namespace bench
