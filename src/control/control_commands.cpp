#include "control/control_commands.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <thread>

#include "config/command_flags.hpp"
#include "config/config.hpp"
#include "control/control_routes.hpp"
#include "http/control_client.hpp"
#include "report/flat_json.hpp"
#include "util/duration_text.hpp"

namespace shim {

namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNoDaemon = 3;
constexpr int kExitCannotAsk = 4;

// How often a waiting `drill` asks how it goes: it runs on the operator's terminal, one request a
// second over the local socket, and only while the drill lasts.
constexpr std::chrono::seconds kFollowInterval{1};

struct command_flags {
  bool help = false;
  bool json = false;
  bool stop = false;
  bool no_wait = false;
  std::string state_dir;
  std::string duration;  // as given, checked by the shim (route_control)
  std::string lb_fall;
};

command_flags parse(std::span<const std::string_view> args, bool drill) {
  command_flags f;
  command_flag_reader p{args};
  for (; p.i < args.size(); ++p.i) {
    const std::string_view arg = args[p.i];
    // A flag without a value: "--json=x" is refused, not taken for --json.
    const auto flag = [&](std::string_view name, bool& b) {
      if (!is_flag(arg, name)) return false;
      if (arg != name) throw usage_error(fmt::format("{} takes no value", name));
      b = true;
      return true;
    };
    if (flag("--help", f.help) || flag("-h", f.help) || flag("--json", f.json)) continue;
    if (drill && (flag("--stop", f.stop) || flag("--no-wait", f.no_wait))) continue;
    if (is_flag(arg, "--state-dir")) {
      f.state_dir = p.value_of("--state-dir", arg);
    } else if (drill && is_flag(arg, "--duration")) {
      f.duration = p.value_of("--duration", arg);
      parse_duration(f.duration);  // a typo is the CLI's usage error, not a 400 from the shim
    } else if (drill && is_flag(arg, "--lb-fall")) {
      f.lb_fall = p.value_of("--lb-fall", arg);
    } else {
      throw usage_error(fmt::format("{}: unknown flag {:?}", drill ? "drill" : "status", arg));
    }
  }
  if (f.stop && (!f.duration.empty() || !f.lb_fall.empty())) {
    throw usage_error("drill --stop takes no --duration or --lb-fall");
  }
  return f;
}

std::filesystem::path socket_path(const command_flags& f) {
  config cfg;
  cfg.state_dir = f.state_dir;
  return std::filesystem::path(state_directory(cfg)) / kControlSocketName;
}

// A failed exchange: no shim (3), or a socket that could not be asked (4).
int exchange_failure(std::string_view command, const std::string& error) {
  std::fprintf(stderr, "shutdown-shim %.*s: %s\n", static_cast<int>(command.size()), command.data(),
               error.c_str());
  return is_no_daemon(error) ? kExitNoDaemon : kExitCannotAsk;
}

void print(const std::string& body, std::FILE* to = stdout) {
  std::fputs(body.c_str(), to);
  if (!body.empty() && body.back() != '\n') std::fputc('\n', to);
}

// The control socket's JSON is one object and a newline; the reader takes the object alone.
std::optional<flat_json_object> parse_answer(std::string_view body) {
  while (!body.empty() && body.back() == '\n') body.remove_suffix(1);
  return parse_flat_json(body);
}

std::string member(const flat_json_object& object, std::string_view key) {
  for (const auto& [k, v] : object) {
    if (k == key) return v.text;
  }
  return {};
}

// Follows the drill until it is over; the exit code from what the load balancer did.
int follow_drill(const std::filesystem::path& socket, bool json) {
  std::string last_summary;
  for (;;) {
    auto asked = control_request(socket, "GET", "/drill?json");
    if (!asked) return exchange_failure("drill", asked.error());
    const auto object = parse_answer(asked.value().body);
    if (asked.value().status != 200 || !object) {
      print(asked.value().body, stderr);
      return kExitCannotAsk;
    }
    const std::string summary = member(*object, "summary");
    const bool over = member(*object, "drilling") != "yes";
    if (over) {
      if (json) {
        print(asked.value().body);
      } else {
        print(summary);
      }
      // Every checker saw the drill (lb_drain_left_ms is there only then), and there were some.
      const bool seen =
          member(*object, "checkers") == "yes" && !member(*object, "lb_drain_left_ms").empty();
      return seen ? kExitOk : kExitFailed;
    }
    if (!json && summary != last_summary) print(summary);
    last_summary = summary;
    std::this_thread::sleep_for(kFollowInterval);
  }
}

}  // namespace

