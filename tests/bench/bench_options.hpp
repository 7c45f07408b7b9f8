// The driver's command line: which sections to run, and how many samples of each.

#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace bench {

struct options {
  int reboots = 20;  // per hold scenario; the unready latency pools both scenarios
  int sigterms = 20;
  int starts = 10;
  int idle_seconds = 10;
  std::string drain = "500ms";
  int wrk_seconds = 10;
  int wrk_connections = 50;
  int wrk_threads = 1;
  int wrk_rounds = 3;
  int crashes = 20;  // of the apiserver, each to the first 503
  int hangs = 5;     // of the apiserver, each to the first 503
  std::set<std::string> sections{"reboot", "sigterm", "startup", "idle", "http", "upstream"};
  std::string build_info = "unknown";
  // Where each shim keeps its record of signalled processes, in a directory of its own below this
  // one: scripts/bench mounts a tmpfs here, as /run is on a node. Empty: the shim's default.
  std::string state_dir;
  // Other shim binaries for the /readyz section, interleaved with the rest: "LABEL=PATH".
  std::vector<std::pair<std::string, std::string>> shim_variants;
};

options parse_options(int argc, char** argv);

// Milliseconds in a Go-ish duration as this driver writes them: "500ms", "2s".
std::uint64_t duration_us(const std::string& text);

}  // namespace bench
