#pragma once

#include <span>
#include <string>
#include <string_view>

#include "cli/command_outcome.hpp"
#include "report/shutdown_report.hpp"

namespace shim {

// `shutdown-shim report`'s command line: the report's options, or a request for its usage.
struct report_command_line {
  report_options options;
  bool help = false;
};

inline constexpr std::string_view kReportSynopsis =
    "[--event-log=PATH|--journal] [--boots=N] [--json] [--journal-dir=DIR]";

// The arguments after "report". Throws usage_error, one line naming the flag.
report_command_line parse_report_flags(std::span<const std::string_view> args);
std::string report_usage_text();

// Prints the report (or the usage) and says what became of the last shutdown.
command_outcome report_command(std::span<const std::string_view> args);

}  // namespace shim
