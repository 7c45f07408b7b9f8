// shutdown-shim: holds a node's reboot until kube-apiserver has left the load balancer.
#include <signal.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <cstdio>
#include <exception>
#include <span>
#include <string_view>
#include <vector>

#include "cli/control_commands.hpp"
#include "cli/report_command.hpp"
#include "cli/subcommand.hpp"
#include "config/config.hpp"
#include "daemon/shutdown_shim.hpp"
#include "log/event_recorder.hpp"
#include "log/logger.hpp"
#include "process/target.hpp"
#include "util/build_version.hpp"

namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
// The commands' further outcomes (their usage texts list them).
constexpr int kExitNotFound = 3;
constexpr int kExitUnreadable = 4;

int exit_status(shim::command_outcome outcome) {
  switch (outcome) {
    case shim::command_outcome::ok:
      return 0;
    case shim::command_outcome::failed:
      return kExitFailure;
    case shim::command_outcome::not_found:
      return kExitNotFound;
    case shim::command_outcome::unreadable:
      return kExitUnreadable;
  }
  return kExitFailure;
}

shim::command_outcome help_command(std::span<const std::string_view> args);

// `shutdown-shim NAME ARG...` runs NAME's run(ARG...); a first argument that is any other bare
// word is a usage error naming the nearest (shim::subcommand says what else reads this table).
constexpr auto kCommands = std::to_array<shim::subcommand>({
    {.name = "report",
     .synopsis = shim::kReportSynopsis,
     .summary = "what each recent shutdown did, and whether it was clean (exit 0)",
     .run = shim::report_command},
    {.name = "status",
     .synopsis = shim::kStatusSynopsis,
     .summary = "what the running shim is doing and would do at the next shutdown (exit 0 ready)",
     .run = shim::status_command},
    {.name = "drill",
     .synopsis = shim::kDrillSynopsis,
     .summary = "rehearse a shutdown's drain and measure the load balancer, without a reboot",
     .run = shim::drill_command},
    {.name = "help",
     .synopsis = "[COMMAND]",
     .summary = "show this help, or COMMAND's",
     .run = help_command},
});

shim::command_outcome daemon_usage() {
  std::fputs(shim::usage_text(kCommands).c_str(), stdout);
  return shim::command_outcome::ok;
}

shim::command_outcome help_command(std::span<const std::string_view> args) {
  if (args.empty()) return daemon_usage();
  if (args.front() == "--help" || args.front() == "-h") {
    std::fputs(
        "usage: shutdown-shim help [COMMAND]\n"
        "\n"
        "Shows the daemon's flags and the commands (as --help does), or COMMAND's flags (as\n"
        "shutdown-shim COMMAND --help does).\n",
        stdout);
    return shim::command_outcome::ok;
  }
  if (args.size() > 1) throw shim::usage_error("help: one command at most");
  const std::array<std::string_view, 1> help{"--help"};
  return shim::subcommand_named(args.front(), kCommands).run(help);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string_view> args(argv + 1, argv + argc);
  shim::config cfg;
  try {
    if (!args.empty() && shim::is_command_word(args.front())) {
      return exit_status(
          shim::subcommand_named(args.front(), kCommands).run(std::span(args).subspan(1)));
    }
    cfg = shim::parse_flags(args);
  } catch (const shim::usage_error& e) {
    std::fprintf(stderr, "shutdown-shim: %s\n", e.what());
    return kExitUsage;
  }
  if (cfg.what == shim::config::action::help) return exit_status(daemon_usage());
  if (cfg.what == shim::config::action::version) {
    // systemd's form: the version, then the build in parentheses (help2man reads this line).
    std::printf("shutdown-shim %.*s (%.*s)\n", static_cast<int>(shim::kVersion.size()),
                shim::kVersion.data(), static_cast<int>(shim::kRevision.size()),
                shim::kRevision.data());
    return 0;
  }

  // Writes to a closed HTTP peer must fail with EPIPE, not kill the shim. The child gets the
  // default disposition back before exec.
  signal(SIGPIPE, SIG_IGN);

  // The loop before the logger, which waits on it for stderr to become writable.
  boost::asio::io_context io(1);
  auto log = shim::logger::for_stderr(cfg.format);
  if (auto checked = shim::check_target_at_start(cfg.target); !checked) {
    log.error(checked.error());
    return kExitFailure;
  }
  try {
    log.attach(io);
    shim::event_recorder events(log, cfg.event_log,
                                log.to_journal() ? std::string(shim::journal_socket::kPath) : "");
    shim::shutdown_shim daemon(io, cfg, log, events);
    daemon.start();
    auto outcome = daemon.run();
    switch (outcome.what) {
      case shim::shim_outcome::kind::done:
        return 0;
      case shim::shim_outcome::kind::child_exited:
        return outcome.child_exit_code;
      case shim::shim_outcome::kind::inhibit_failed:
        log.error("--inhibit=required: could not take the logind delay lock",
                  {{"error", outcome.error}});
        return kExitFailure;
      case shim::shim_outcome::kind::ensure_failed:
        log.error("--ensure-inhibit-delay=required: could not raise logind's InhibitDelayMaxSec",
                  {{"error", outcome.error}});
        return kExitFailure;
    }
  } catch (const std::exception& e) {
    log.error(e.what());
    return kExitFailure;
  }
  return kExitFailure;
}