std::string status_usage_text() {
  return fmt::format(
      "Usage: shutdown-shim status {}\n"
      "\n"
      "What the running shim is doing and would do at the next shutdown: the phase, the lock,\n"
      "each readiness check, the target and what the next shutdown sends it, the hold; during a\n"
      "hold or a drill, the time elapsed and left. Asks <state-dir>/control.sock (root only).\n"
      "\n"
      "  --json            one JSON object instead of the text\n"
      "  --state-dir=PATH  where the shim's control socket is (default: {})\n"
      "\n"
      "Exit status: 0 ready, 1 not ready, 2 usage, 3 no shim listens, 4 the request failed.\n",
      kStatusSynopsis, kDefaultStateDir);
}

std::string drill_usage_text() {
  return fmt::format(
      "Usage: shutdown-shim drill {}\n"
      "\n"
      "Rehearses a shutdown's drain: /readyz answers 503 for the drill, as at a shutdown, but no\n"
      "signal is sent, logind is not touched and the lock stays held; at the end the shim is "
      "ready\n"
      "again. Measures the load balancer: for each address that probed /readyz in the minute\n"
      "before, its interval, its first 503 and when it had seen N in a row, against the\n"
      "drain-delay. A real shutdown during a drill becomes the shutdown at once, with the drain\n"
      "already served counted.\n"
      "\n"
      "  --duration=D      how long (default: the shim's drain delay; at most {})\n"
      "  --lb-fall=N       503s in a row that take a checker's node out (default: 3)\n"
      "  --stop            end the drill under way now\n"
      "  --no-wait         start it and return; `shutdown-shim status` follows it\n"
      "  --json            the result as one JSON object\n"
      "  --state-dir=PATH  where the shim's control socket is (default: {})\n"
      "\n"
      "Exit status: 0 every checker saw the drill, 1 refused or not every checker saw it (or none\n"
      "probed), 2 usage, 3 no shim listens, 4 the request failed.\n",
      kDrillSynopsis, format_duration(kMaxDrill), kDefaultStateDir);
}

int status_command(std::span<const std::string_view> args) {
  command_flags f;
  try {
    f = parse(args, false);
  } catch (const usage_error& e) {
    std::fprintf(stderr, "shutdown-shim: %s\n", e.what());
    return kExitUsage;
  }
  if (f.help) {
    std::fputs(status_usage_text().c_str(), stdout);
    return kExitOk;
  }
  auto asked = control_request(socket_path(f), "GET", f.json ? "/status?json" : "/status");
  if (!asked) return exchange_failure("status", asked.error());
  const auto& answer = asked.value();
  if (answer.status == 200 || answer.status == 503) {
    print(answer.body);
    return answer.status == 200 ? kExitOk : kExitFailed;
  }
  print(answer.body, stderr);
  return kExitCannotAsk;
}

int drill_command(std::span<const std::string_view> args) {
  command_flags f;
  try {
    f = parse(args, true);
  } catch (const usage_error& e) {
    std::fprintf(stderr, "shutdown-shim: %s\n", e.what());
    return kExitUsage;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "shutdown-shim: drill --duration: %s\n", e.what());
    return kExitUsage;
  }
  if (f.help) {
    std::fputs(drill_usage_text().c_str(), stdout);
    return kExitOk;
  }
  const auto socket = socket_path(f);
  std::string target = f.stop ? "/drill/stop" : "/drill";
  char sep = '?';
  const auto param = [&](std::string_view key, const std::string& value) {
    if (value.empty()) return;
    target += fmt::format("{}{}={}", sep, key, value);
    sep = '&';
  };
  param("duration", f.duration);
  param("lb-fall", f.lb_fall);
  if (f.json || !f.no_wait) param("json", "1");
  auto asked = control_request(socket, "POST", target);
  if (!asked) return exchange_failure("drill", asked.error());
  const auto& answer = asked.value();
  if (answer.status != 200) {
    print(answer.body, stderr);
    return answer.status == 409 ? kExitFailed : kExitCannotAsk;
  }
  if (f.no_wait || f.stop) {
    if (f.json) {
      print(answer.body);
    } else {
      const auto object = parse_answer(answer.body);
      print(object ? member(*object, "summary") : answer.body);
    }
    return kExitOk;
  }
  return follow_drill(socket, f.json);
}

}  // namespace shim
