// apiserver_flags: arbitrary bytes as a process's /proc/PID/cmdline (NUL-separated words), read as
// kube-apiserver's command line, and the signal plan made from what it gives.
// - read_apiserver_flags never crashes; it either fails with a message or gives a delay within
//   [0, 24h];
// - the plan then signals within [0, drain] (or --signal-delay, given), and its line is one line
//   that names the delay it read.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "apiserver/apiserver_flags.hpp"
#include "apiserver/signal_plan.hpp"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace std::chrono_literals;
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> argv;
  while (!rest.empty()) {
    const auto nul = rest.find('\0');
    argv.emplace_back(rest.substr(0, nul));
    if (nul == std::string_view::npos) break;
    rest.remove_prefix(nul + 1);
  }
  const auto read = shim::read_apiserver_flags(argv);
  if (!read) {
    check(!read.error().empty());
  } else {
    check(read.value().delay >= 0s && read.value().delay <= 24h);
  }
  for (const bool given : {false, true}) {
    shim::signal_plan plan(
        {.drain_delay = 70s,
         .exit_timeout = 65s,
         .signal_delay = given ? std::optional(std::chrono::nanoseconds(5s)) : std::nullopt,
         .has_target = true});
    plan.set_apiserver(read, "pid 1's command line");
    const auto delay = plan.signal_delay();
    check(given ? delay == 5s : delay >= 0s && delay <= 70s);
    for (const auto lb : {std::optional<bool>(), std::optional(true), std::optional(false)}) {
      const auto line = plan.line(lb);
      check(!line.empty());
      if (read) check(line.find("--shutdown-delay-duration=") != std::string::npos);
    }
  }
  return 0;
}
