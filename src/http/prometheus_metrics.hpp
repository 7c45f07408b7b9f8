#pragma once

#include <string>

#include "http/http_request_counts.hpp"
#include "readiness/shim_status.hpp"

namespace shim {

// /metrics: the status table, the request counts, the log and event counters, the upstream probe
// and the process figures, in Prometheus text exposition format 0.0.4.
std::string render_metrics(const shim_status& status, const http_request_counts& counts);

}  // namespace shim
