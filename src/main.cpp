// shutdown-shim: holds a node's reboot until kube-apiserver has left the load balancer.
#include <signal.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <cstdio>
#include <span>
#include <string_view>
#include <system_error>
#include <vector>

#include "config/config.hpp"
#include "config/subcommand.hpp"
#include "control/control_commands.hpp"
#include "daemon/shutdown_shim.hpp"
#include "log/event_log.hpp"
#include "process/target.hpp"
#include "report/shutdown_report.hpp"
#include "util/boot_id.hpp"
#include "util/build_version.hpp"

namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
// `shutdown-shim report`: 0 clean and 1 not clean, as above; then these.
constexpr int kExitNoShutdown = 3;
constexpr int kExitUnreadable = 4;

int usage_failure(const shim::usage_error& e) {
  std::fprintf(stderr, "shutdown-shim: %s\n", e.what());
  return kExitUsage;
}

int report_command(std::span<const std::string_view> args) {
  shim::report_options options;
  try {
    options = shim::parse_report_flags(args);
  } catch (const shim::usage_error& e) {
    return usage_failure(e);
  }
  if (options.help) {
    std::fputs(shim::report_usage_text().c_str(), stdout);
    return 0;
  }
  const auto report = shim::make_report(options, shim::current_boot_id());
  std::fputs(report.out.c_str(), stdout);
  if (!report.note.empty()) std::fprintf(stderr, "shutdown-shim report: %s\n", report.note.c_str());
  switch (report.result) {
    case shim::report::outcome::clean:
      return 0;
    case shim::report::outcome::not_clean:
      return kExitFailure;
    case shim::report::outcome::no_shutdown:
      return kExitNoShutdown;
    case shim::report::outcome::unreadable:
      return kExitUnreadable;
  }
  return kExitFailure;
}

int help_command(std::span<const std::string_view> args);

// `shutdown-shim NAME ARG...` runs NAME's run(ARG...); a first argument that is any other bare
// word is a usage error naming the nearest (shim::subcommand says what else reads this table).
constexpr auto kCommands = std::to_array<shim::subcommand>({
    {.name = "report",
     .synopsis = "[--event-log=PATH|--journal] [--boots=N] [--json] [--journal-dir=DIR]",
     .summary = "what each recent shutdown did, and whether it was clean (exit 0)",
     .run = report_command},
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

int daemon_usage() {
  std::fputs(shim::usage_text(kCommands).c_str(), stdout);
  return 0;
}

int help_command(std::span<const std::string_view> args) {
  if (args.empty()) return daemon_usage();
  if (args.front() == "--help" || args.front() == "-h") {
    std::fputs(
        "usage: shutdown-shim help [COMMAND]\n"
        "\n"
        "Shows the daemon's flags and the commands (as --help does), or COMMAND's flags (as\n"
        "shutdown-shim COMMAND --help does).\n",
        stdout);
    return 0;
  }
  if (args.size() > 1) return usage_failure(shim::usage_error("help: one command at most"));
  try {
    const std::array<std::string_view, 1> help{"--help"};
    return shim::subcommand_named(args.front(), kCommands).run(help);
  } catch (const shim::usage_error& e) {
    return usage_failure(e);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string_view> args(argv + 1, argv + argc);
  const shim::subcommand* command = nullptr;
  shim::config cfg;
  try {
    if (!args.empty() && shim::is_command_word(args.front())) {
      command = &shim::subcommand_named(args.front(), kCommands);
    } else {
      cfg = shim::parse_flags(args);
    }
  } catch (const shim::usage_error& e) {
    return usage_failure(e);
  }
  if (command != nullptr) return command->run(std::span(args).subspan(1));
  if (cfg.what == shim::config::action::help) return daemon_usage();
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
  } catch (const std::system_error& e) {
    log.error(e.what());
    return kExitFailure;
  } catch (const std::exception& e) {
    log.error(e.what());
    return kExitFailure;
  }
  return kExitFailure;
}
