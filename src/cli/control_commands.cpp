#include "cli/control_commands.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <thread>

#include "cli/command_flags.hpp"
#include "config/config.hpp"
#include "control/control_routes.hpp"
#include "http/control_client.hpp"
#include "report/flat_json.hpp"
#include "util/duration_text.hpp"

namespace shim {

namespace {

// How often a waiting `drill` asks how it goes: it runs on the operator's terminal, one request a
// second over the local socket, and only while the drill lasts.
constexpr std::chrono::seconds kFollowInterval{1};

// The flags of status and drill (status sets the first three).
struct control_command_line {
  bool help = false;
  bool json = false;
  std::string state_dir;
  bool stop = false;
  bool no_wait = false;
  std::string duration;  // as given, checked by the shim (route_control)
  std::string lb_fall;
};

using control_flag = flag<control_command_line>;

std::vector<control_flag> status_flag_rows() {
  using sv = std::string_view;
  return {
      {.spec = {.name = "--json", .help = "one JSON object instead of the text"},
       .set = [](control_command_line& c, sv, sv) { c.json = true; }},
      {.spec = {.name = "--state-dir",
                .value_name = "PATH",
                .help = "where the shim's control socket is",
                .default_value = std::string(kDefaultStateDir)},
       .set = [](control_command_line& c, sv, sv value) { c.state_dir = value; }},
      {.spec = {.name = "--help", .help = "show this help", .alias = "-h", .ends_parsing = true},
       .set = [](control_command_line& c, sv, sv) { c.help = true; }},
  };
}

constexpr std::size_t kControlHelpColumn = 20;

const flag_table<control_command_line>& status_flags() {
  static const flag_table<control_command_line> table{
      .command = "status", .help_column = kControlHelpColumn, .flags = status_flag_rows()};
  return table;
}

const flag_table<control_command_line>& drill_flags() {
  using sv = std::string_view;
  static const flag_table<control_command_line> table = [] {
    std::vector<control_flag> rows{
        {.spec = {.name = "--duration",
                  .value_name = "D",
                  .help = fmt::format("how long (default: the shim's drain delay; at most {})",
                                      format_duration(kMaxDrill))},
         .set =
             [](control_command_line& c, sv name, sv value) {
               // A typo is the CLI's usage error, not a 400 from the shim.
               try {
                 parse_duration(value);
               } catch (const std::invalid_argument& e) {
                 throw usage_error(fmt::format("drill {}: {}", name, e.what()));
               }
               c.duration = value;
             }},
        {.spec = {.name = "--lb-fall",
                  .value_name = "N",
                  .help = "503s in a row that take a checker's node out",
                  .default_value = "3"},
         .set = [](control_command_line& c, sv, sv value) { c.lb_fall = value; }},
        {.spec = {.name = "--stop", .help = "end the drill under way now"},
         .set = [](control_command_line& c, sv, sv) { c.stop = true; }},
        {.spec = {.name = "--no-wait",
                  .help = "start it and return; `shutdown-shim status` follows it"},
         .set = [](control_command_line& c, sv, sv) { c.no_wait = true; }},
    };
    for (auto& row : status_flag_rows()) rows.push_back(std::move(row));
    return flag_table<control_command_line>{
        .command = "drill", .help_column = kControlHelpColumn, .flags = std::move(rows)};
  }();
  return table;
}

std::filesystem::path socket_path(const control_command_line& f) {
  config cfg;
  cfg.state_dir = f.state_dir;
  return std::filesystem::path(state_directory(cfg)) / kControlSocketName;
}

// A failed exchange: no shim, or a socket that could not be asked.
command_outcome exchange_failure(std::string_view command, const result<control_answer>& failed) {
  std::fprintf(stderr, "shutdown-shim %.*s: %s\n", static_cast<int>(command.size()), command.data(),
               failed.error().c_str());
  return is_no_daemon(failed) ? command_outcome::not_found : command_outcome::unreadable;
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

// Follows the drill until it is over; the outcome from what the load balancer did.
command_outcome follow_drill(const std::filesystem::path& socket, bool json) {
  std::string last_summary;
  for (;;) {
    auto asked = control_request(socket, "GET", "/drill?json");
    if (!asked) return exchange_failure("drill", asked);
    const auto object = parse_answer(asked.value().body);
    if (asked.value().status != 200 || !object) {
      print(asked.value().body, stderr);
      return command_outcome::unreadable;
    }
    const std::string summary = member(*object, "summary");
    const bool over = member(*object, "drilling") != "yes";
    if (over) {
      print(json ? asked.value().body : summary);
      // Every checker saw the drill (lb_drain_left_ms is there only then), and there were some.
      const bool seen =
          member(*object, "checkers") == "yes" && !member(*object, "lb_drain_left_ms").empty();
      return seen ? command_outcome::ok : command_outcome::failed;
    }
    if (!json && summary != last_summary) print(summary);
    last_summary = summary;
    std::this_thread::sleep_for(kFollowInterval);
  }
}

std::string status_usage_text() {
  return fmt::format(
      "Usage: shutdown-shim status {}\n"
      "\n"
      "What the running shim is doing and would do at the next shutdown: the phase, the lock,\n"
      "each readiness check, the target and what the next shutdown sends it, the hold; during a\n"
      "hold or a drill, the time elapsed and left. Asks <state-dir>/control.sock (root only).\n"
      "\n"
      "{}"
      "\n"
      "Exit status: 0 ready, 1 not ready, 2 usage, 3 no shim listens, 4 the request failed.\n",
      kStatusSynopsis, flags_help(status_flags()));
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
      "{}"
      "\n"
      "Exit status: 0 every checker saw the drill, 1 refused or not every checker saw it (or none\n"
      "probed), 2 usage, 3 no shim listens, 4 the request failed.\n",
      kDrillSynopsis, flags_help(drill_flags()));
}

}  // namespace

command_outcome status_command(std::span<const std::string_view> args) {
  const auto read = read_command_flags(status_flags(), args, status_usage_text);
  if (!read) return command_outcome::ok;
  const control_command_line& f = *read;
  auto asked = control_request(socket_path(f), "GET", f.json ? "/status?json" : "/status");
  if (!asked) return exchange_failure("status", asked);
  const auto& answer = asked.value();
  if (answer.status == 200 || answer.status == 503) {
    print(answer.body);
    return answer.status == 200 ? command_outcome::ok : command_outcome::failed;
  }
  print(answer.body, stderr);
  return command_outcome::unreadable;
}

command_outcome drill_command(std::span<const std::string_view> args) {
  const auto read = read_command_flags(drill_flags(), args, drill_usage_text);
  if (!read) return command_outcome::ok;
  const control_command_line& f = *read;
  if (f.stop && (!f.duration.empty() || !f.lb_fall.empty())) {
    throw usage_error("drill --stop takes no --duration or --lb-fall");
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
  if (!asked) return exchange_failure("drill", asked);
  const auto& answer = asked.value();
  if (answer.status != 200) {
    print(answer.body, stderr);
    return answer.status == 409 ? command_outcome::failed : command_outcome::unreadable;
  }
  if (f.no_wait || f.stop) {
    if (f.json) {
      print(answer.body);
    } else {
      const auto object = parse_answer(answer.body);
      print(object ? member(*object, "summary") : answer.body);
    }
    return command_outcome::ok;
  }
  return follow_drill(socket, f.json);
}

}  // namespace shim
