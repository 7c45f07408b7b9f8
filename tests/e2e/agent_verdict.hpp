#pragma once

// What a rolling upgrade's node agent reports, judged from its requests (e2e_rolling).

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "load_client.hpp"

namespace e2e {

// naive: any error is Degraded (the machine-config daemon of seed 000); retry: Degraded only when
// its errors last degraded_after_s.
enum class agent_policy { naive, retry };

std::string to_string(agent_policy p);

struct agent_verdict {
  std::size_t errors = 0;
  std::size_t idle_close_losses = 0;  // of the errors, PATCHes lost to net/http's idle close
  std::size_t degraded = 0;           // transitions to Degraded, from the other errors
  double longest_error_run_s = 0;     // from the first error of a run to the last one's end
};

// When each node's apiserver stopped listening (net/http's Shutdown), from its lifecycle logs.
using stop_times = std::map<std::string, std::vector<std::uint64_t>>;

// net/http's Server.Shutdown closes the kept-alive connections that are idle as it stops
// listening. A PATCH written just then is lost, an eof or a reset that Go's transport does not
// send again (it resends only idempotent requests): the server's race, with or without a shim;
// the stand-in keeps it (CI lost one retrying agent's PATCH so on 2026-12-04,
// e2e-rolling-upgrade). Such an error came on a connection whose last answer was a node's before
// that node stopped listening, and it ended after that.
bool lost_to_idle_close(const request_record& last_answer, const request_record& r,
                        const stop_times& stopped);

// What the agent reports, from its requests in order: naive: every error makes it Degraded (and a
// success clears it); retry: Degraded once an error comes degraded_after_s or more after the
// first error of an unbroken run of errors. A PATCH lost to the idle close is counted apart and
// neither starts nor extends a run.
agent_verdict judge(std::vector<request_record> records, agent_policy policy,
                    double degraded_after_s, const stop_times& stopped);

}  // namespace e2e
